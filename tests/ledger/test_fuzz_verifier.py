"""The verifier cannot crash: structured fuzzing of every surface that reads ledger entries
(standard §6.5, §6.6; DESIGN.md §4 "verification of entry i").

Every byte string, at every surface, ends in a result or in `LedgerRefused(index, error)`
with one of DESIGN.md §4's names, at the first bad entry, in §4's order. The surfaces:
`replay()` serial and with `workers=2`, `Replayer.feed`, `pool exec` replay (never
`internal_error`), `pool ledger verify | show | usage` (one line, no traceback), `Pool`
start-up over a FileStore (LedgerRefused, or the store's typed StoreError for a tail that
is not a whole entry), and witness checks (`check_witness` always returns a report).

Cores are built by `tests/support/strategies.py` from valid ones and mutated into every CBOR
type, then sealed with the steward's real key and chained, so the fuzz reaches the field and
consistency checks; its reference model (`verdict`) states DESIGN.md §4 from the text, and
every surface must agree with it exactly. Real ledgers (sealed by `pool exec seal` and by a
`Pool`) are then mutated byte by byte.

Hypothesis profiles: `joulepool-fuzz-ci` (the default) runs a fixed number of examples,
derandomized, with no example database, so CI is bounded and every run is the same run;
`JOULEPOOL_FUZZ=long` selects `joulepool-fuzz-long`, `JOULEPOOL_FUZZ_SCALE` times as many
examples (default 20), random, for a soak:

    JOULEPOOL_FUZZ=long .venv/bin/pytest tests/ledger/test_fuzz_verifier.py
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import cbor2
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from joulepool.cli import main
from joulepool.conformance.execute import exec_bytes, run_case
from joulepool.conformance.ledger_ops import replay_bytes, split_ledger
from joulepool.errors import LedgerRefused, StoreError
from joulepool.events import Event
from joulepool.grade import Energy, Grade
from joulepool.ledger.cbor import CborRefused, decode_strict
from joulepool.ledger.cose import open_envelope, protected_header
from joulepool.ledger.entry import event_of
from joulepool.ledger.keys import write_key_file
from joulepool.ledger.replay import BATCH, Replayer, replay
from joulepool.ledger.witness import AttestationReport, check_witness
from joulepool.pool import Pool
from joulepool.stores.file import FileStore
from joulepool.stores.memory import MemoryStore
from tests.support.builders import claim, team_tree
from tests.support.ledgers import STEWARD, WITNESS, admitted, seal_all, twenty
from tests.support.strategies import (
    ENVELOPES,
    ERRORS,
    KID,
    MAX_NESTING,
    AsWritten,
    Planned,
    Sealed,
    Verdict,
    byte_strings,
    encode,
    histories,
    iter_prefixes,
    outside_profile,
    plans,
    seal_plan,
    valid_core,
    verdict,
    witness_cores,
    witness_envelope,
)
from tests.support.strategies import as_bytes_view as bytes_view

# -- profiles -------------------------------------------------------------------------------

settings.register_profile(
    "joulepool-fuzz-ci",
    max_examples=100,
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=False,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)
settings.register_profile(
    "joulepool-fuzz-long",
    parent=settings.get_profile("joulepool-fuzz-ci"),
    derandomize=False,
    print_blob=True,
)
PROFILE: Final = "long" if os.environ.get("JOULEPOOL_FUZZ") == "long" else "ci"
SCALE: Final = int(os.environ.get("JOULEPOOL_FUZZ_SCALE", "20")) if PROFILE == "long" else 1


def fuzz(examples: int) -> settings:
    """The active profile with `examples` examples in CI, SCALE times as many in the long one."""
    return settings(
        settings.get_profile(f"joulepool-fuzz-{PROFILE}"), max_examples=examples * SCALE
    )


# -- outcomes, as each surface reports them ---------------------------------------------------

Outcome = tuple[Any, ...]
PUBLIC: Final = STEWARD.public_key

# The decoder remembers key tuples it found in order; reading a protected header puts
# (1, 4) among them. A core keyed (true, 4) once passed as canonical that way.
protected_header(KID)


def expected(v: Verdict) -> Outcome:
    if v.refused is not None:
        return ("refused", *v.refused)
    return ("ok", v.length, v.head, v.usage, v.open_claims)


def outcome(call: Callable[[], Replayer | Pool]) -> Outcome:
    """What a verifying call came to: refused (index, error), or the state it replayed."""
    try:
        r = call()
    except LedgerRefused as exc:
        assert exc.error in ERRORS, exc
        assert "\n" not in str(exc), exc
        return ("refused", exc.index, exc.error)
    return ("ok", r.length, r.head, r.state.usage.to_json(), r.state.open_claims())


def fed(raws: Sequence[bytes]) -> Replayer:
    replayer = Replayer(KID, PUBLIC)
    for raw in raws:
        replayer.feed(raw)
    return replayer


def exec_outcome(data: bytes) -> Outcome:
    """`pool exec` replay, bytes in and bytes out: never `internal_error` (CONFORMANCE.md)."""
    case = {
        "op": "replay",
        "steward": KID,
        "public_key_hex": PUBLIC.hex(),
        "ledger_hex": data.hex(),
    }
    out = json.loads(exec_bytes(json.dumps(case).encode()))
    assert "ok" in out, out
    if out["ok"] is False:
        assert set(out) == {"ok", "error", "index", "detail"}, out
        assert out["error"] in ERRORS, out
        return ("refused", out["index"], out["error"])
    return (
        "ok",
        out["length"],
        bytes.fromhex(out["head_hex"]),
        out["usage"],
        out["open_claims"],
    )


def cli(*args: str) -> tuple[int, str, str]:
    """`pool ARGS` in this process: its exit status, standard output and standard error."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(args))
    assert "Traceback" not in out.getvalue() + err.getvalue()
    return rc, out.getvalue(), err.getvalue()


def one_line(text: str) -> str:
    lines = text.splitlines()
    assert len(lines) == 1, text
    return lines[0]


def ledger_folder(folder: Path, data: bytes) -> Path:
    """A ledger file holding `data`, its high-water record at 0, and `steward.pub` beside."""
    path = folder / "ledger.cbor"
    FileStore(path, create=True).close()  # the record starts at length 0
    path.write_bytes(data)
    write_key_file(folder / "steward.pub", STEWARD.public())
    return path


def cli_outcome(path: Path) -> Outcome:
    """`pool ledger verify FILE` in JSON and for people: the same verdict, in one line."""
    rc, out, err = cli("ledger", "verify", str(path), "--json")
    result = json.loads(out)
    rc_human, human, err_human = cli("ledger", "verify", str(path))
    assert (err, err_human) == ("", "")
    if result["ok"] is False:
        assert (rc, rc_human) == (1, 1), result
        index, error = result["index"], result["error"]
        assert error in ERRORS, result
        assert one_line(human).startswith(f"REFUSED at entry {index}: {error}: "), human
        return ("refused", index, error)
    assert (rc, rc_human) == (0, 0)
    return ("ok", result["length"], bytes.fromhex(result["head_hex"]))


def store_outcome(path: Path) -> Outcome:
    """A FileStore read back and replayed; a tail that is no whole entry is `malformed`."""
    with FileStore(path, writer=False) as store:

        def run() -> Replayer:
            replayer = replay(store.entries(), KID, PUBLIC)
            if store.tail is not None:
                raise LedgerRefused(len(store), "malformed", "the tail is not a whole entry")
            return replayer

        return outcome(run)


def pool_outcome(path: Path) -> Outcome:
    """`Pool` start-up over a FileStore: LedgerRefused, or a typed StoreError for the tail."""
    try:
        store = FileStore(path)
    except StoreError as exc:
        return ("store", type(exc).__name__)
    try:
        return outcome(lambda: Pool(team_tree(), STEWARD, store))
    finally:
        store.close()


def short(o: Outcome) -> Outcome:
    """An outcome without usage: what the CLI's verify reports."""
    return o if o[0] == "refused" else o[:3]


# -- the reference envelope is the project's seal ---------------------------------------------


@fuzz(40)
@given(histories())
def test_s6_5_design_s4_the_fuzz_seals_valid_cores_exactly_as_the_project_does(
    events: list[Event],
) -> None:
    sealed = seal_plan([Planned(valid_core(e)) for e in events])
    raws = [s.raw for s in sealed]
    assert raws == seal_all(events)
    # Histories hold an inconsistent event at times: the one check left once sealing is right.
    assert outcome(lambda: replay(raws, KID, PUBLIC)) == expected(verdict(sealed))


# -- structured cores, sealed and chained -----------------------------------------------------


@fuzz(300)
@given(plans())
@example([Planned(AsWritten({True: 0, 4: 0}))])  # a `true` key once passed as the key 1
@example([Planned(AsWritten({1.0: 0, 4: 0}))])  # and 1.0 too
@example([Planned(valid_core(admitted("c0"))), Planned(AsWritten({True: b"", 4: 0}))])
@example([Planned(valid_core(admitted("c0")) | {"grade": {"grade": "HwShunt"}})])
@example([Planned({k: v for k, v in valid_core(admitted("c0")).items() if k != "event"})])
@example([Planned(valid_core(admitted("c0")) | {7: b"", b"x": 0, "bogus": ""})])
@example([Planned(valid_core(admitted("c0")) | {"\n": True})])  # a refusal once ran two lines
@example([Planned(valid_core(admitted("c0")) | {"k" * 5000: {"\u2028": None}})])
@example([Planned(valid_core(admitted("c0")) | {"class": ""})])
@example([Planned(valid_core(admitted("c0")) | {"gang_size": 2**64 - 1, "reserved_uj": 0})])
def test_s6_5_design_s4_structured_cores_are_refused_at_their_index_in_order(
    plan: list[Planned],
) -> None:
    sealed = seal_plan(plan)
    raws = [s.raw for s in sealed]
    want = expected(verdict(sealed))
    event(f"{want[0]} {want[2] if want[0] == 'refused' else ''}")
    assert outcome(lambda: replay(raws, KID, PUBLIC)) == want
    assert outcome(lambda: fed(raws)) == want
    # As one CBOR sequence an envelope with a stray item after it is two items.
    assert exec_outcome(b"".join(raws)) == expected(verdict(bytes_view(sealed)))


PREFIX_EVENTS: Final[list[Event]] = [admitted(f"p{i}", "abc"[i % 3]) for i in range(BATCH - 2)]
PREFIX: Final[list[Sealed]] = seal_plan([Planned(valid_core(e)) for e in PREFIX_EVENTS])


@fuzz(25)
@given(plans(max_size=6), st.booleans())
def test_s6_5_design_s4_parallel_replay_refuses_where_serial_does(
    plan: list[Planned], across_a_batch: bool
) -> None:
    # Behind BATCH - 2 good entries, the plan straddles the first batch boundary.
    sealed = seal_plan(plan, after=PREFIX) if across_a_batch else seal_plan(plan)
    whole = [*PREFIX, *sealed] if across_a_batch else sealed
    raws = [s.raw for s in whole]
    want = expected(verdict(whole))
    assert outcome(lambda: replay(raws, KID, PUBLIC)) == want
    assert outcome(lambda: replay(raws, KID, PUBLIC, workers=2)) == want


@pytest.mark.parametrize("variant", sorted(ENVELOPES))
def test_s6_5_design_s4_every_envelope_shape_is_refused_by_its_first_check(variant: str) -> None:
    events = [admitted("c0"), admitted("c1"), admitted("c2")]
    plan = [Planned(valid_core(e)) for e in events]
    plan[1].envelope = variant
    sealed = seal_plan(plan)
    raws = [s.raw for s in sealed]
    name = ENVELOPES[variant]
    want = expected(verdict(sealed))
    assert want[:2] == ("ok", 3) if name is None else want == ("refused", 1, name)
    assert outcome(lambda: replay(raws, KID, PUBLIC)) == want
    assert outcome(lambda: fed(raws)) == want
    assert exec_outcome(b"".join(raws)) == expected(verdict(bytes_view(sealed)))


def nested(depth: int) -> Any:
    """A map nested `depth` maps deep, the outermost included."""
    value: Any = 0
    for _ in range(depth):
        value = {"n": value}
    return value


def core_with(**fields: Any) -> dict[str, Any]:
    return valid_core(admitted("c0")) | fields


EDGE_CORES: Final[list[tuple[str, Any, tuple[int, str] | None]]] = [
    # The core counts as one level: seven nested maps below it are within MAX_NESTING, and
    # its seq, here 2**64 - 1, is the first check they reach; one more is malformed.
    ("nested to the limit", core_with(seq=2**64 - 1, x=nested(MAX_NESTING - 1)), (0, "seq_mismatch")),
    ("nested past the limit", core_with(seq=2**64 - 1, x=nested(MAX_NESTING)), (0, "malformed")),
    ("a 1 MiB claim id", core_with(claim="x" * (1 << 20)), (0, "malformed")),
    ("figures at 2**64 - 1", core_with(reserved_uj=2**64 - 1, borrowed_uj=2**64 - 1, at_ms=2**64 - 1), None),
    ("a figure at -2**64", core_with(reserved_uj=-(2**64)), (0, "malformed")),
    ("a bignum figure", core_with(reserved_uj=cbor2.CBORTag(2, b"\x01" + bytes(8))), (0, "non_canonical")),
    ("an empty steward", core_with(steward=""), (0, "malformed")),
    ("prev of 32 zero bytes and 1 more", core_with(prev=bytes(33)), (0, "broken_chain")),
    ("no fields at all", {}, (0, "seq_mismatch")),
    ("a map keyed by false and true", AsWritten({False: 0, True: 0}), (0, "non_canonical")),
]  # fmt: skip


@pytest.mark.parametrize(("name", "core", "refused"), EDGE_CORES, ids=[e[0] for e in EDGE_CORES])
def test_s6_5_design_s4_edge_cores_are_refused_by_name(
    name: str, core: Any, refused: tuple[int, str] | None
) -> None:
    sealed = seal_plan([Planned(core)])
    want = expected(verdict(sealed))
    assert (want[1:] if want[0] == "refused" else None) == refused, name
    raws = [s.raw for s in sealed]
    assert outcome(lambda: replay(raws, KID, PUBLIC)) == want
    assert outcome(lambda: fed(raws)) == want
    assert exec_outcome(raws[0]) == want


@pytest.mark.parametrize(
    "data",
    [b"\xa2\xf5\x00\x04\x00", b"\xa2\xfb\x3f\xf0\x00\x00\x00\x00\x00\x00\x00\x04\x00"],
    ids=["true-4", "1.0-4"],
)
def test_s6_6_design_s4_a_key_equal_to_an_integer_in_python_is_not_canonical(data: bytes) -> None:
    # Regression: the decoder's cache of key tuples found in order held (1, 4) from a
    # protected header, and `(True, 4) == (1, 4)` in Python, so the map passed as det-CBOR.
    assert decode_strict(encode({1: 0, 4: 0})) == {1: 0, 4: 0}
    protected_header(KID)
    with pytest.raises(CborRefused) as refused:
        decode_strict(data)
    assert refused.value.error == "non_canonical"


# -- witness receipts ------------------------------------------------------------------------

WITNESSED: Final = twenty()
HEADS: Final = list(iter_prefixes(WITNESSED))


def statement_of(core: Any) -> dict[str, Any] | None:
    """The pool-witness/1 statement a receipt's core makes, or None if it makes none."""
    if not isinstance(core, dict) or outside_profile(core):
        return None
    if set(core) != {"pool_witness", "steward", "witness", "head", "length", "at_ms"}:
        return None
    if not (type(core["pool_witness"]) is int and core["pool_witness"] == 1):
        return None
    if not (type(core["steward"]) is str and type(core["witness"]) is str):
        return None
    if not (type(core["head"]) is bytes and len(core["head"]) == 32):
        return None
    if not all(type(core[k]) is int and core[k] >= 0 for k in ("length", "at_ms")):
        return None
    return core


def expected_report(core: Any, variant: str, kid: str) -> dict[str, Any]:
    """§6.7, §6.8 and DESIGN.md §4: what a receipt over WITNESSED grades it as."""
    length = len(WITNESSED)
    bad = {"attestation": "self-attested", "length": length, "error": "bad_witness_signature"}
    statement = statement_of(core)
    if statement is None or variant != "good" or kid != WITNESS.kid:
        return bad
    if statement["witness"] != WITNESS.kid:
        return bad
    n = statement["length"]
    if statement["steward"] != KID or n > length or HEADS[n] != statement["head"]:
        return {"attestation": "self-attested", "length": length, "error": "covers_different_head"}
    if n == 0:
        return {"attestation": "self-attested", "length": length}
    return {"attestation": "witnessed", "length": length, "through": n}


def report_of(receipt: bytes) -> dict[str, Any]:
    report = check_witness(
        receipt,
        WITNESS.kid,
        WITNESS.public_key,
        KID,
        PUBLIC,
        len(WITNESSED),
        lambda n: HEADS[n],
    )
    assert isinstance(report, AttestationReport)
    case = {
        "op": "check_witness",
        "steward": KID,
        "steward_public_key_hex": PUBLIC.hex(),
        "ledger_hex": b"".join(WITNESSED).hex(),
        "witness": WITNESS.kid,
        "witness_public_key_hex": WITNESS.public_key.hex(),
        "receipt_hex": receipt.hex(),
    }
    assert run_case(case) == report.to_json()
    return report.to_json()


@fuzz(200)
@given(
    witness_cores(HEADS),
    st.sampled_from(["good", "good", "good", "other_key", "flipped_signature"]),
    st.sampled_from([WITNESS.kid, WITNESS.kid, KID, "intruder"]),
)
def test_s6_8_design_s4_hostile_witness_receipts_always_give_a_report(
    core: Any, variant: str, kid: str
) -> None:
    receipt = witness_envelope(encode(core), variant, kid)
    assert report_of(receipt) == expected_report(core, variant, kid)


@fuzz(100)
@given(st.data())
def test_s6_8_design_s4_mutated_receipt_bytes_always_give_a_report(data: st.DataObject) -> None:
    core = {
        "pool_witness": 1,
        "steward": KID,
        "witness": WITNESS.kid,
        "head": HEADS[7],
        "length": 7,
        "at_ms": 0,
    }
    good = witness_envelope(encode(core), "good", WITNESS.kid)
    receipt = data.draw(mutations(good) | byte_strings)
    report = report_of(receipt)
    if receipt != good:
        assert report["attestation"] == "self-attested", receipt.hex()


@fuzz(30)
@given(
    witness_cores(HEADS),
    st.sampled_from(["good", "good", "flipped_signature"]),
    st.sampled_from([WITNESS.kid, WITNESS.kid, "intruder"]),
)
def test_s6_8_design_s4_pool_ledger_verify_grades_hostile_receipts_without_crashing(
    core: Any, variant: str, kid: str
) -> None:
    receipt = witness_envelope(encode(core), variant, kid)
    want = expected_report(core, variant, kid)
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        path = ledger_folder(folder, b"".join(WITNESSED))
        (folder / "receipt").write_bytes(receipt)
        write_key_file(folder / "auditor.pub", WITNESS.public())
        given_receipt = (
            "--receipt",
            str(folder / "receipt"),
            "--witness-key",
            str(folder / "auditor.pub"),
        )
        rc, out, err = cli("ledger", "verify", str(path), "--json", *given_receipt)
        assert (rc, err) == (0, ""), (out, err)
        result = json.loads(out)
        assert (result["attestation"], result.get("witnessed_through")) == (
            want["attestation"],
            want.get("through"),
        )
        # Kept in the deployment's witnesses/ folder, a receipt is also a mark the ledger
        # must reach (§6.1): one over a head this ledger does not have refuses it, typed.
        kept = folder / "witnesses"
        kept.mkdir()
        (kept / "auditor-1.receipt").write_bytes(receipt)
        write_key_file(kept / "auditor.pub", WITNESS.public())
        rc, out, err = cli("ledger", "verify", str(path))
        if rc == 1:
            assert one_line(out).startswith("REFUSED: ledger_rolled_back: "), out
            assert want.get("error") == "covers_different_head", (want, out)
        else:
            assert rc == 0, (out, err)
            assert ("witnessed through" in out) == (want["attestation"] == "witnessed"), out


# -- real ledgers, mutated byte by byte -------------------------------------------------------


def pool_ledger(count: int) -> list[bytes]:
    """A ledger a `Pool` sealed: admissions and releases over a team tree."""
    pool = Pool(
        team_tree(g=10**12, gd=10**6), STEWARD, MemoryStore(), clock=lambda: 1_764_000_000_000
    )
    for i in range(count):
        pool.submit(claim(f"q{i}", "abc"[i % 3], 100 + i, Grade.ModelBased, class_="train"))
        if i % 2:
            pool.release(f"q{i - 1}", Energy(50 + i, Grade.HwShunt))
    return list(pool.entries())


def exec_sealed(events: list[dict[str, Any]]) -> list[bytes]:
    """A ledger sealed by `pool exec seal` (CONFORMANCE.md)."""
    assert STEWARD.seed is not None
    case = {"op": "seal", "steward": KID, "secret_key_hex": STEWARD.seed.hex(), "events": events}
    return [bytes.fromhex(h) for h in run_case(case)["entries_hex"]]


B_LEDGER: Final = pool_ledger(80)
# A shares B's first five entries byte for byte, then goes its own way: 300 entries.
A_LEDGER: Final = exec_sealed(
    [event_of(open_envelope(raw).core, KID).to_json() for raw in B_LEDGER[:5]]
    + [
        e.to_json()
        for i in range(295)
        for e in [admitted(f"a{i}", "abc"[i % 3], 10 + i, class_=None if i % 4 else "x")]
    ]
)
A_BYTES: Final = b"".join(A_LEDGER)
B_BYTES: Final = b"".join(B_LEDGER)

HOSTILE_INSERTS: Final = [
    b"\x00",
    b"\xff",
    b"\xd2\x84",
    b"\x5b" + b"\xff" * 8,
    b"\x9b" + b"\xff" * 8,
    b"\x81" * 20,
    b"\xd9\xd9\xf7",
    b"\xf5",
    b"\xfb" + bytes(8),
    b"\x58\x40",
    b"\xa0",
]


def mutations(raw: bytes) -> st.SearchStrategy[bytes]:
    """Bytes near `raw`: bits flipped, bytes set, inserted or deleted, cut, or repeated."""
    at = st.integers(0, max(len(raw) - 1, 0))
    inserts = st.one_of(st.sampled_from(HOSTILE_INSERTS), st.binary(min_size=1, max_size=8))
    return st.one_of(
        st.lists(st.tuples(at, st.integers(0, 7)), min_size=1, max_size=3).map(
            lambda flips: _flipped(raw, flips)
        ),
        st.tuples(at, st.integers(0, 255)).map(lambda p: raw[: p[0]] + bytes((p[1],)) + raw[p[0] + 1 :]),
        st.tuples(at, inserts).map(lambda p: raw[: p[0]] + p[1] + raw[p[0] :]),
        st.tuples(at, st.integers(1, 40)).map(lambda p: raw[: p[0]] + raw[p[0] + p[1] :]),
        at.map(lambda cut: raw[:cut]),
        st.tuples(at, at, st.integers(2, 3)).map(
            lambda p: raw[: min(p[:2])] + raw[min(p[:2]) : max(p[:2])] * p[2] + raw[max(p[:2]) :]
        ),
    )  # fmt: skip


def _flipped(raw: bytes, flips: list[tuple[int, int]]) -> bytes:
    out = bytearray(raw)
    for offset, bit in flips:
        out[offset] ^= 1 << bit
    return bytes(out)


@st.composite
def mutated_ledgers(draw: st.DrawFn) -> bytes:
    """A or B changed: entries duplicated, dropped, swapped or spliced across the two
    ledgers, then, or instead, their bytes mutated."""
    kind = draw(st.sampled_from(["bytes", "bytes", "entries", "both", "splice"]))
    data = draw(st.sampled_from([A_BYTES, A_BYTES, B_BYTES]))
    if kind == "splice":
        x = draw(st.integers(0, len(A_BYTES)))
        y = draw(st.integers(0, len(B_BYTES)))
        return A_BYTES[:x] + B_BYTES[y:] if draw(st.booleans()) else B_BYTES[:y] + A_BYTES[x:]
    if kind in ("entries", "both"):
        entries = list(A_LEDGER if data is A_BYTES else B_LEDGER)
        j = draw(st.integers(0, len(entries) - 1))
        k = draw(st.integers(0, len(entries) - 1))
        op = draw(st.sampled_from(["duplicate", "drop", "swap", "splice", "foreign"]))
        if op == "duplicate":
            entries.insert(j, entries[k])
        elif op == "drop":
            del entries[k]
        elif op == "swap":
            entries[j], entries[k] = entries[k], entries[j]
        elif op == "splice":
            # At the same index (seq right, prev wrong past the shared prefix) or anywhere.
            at = draw(st.sampled_from([j, k]))
            entries = entries[:j] + B_LEDGER[min(at, len(B_LEDGER) - 1) :]
        else:
            entries[j] = B_LEDGER[j] if j < len(B_LEDGER) else draw(st.sampled_from(B_LEDGER))
        data = b"".join(entries)
    if kind in ("bytes", "both"):
        data = draw(mutations(data))
    return data


def intact(data: bytes, ledger: Sequence[bytes]) -> int:
    """How many of `ledger`'s first entries `data` begins with, byte for byte."""
    n = pos = 0
    for raw in ledger:
        if data[pos : pos + len(raw)] != raw:
            break
        n, pos = n + 1, pos + len(raw)
    return n


@fuzz(80)
@given(mutated_ledgers())
@example(A_BYTES)
@example(A_BYTES[:-1])
@example(A_BYTES + A_LEDGER[-1])
@example(B_BYTES[: len(b"".join(B_LEDGER[:5]))] + b"".join(A_LEDGER[5:]))
def test_s6_5_design_s4_mutated_ledger_bytes_are_refused_alike_on_every_surface(
    data: bytes,
) -> None:
    entries, tail = split_ledger(data)
    want = outcome(lambda: replay_bytes(data, KID, PUBLIC))
    event(f"{want[0]} {want[2] if want[0] == 'refused' else ''}")
    assert exec_outcome(data) == want
    if want[0] == "refused":
        # Entries before the first changed one still verify: the refusal is at it or after.
        assert want[1] >= max(intact(data, A_LEDGER), intact(data, B_LEDGER)), want
    else:
        # Only what was signed verifies: an accepted ledger is a prefix of A or of B.
        assert entries in (A_LEDGER[: len(entries)], B_LEDGER[: len(entries)])
        assert tail is None
    with tempfile.TemporaryDirectory() as folder:
        path = ledger_folder(Path(folder), data)
        assert store_outcome(path) == want
        assert cli_outcome(path) == short(want)
        pool = pool_outcome(path)
        if tail is not None:
            assert pool[0] == "store", pool  # TornWrite or CorruptLedger, both StoreError
        else:
            assert pool == want


# -- the command line, on structured ledgers --------------------------------------------------


@fuzz(30)
@given(plans(max_size=6))
@example([Planned(valid_core(admitted("[bold]\n\u2028:smile:")))])
def test_s6_5_design_s4_ledger_commands_refuse_in_one_line_or_report(plan: list[Planned]) -> None:
    sealed = seal_plan(plan)
    data = b"".join(s.raw for s in sealed)
    v = verdict(bytes_view(sealed))
    want = expected(v)
    with tempfile.TemporaryDirectory() as folder:
        path = ledger_folder(Path(folder), data)
        assert cli_outcome(path) == short(want)
        assert pool_outcome(path) == want
        for command in ("show", "usage"):
            rc, out, err = cli("ledger", command, str(path), "--json")
            rc_human, human, err_human = cli("ledger", command, str(path))
            if v.refused is not None:
                index, error = v.refused
                assert (rc, rc_human, out, human) == (1, 1, "", ""), (out, human)
                for text in (err, err_human):
                    line = one_line(text)
                    assert line.startswith(f"pool: ledger_refused: entry {index}: {error}"), line
                continue
            assert (rc, rc_human, err, err_human) == (0, 0, "", "")
            result = json.loads(out)
            if command == "show":
                assert [r["seq"] for r in result["entries"]] == list(range(v.length))
                assert [r["address_hex"] for r in result["entries"]] == [
                    hashlib.sha256(s.raw).hexdigest() for s in sealed
                ]
            else:
                assert result["length"] == v.length
                assert result["open_claims"] == v.open_claims
                assert {
                    i: {"spent_uj": f["spent_uj"], "held_devices": f["held_devices"]}
                    for i, f in result["usage"].items()
                } == v.usage


HOSTILE_FILES: Final = {
    "a flipped signature": b"".join(A_LEDGER[:3]) + A_LEDGER[3][:-1] + b"\x00",
    "a torn tail": A_BYTES[: len(b"".join(A_LEDGER[:4])) + 30],
    "garbage": b"\xff" * 64,
    "a core keyed true": seal_plan([Planned(AsWritten({True: 0, 4: 0}))])[0].raw,
    "a bool under a key of two lines": seal_plan([Planned({"a\nb": False})])[0].raw,
}


@pytest.mark.parametrize("name", sorted(HOSTILE_FILES))
def test_s6_5_design_s4_pool_ledger_processes_never_print_a_traceback(
    name: str, tmp_path: Path
) -> None:
    data = HOSTILE_FILES[name]
    path = ledger_folder(tmp_path, data)
    want = outcome(lambda: replay_bytes(data, KID, PUBLIC))
    assert want[0] == "refused"
    _, index, error = want
    for command in ("verify", "show", "usage"):
        proc = subprocess.run(
            [sys.executable, "-m", "joulepool", "ledger", command, str(path)],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert proc.returncode == 1, (command, proc)
        assert "Traceback" not in proc.stdout + proc.stderr, (command, proc.stderr)
        line = one_line(proc.stdout + proc.stderr)
        assert f"entry {index}: {error}" in line, (command, line)
        if command == "verify":
            assert line.startswith(f"REFUSED at entry {index}: {error}: "), line
