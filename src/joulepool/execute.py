"""`pool exec`: one conformance case in, one result out (CONFORMANCE.md).

No clock and no randomness: the same case always gives the same bytes. A case that breaks
the rules of its shape gets `{"error": "invalid_input", "detail": ...}` naming the field;
nothing here ever lets a traceback reach the caller.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from joulepool.admission import decide
from joulepool.attribution import attribute
from joulepool.checks import check_figure, check_keys, check_text
from joulepool.claim import Claim
from joulepool.errors import AttributionRefused, InvalidInput, InvalidTree, PoolError
from joulepool.estimate import DEFAULT_REQUIRED, Observation, derive_estimate
from joulepool.grade import Energy
from joulepool.idle import IdleObservation, IdlePolicy, idle_verdicts, reclamation_order
from joulepool.jsonio import dumps_canonical, loads_strict
from joulepool.preemption import Workload, preemption_order, realised_cost
from joulepool.tree import Tree, Usage

Result = dict[str, Any]
Operation = Callable[[Mapping[str, Any]], Result]


def _list(case: Mapping[str, Any], name: str) -> list[Any]:
    value = case[name]
    if not isinstance(value, list):
        raise InvalidInput(name, "must be a list")
    return value


def op_decide(case: Mapping[str, Any]) -> Result:
    """§4: the verdict for one claim against a tree and its usage."""
    check_keys(case, "", ("op", "tree", "usage", "claim"))
    tree = Tree.from_json(case["tree"])
    usage = Usage.from_json(tree, case["usage"])
    claim = Claim.from_json(case["claim"])
    return decide(tree, usage, claim).to_json()


def op_attribute(case: Mapping[str, Any]) -> Result:
    """§2.5: one device's total divided among its occupants."""
    check_keys(case, "", ("op", "total", "occupants"))
    total = Energy.from_json(case["total"], "total")
    occupants = case["occupants"]
    if not isinstance(occupants, Mapping):
        raise InvalidInput("occupants", "must be an object {id: weight}")
    for key, weight in occupants.items():
        check_text(key, "occupants")
        check_figure(weight, f"occupants.{key}")
    shares = attribute(total, occupants)
    return {"shares": {k: v.to_json() for k, v in shares.items()}}


def op_derive_estimate(case: Mapping[str, Any]) -> Result:
    """§2.6: an estimate earned from a history of released claims, or why not.

    `class` missing, null or empty declines `empty_class` with both counts (DESIGN.md §3).
    """
    case = check_keys(case, "", ("op", "history"), ("class", "required", "entitlement"))
    history = []
    for i, given in enumerate(_list(case, "history")):
        where = f"history[{i}]"
        item = check_keys(given, where, ("entitlement", "actual"), ("class",))
        declared = item.get("class")
        if declared is not None and not isinstance(declared, str):
            raise InvalidInput(f"{where}.class", "must be a string")
        history.append(
            Observation(
                declared,
                check_text(item["entitlement"], f"{where}.entitlement"),
                Energy.from_json(item["actual"], f"{where}.actual"),
            )
        )
    class_ = case.get("class")
    if class_ is not None and not isinstance(class_, str):
        raise InvalidInput("class", "must be a string")
    required = check_figure(case.get("required", DEFAULT_REQUIRED), "required")
    scope = case.get("entitlement")
    if scope is not None:
        check_text(scope, "entitlement")
    return derive_estimate(history, class_, required, scope).to_json()


def op_preemption_order(case: Mapping[str, Any]) -> Result:
    """§5: realised costs and the order capacity is reclaimed in."""
    check_keys(case, "", ("op", "workloads"))
    workloads = []
    for i, item in enumerate(_list(case, "workloads")):
        where = f"workloads[{i}]"
        check_keys(item, where, ("key", "spent_uj", "completed_units", "priority"))
        workloads.append(
            Workload(
                check_text(item["key"], f"{where}.key"),
                check_figure(item["spent_uj"], f"{where}.spent_uj"),
                check_figure(item["completed_units"], f"{where}.completed_units"),
                check_figure(item["priority"], f"{where}.priority"),
            )
        )
    order = preemption_order(workloads)
    costs: dict[str, str | None] = {}
    for w in workloads:
        cost = realised_cost(w.spent_uj, w.completed_units)
        costs[w.key] = None if cost is None else f"{cost.numerator}/{cost.denominator}"
    return {"order": order, "costs": costs}


def op_idle(case: Mapping[str, Any]) -> Result:
    """§2.7: idle verdicts and the reclamation order under a policy."""
    check_keys(case, "", ("op", "policy", "workloads"))
    policy = idle_policy_from_json(case["policy"])
    observations = []
    for i, item in enumerate(_list(case, "workloads")):
        where = f"workloads[{i}]"
        check_keys(item, where, ("key", "held_devices", "observed_us", "energy"))
        observations.append(
            IdleObservation(
                check_text(item["key"], f"{where}.key"),
                check_figure(item["held_devices"], f"{where}.held_devices"),
                check_figure(item["observed_us"], f"{where}.observed_us"),
                Energy.from_json(item["energy"], f"{where}.energy"),
            )
        )
    verdicts = idle_verdicts(policy, observations)
    return {
        "verdicts": {k: v.to_json() for k, v in verdicts.items()},
        "order": reclamation_order(policy, observations),
    }


def idle_policy_from_json(obj: object, where: str = "policy") -> IdlePolicy:
    """Read the CONFORMANCE.md policy shape `{"window_us"?, "threshold_uw"?}` (§2.7)."""
    policy = check_keys(obj, where, (), ("window_us", "threshold_uw"))
    window = policy.get("window_us")
    threshold = policy.get("threshold_uw")
    return IdlePolicy(
        None if window is None else check_figure(window, f"{where}.window_us"),
        None if threshold is None else check_figure(threshold, f"{where}.threshold_uw"),
    )


OPERATIONS: dict[str, Operation] = {
    "decide": op_decide,
    "attribute": op_attribute,
    "derive_estimate": op_derive_estimate,
    "preemption_order": op_preemption_order,
    "idle": op_idle,
}


def register(name: str, operation: Operation) -> None:
    """Add an operation to `pool exec` (the ledger operations register themselves)."""
    OPERATIONS[name] = operation


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
    return (dumps_canonical(result) + "\n").encode("utf-8")
