"""The ledger operations of `pool exec`: seal, replay, period_usage, witness, check_witness
(CONFORMANCE.md).

Byte-exact: Ed25519 is deterministic, so the same seed and events give the same entries.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from joulepool.checks import check_figure, check_keys, check_text
from joulepool.conformance.decisions import Result
from joulepool.errors import InvalidInput, LedgerRefused, WitnessRefused
from joulepool.events import event_from_json
from joulepool.ledger.cose import GENESIS, content_address
from joulepool.ledger.entry import seal_entry
from joulepool.ledger.keys import KeyPair
from joulepool.ledger.replay import Replayer, replay
from joulepool.ledger.rotation import KeySchedule, RotationRefused
from joulepool.ledger.sequence import split
from joulepool.ledger.witness import check_witness, sign_witness
from joulepool.periods import NONE, Schedule


def _hex(case: Mapping[str, Any], name: str, size: int | None = None) -> bytes:
    value = case[name]
    if not isinstance(value, str):
        raise InvalidInput(name, "must be a lowercase hex string")
    if value != value.lower():
        raise InvalidInput(name, "hex must be lowercase")
    try:
        data = bytes.fromhex(value)
    except ValueError:
        raise InvalidInput(name, "is not hex") from None
    if size is not None and len(data) != size:
        raise InvalidInput(name, f"must be {size} bytes, got {len(data)}")
    return data


def split_ledger(data: bytes) -> tuple[list[bytes], LedgerRefused | None]:
    """A CBOR sequence's entries, and the refusal its tail earns, if any (DESIGN.md §4)."""
    offsets, tail = split(data)
    ends = [*offsets[1:], tail.offset if tail is not None else len(data)][: len(offsets)]
    entries = [data[a:b] for a, b in zip(offsets, ends, strict=True)]
    if tail is None:
        return entries, None
    what = "incomplete (a torn write)" if tail.torn else f"not a CBOR item ({tail.detail})"
    return entries, LedgerRefused(
        len(entries), "malformed", f"bytes at offset {tail.offset} are {what}"
    )


def replay_bytes(
    data: bytes, steward: str, public_key: bytes | KeySchedule, schedule: Schedule = NONE
) -> Replayer:
    """Verify and fold a ledger given as one CBOR sequence (§6.1, §6.4)."""
    entries, tail_refusal = split_ledger(data)
    replayer = replay(entries, steward, public_key, schedule=schedule)
    if tail_refusal is not None:
        raise tail_refusal
    return replayer


def _refused(exc: LedgerRefused | RotationRefused) -> Result:
    return {"ok": False, "error": exc.error, "index": exc.index, "detail": exc.detail}


def _keys(case: Mapping[str, Any], steward: str) -> KeySchedule:
    """The first key and the rotation statements in force after it (DESIGN.md §4); a
    statement that fails raises `RotationRefused` before any entry is read."""
    first = _hex(case, "public_key_hex", 32)
    statements = case.get("rotations_hex", [])
    if not isinstance(statements, list):
        raise InvalidInput("rotations_hex", "must be a list of hex strings")
    raws = [_hex({"rotations_hex": item}, "rotations_hex") for item in statements]
    return KeySchedule.verified(steward, first, raws)


def op_seal(case: Mapping[str, Any]) -> Result:
    """DESIGN.md §4: seal a list of events into entries, byte for byte."""
    check_keys(case, "", ("op", "steward", "secret_key_hex", "events"))
    steward = check_text(case["steward"], "steward")
    key = KeyPair.from_seed(steward, _hex(case, "secret_key_hex", 32))
    events = case["events"]
    if not isinstance(events, list):
        raise InvalidInput("events", "must be a list")
    head = GENESIS
    entries: list[str] = []
    for seq, item in enumerate(events):
        event = event_from_json(item, f"events[{seq}]")
        raw = seal_entry(event, seq, head, steward, key.signing_key)
        entries.append(raw.hex())
        head = content_address(raw)
    return {"entries_hex": entries, "head_hex": head.hex()}


def op_replay(case: Mapping[str, Any]) -> Result:
    """§6.1, §6.4, §6.5: verify a ledger and fold it into usage, or refuse it at an index."""
    case = check_keys(
        case, "", ("op", "steward", "public_key_hex", "ledger_hex"), ("rotations_hex",)
    )
    steward = check_text(case["steward"], "steward")
    ledger = _hex(case, "ledger_hex")
    try:
        replayer = replay_bytes(ledger, steward, _keys(case, steward))
    except (LedgerRefused, RotationRefused) as exc:
        return _refused(exc)
    usage = replayer.state.usage
    return {
        "ok": True,
        "length": replayer.length,
        "head_hex": replayer.head.hex(),
        "usage": usage.to_json(),
        "open_claims": replayer.state.open_claims(),
    }


def op_period_usage(case: Mapping[str, Any]) -> Result:
    """DESIGN.md §3, budget periods: a ledger's usage in the period holding `at_ms`.

    `spent_uj` counts the claims admitted in that period (actual once released, else the
    reservation); `held_devices` counts every open claim, whatever its period.
    """
    case = check_keys(
        case,
        "",
        ("op", "steward", "public_key_hex", "ledger_hex", "period", "at_ms"),
        ("rotations_hex",),
    )
    steward = check_text(case["steward"], "steward")
    schedule = Schedule.from_json(case["period"])
    at_ms = check_figure(case["at_ms"], "at_ms")
    ledger = _hex(case, "ledger_hex")
    try:
        replayer = replay_bytes(ledger, steward, _keys(case, steward), schedule)
    except (LedgerRefused, RotationRefused) as exc:
        return _refused(exc)
    period = schedule.period_at(at_ms)
    return {
        "ok": True,
        "period": period.to_json(),
        "usage": replayer.state.usage_in(period.index).to_json(),
        "open_claims": replayer.state.open_claims(),
    }


def op_witness(case: Mapping[str, Any]) -> Result:
    """§6.7: sign a pool-witness/1 receipt over a ledger's head at a length."""
    case = check_keys(
        case,
        "",
        ("op", "steward", "witness", "witness_secret_key_hex", "ledger_hex", "length", "at_ms"),
        ("steward_public_key_hex",),
    )
    steward = check_text(case["steward"], "steward")
    witness = KeyPair.from_seed(
        check_text(case["witness"], "witness"), _hex(case, "witness_secret_key_hex", 32)
    )
    length = check_figure(case["length"], "length")
    at_ms = check_figure(case["at_ms"], "at_ms")
    entries, tail_refusal = split_ledger(_hex(case, "ledger_hex"))
    steward_key = (
        _hex(case, "steward_public_key_hex", 32) if "steward_public_key_hex" in case else None
    )
    if steward_key is not None:
        if steward_key == witness.public_key:
            return {"error": "witness_is_steward", "detail": "the witness's key is the steward's"}
        # A witness that can verify does so before it vouches for a head.
        try:
            replay(entries[:length], steward, steward_key)
        except LedgerRefused as exc:
            return _refused(exc)
    if length > len(entries) or (tail_refusal is not None and length > tail_refusal.index):
        raise InvalidInput("length", f"the ledger has only {len(entries)} whole entries")
    head = content_address(entries[length - 1]) if length else GENESIS
    try:
        receipt = sign_witness(witness, steward, head, length, at_ms, steward_key)
    except WitnessRefused as exc:
        return {"error": exc.error, "detail": str(exc)}
    return {"receipt_hex": receipt.hex()}


def op_check_witness(case: Mapping[str, Any]) -> Result:
    """§6.8: grade a ledger by a witness receipt, or self-attested without one.

    A receipt at length 0 covers no entry: the ledger stays self-attested (DESIGN.md §3).
    """
    case = check_keys(
        case,
        "",
        (
            "op",
            "steward",
            "steward_public_key_hex",
            "ledger_hex",
            "witness",
            "witness_public_key_hex",
        ),
        ("receipt_hex",),
    )
    steward = check_text(case["steward"], "steward")
    steward_key = _hex(case, "steward_public_key_hex", 32)
    witness = check_text(case["witness"], "witness")
    witness_key = _hex(case, "witness_public_key_hex", 32)
    data = _hex(case, "ledger_hex")
    try:
        replayer = replay_bytes(data, steward, steward_key)
    except LedgerRefused as exc:
        return _refused(exc)
    if "receipt_hex" not in case:
        return {"attestation": "self-attested", "length": replayer.length}
    entries, _ = split_ledger(data)

    def head_at(n: int) -> bytes:
        return content_address(entries[n - 1]) if n else GENESIS

    report = check_witness(
        _hex(case, "receipt_hex"),
        witness,
        witness_key,
        steward,
        steward_key,
        replayer.length,
        head_at,
    )
    return report.to_json()
