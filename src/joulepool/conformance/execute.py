"""`pool exec`: one conformance case in, one result out (CONFORMANCE.md).

No clock and no randomness: the same case always gives the same bytes. A case that breaks
the rules of its shape gets `{"error": "invalid_input", "detail": ...}` naming the field;
nothing here ever lets a traceback reach the caller.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from joulepool.conformance import decisions, ledger_ops
from joulepool.conformance.decisions import Operation, Result
from joulepool.errors import AttributionRefused, InvalidInput, InvalidTree, PoolError
from joulepool.jsonio import dumps_canonical, loads_strict

OPERATIONS: dict[str, Operation] = {
    "decide": decisions.op_decide,
    "attribute": decisions.op_attribute,
    "derive_estimate": decisions.op_derive_estimate,
    "preemption_order": decisions.op_preemption_order,
    "idle": decisions.op_idle,
    "over_reservation": decisions.op_over_reservation,
    "live_projection": decisions.op_live_projection,
    "idle_act": decisions.op_idle_act,
    "victims": decisions.op_victims,
    "seal": ledger_ops.op_seal,
    "replay": ledger_ops.op_replay,
    "period_usage": ledger_ops.op_period_usage,
    "witness": ledger_ops.op_witness,
    "check_witness": ledger_ops.op_check_witness,
}
"""Every operation of `pool exec`, by the name a case gives in `op` (CONFORMANCE.md)."""


def run_case(case: Any) -> Result:
    """Run one parsed case; every refusal becomes a result, never an exception (CONFORMANCE.md)."""
    try:
        if not isinstance(case, Mapping):
            raise InvalidInput("", "a case must be a JSON object")
        op = case.get("op")
        if not isinstance(op, str) or op not in OPERATIONS:
            known = ", ".join(sorted(OPERATIONS))
            raise InvalidInput("op", f"unknown operation {op!r}; expected one of {known}")
        return OPERATIONS[op](case)
    except InvalidTree as exc:
        return {"error": exc.code, "detail": str(exc)}
    except AttributionRefused as exc:
        return {"error": exc.error, "detail": str(exc)}
    except InvalidInput as exc:
        return {"error": "invalid_input", "detail": str(exc)}
    except PoolError as exc:
        return {"error": getattr(exc, "error", exc.code), "detail": str(exc)}
    except RecursionError:
        return {"error": "invalid_input", "detail": "nested too deeply"}


def exec_bytes(data: bytes) -> bytes:
    """The whole of `pool exec`: the bytes of one case to the bytes of its result."""
    try:
        result = run_case(loads_strict(data))
    except InvalidInput as exc:
        result = {"error": "invalid_input", "detail": str(exc)}
    except Exception as exc:  # a bug must still not print a traceback (CONFORMANCE.md)
        result = {"error": "internal_error", "detail": repr(exc)}
    text = dumps_canonical(result) + "\n"
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # The reader refuses lone surrogates, so none should reach a result; should one
        # still, the answer stays valid UTF-8 and carries no surrogate (CONFORMANCE.md).
        return text.encode("utf-8", "replace")
