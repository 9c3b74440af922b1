"""Hostile input: fuzzing `pool exec`, the HTTP API and the ledger decoder (DESIGN.md §2, §4).

Random and mutated receipts, deep nesting, huge declared lengths, giant integers, random
JSON and mutated valid cases. Every answer is a typed error or a result: no exception
escapes, no traceback is printed, no HTTP 500; memory and time stay bounded (tracemalloc
in process, RLIMIT_AS and RLIMIT_CPU on real `pool exec` processes, resident memory of a
real `pool serve`). Hypothesis runs a fixed number of examples, derandomized, so CI time
is bounded and every run is the same run. Earlier, narrower checks:
tests/test_exec_bad_input.py (a fixed corpus), tests/service/test_openapi_schemathesis.py.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from joulepool.admission import Admit
from joulepool.conformance.execute import exec_bytes
from joulepool.conformance.ledger_ops import replay_bytes
from joulepool.errors import ClaimError, InvalidInput, LedgerRefused
from joulepool.grade import Energy, Grade
from joulepool.ledger.cbor import CborRefused, decode_strict
from joulepool.ledger.cose import open_envelope
from joulepool.ledger.replay import replay
from joulepool.pool import Decision, Pool, ReleaseRequest
from joulepool.stores.file import create
from tests.support.builders import claim, team_tree
from tests.support.faults import MJ, Figures, rss_kib
from tests.support.ledgers import STEWARD, WITNESS, twenty
from tests.support.servers import Deployment, Serve, serving
from tests.support.strategies import ERRORS

RECEIPTS = twenty()
LEDGER = b"".join(RECEIPTS)
MAX_PEAK_BYTES = 32 << 20  # far above any honest entry, far below what a length bomb asks
MAX_SECONDS = 5.0

FUZZ = settings(
    max_examples=300,
    deadline=None,  # time is asserted per call, loosely, so a busy CI machine does not flake
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

_figures = Figures("hostile_input")
_count: dict[str, int] = {}


def bounded(name: str, call: Callable[[], Any]) -> Any:
    """Run `call` once, asserting it stays within MAX_SECONDS and MAX_PEAK_BYTES."""
    tracemalloc.start()
    began = time.perf_counter()
    try:
        return call()
    finally:
        elapsed = time.perf_counter() - began
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        _count[name] = _count.get(name, 0) + 1
        assert elapsed < MAX_SECONDS, f"{name}: {elapsed:.2f} s"
        assert peak < MAX_PEAK_BYTES, f"{name}: peak {peak} bytes"


# -- hostile CBOR -----------------------------------------------------------------------------

HOSTILE_CBOR: list[bytes] = [
    b"",
    b"\x81" * 100_000 + b"\x00",  # arrays nested 100 000 deep
    b"\x9f" * 100_000,  # indefinite arrays nested, never closed
    b"\xa1\x00" * 50_000 + b"\x00",  # maps nested
    b"\xd2" * 100_000 + b"\x00",  # tag 18 on tag 18 ...
    b"\x5b" + b"\xff" * 8,  # a byte string of 2**64 - 1 bytes, declared
    b"\x7b" + b"\xff" * 8 + b"abc",  # a text string of 2**64 - 1 bytes
    b"\x9b" + b"\xff" * 8,  # an array of 2**64 - 1 items
    b"\xbb" + b"\xff" * 8,  # a map of 2**64 - 1 pairs
    b"\x5a\x7f\xff\xff\xff" + b"\x00" * 100,
    b"\xc2\x5a\x00\x0f\xff\x00" + b"\xff" * 0xFFF00,  # a ~1 MiB bignum
    b"\xc3\x59\xff\xff" + b"\xff" * 0xFFFF,  # a 64 KiB negative bignum
    b"\x1b" + b"\xff" * 8,  # 2**64 - 1, the largest integer det-CBOR has
    b"\x3b" + b"\xff" * 8,
    b"\xfb\x7f\xf8\x00\x00\x00\x00\x00\x00",  # NaN
    b"\xd8\x19\x00",  # a string reference outside any namespace
    b"\xd8\x1c\x81\xd8\x1d\x00",  # a shared value referring to itself
    b"\xd9\xd9\xf7" * 1000 + b"\x00",  # self-describe tags
    b"\x7f\x61a\x41b\xff",  # an indefinite text string with a byte-string chunk
    b"\xbf\x00\xff",  # an indefinite map ending after a key
    b"\x1c",
    b"\xff",
    bytes(range(256)),
    b"\xd2\x84\x40\xa0\x40\x40" * 3,  # trailing items
    b"\x00" * ((1 << 20) + 1),  # longer than the largest item
]


def mutations(raw: bytes) -> st.SearchStrategy[bytes]:
    """Bytes near a valid receipt: flipped, cut, spliced, or with a hostile header inside."""
    at = st.integers(0, len(raw) - 1)
    inserts = st.sampled_from(
        [
            b"\x5b" + b"\xff" * 8,
            b"\x9b" + b"\xff" * 8,
            b"\x81" * 64,
            b"\xc2\x48" + b"\xff" * 8,
            b"\xf5",
            b"\xf6",
            b"\xfb" + b"\x00" * 8,
            b"\x1b" + b"\xff" * 8,
            b"\x9f",
            b"\xff",
        ]
    )
    return st.one_of(
        st.tuples(at, st.integers(0, 255)).map(
            lambda p: raw[: p[0]] + bytes([p[1]]) + raw[p[0] + 1 :]
        ),
        st.tuples(at, at).map(lambda p: raw[: min(p)] + raw[max(p) :]),
        st.tuples(at, inserts).map(lambda p: raw[: p[0]] + p[1] + raw[p[0] :]),
        st.tuples(at, inserts).map(lambda p: raw[: p[0]] + p[1] + raw[p[0] + len(p[1]) :]),
        st.tuples(at, st.binary(min_size=1, max_size=16)).map(lambda p: raw[: p[0]] + p[1]),
        st.tuples(at, at, st.integers(1, 4)).map(
            lambda p: raw[: min(p[:2])] + raw[min(p[:2]) : max(p[:2])] * p[2] + raw[max(p[:2]) :]
        ),
    )


receipts = st.sampled_from(RECEIPTS)
mutated_receipt = receipts.flatmap(mutations)


def decode_typed(data: bytes, envelope: bool) -> None:
    try:
        decode_strict(data, envelope=envelope)
    except CborRefused as exc:
        assert exc.error in ("malformed", "non_canonical")


def replay_typed(entries: list[bytes]) -> None:
    try:
        replay(entries, STEWARD.kid, STEWARD.public_key)
    except LedgerRefused as exc:
        assert exc.error in REFUSALS, exc.error


REFUSALS = ERRORS  # DESIGN.md §4's error names, listed once for the tests


@pytest.mark.parametrize("data", HOSTILE_CBOR, ids=range(len(HOSTILE_CBOR)))
def test_the_decoder_refuses_hostile_cbor_by_name_within_bounds(data: bytes) -> None:
    bounded("decoder_corpus", lambda: decode_typed(data, False))
    bounded("decoder_corpus", lambda: decode_typed(data, True))
    bounded("decoder_corpus", lambda: replay_typed([data]))
    bounded("decoder_corpus", lambda: replay_typed([*RECEIPTS[:3], data]))


@FUZZ
@given(st.binary(max_size=4096))
def test_the_decoder_on_random_bytes(data: bytes) -> None:
    bounded("decoder_random", lambda: decode_typed(data, True))
    bounded("decoder_random", lambda: replay_typed([data]))


@FUZZ
@given(mutated_receipt, st.integers(0, len(RECEIPTS) - 1))
def test_mutated_receipts_are_refused_at_their_index(data: bytes, index: int) -> None:
    entries = [*RECEIPTS[:index], data, *RECEIPTS[index + 1 :]]
    try:
        bounded("decoder_mutated", lambda: replay(entries, STEWARD.kid, STEWARD.public_key))
    except LedgerRefused as exc:
        assert exc.error in REFUSALS
        # Everything before the mutation still verifies, so the refusal is at it or later.
        assert exc.index >= index, (exc.index, index)
    else:
        # A mutation that verifies must be the same entry (only its bytes are signed).
        assert data == RECEIPTS[index]
    # The same bytes as one ledger file: refused (or accepted) the same, never a crash.
    blob = b"".join(entries)
    try:
        bounded("decoder_mutated", lambda: replay_bytes(blob, STEWARD.kid, STEWARD.public_key))
    except LedgerRefused as exc:
        assert exc.error in REFUSALS


@FUZZ
@given(mutated_receipt)
def test_open_envelope_refuses_by_name(data: bytes) -> None:
    try:
        bounded("decoder_mutated", lambda: open_envelope(data))
    except CborRefused as exc:
        assert exc.error in ("malformed", "non_canonical")


def _rlimits() -> None:
    # Kernel-enforced: a length bomb cannot make `pool exec` take the machine's memory.
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    resource.setrlimit(resource.RLIMIT_CPU, (60, 60))


def pool_exec(case: bytes) -> subprocess.CompletedProcess[bytes]:
    """A real `pool exec` process, under a 1 GiB address-space and 60 s CPU limit."""
    return subprocess.run(
        [sys.executable, "-m", "joulepool", "exec"],
        input=case,
        capture_output=True,
        check=False,
        timeout=120,
        preexec_fn=_rlimits,
    )


def test_pool_exec_replays_every_hostile_ledger_as_a_typed_refusal_under_rlimits() -> None:
    for name, ledger in [
        ("corpus", b"".join(HOSTILE_CBOR[:20])),
        *((f"item{i}", RECEIPTS[0] + item) for i, item in enumerate(HOSTILE_CBOR[1:20], 1)),
    ]:
        began = time.monotonic()
        case = {
            "op": "replay",
            "steward": STEWARD.kid,
            "public_key_hex": STEWARD.public_key.hex(),
            "ledger_hex": ledger.hex(),
        }
        proc = pool_exec(json.dumps(case).encode())
        assert time.monotonic() - began < 60, name
        assert (proc.returncode, proc.stderr) == (0, b""), (name, proc.stderr[-2000:])
        out = json.loads(proc.stdout)
        assert out["ok"] is False and out["error"] in REFUSALS, (name, out)
        assert isinstance(out["index"], int), (name, out)
        _count["pool_exec_processes"] = _count.get("pool_exec_processes", 0) + 1


# -- hostile JSON ------------------------------------------------------------------------------

GIANTS = [10**30, -(10**30), 2**64, 2**64 - 1, 2**63, -1, 0, 10**4000]
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from(GIANTS),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["", "\x00", "\ud800", "HwShunt", "vision", "a" * 5000]),
)
json_values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=16,
)

VALID_CASES: list[dict[str, Any]] = [
    {
        "op": "decide",
        "tree": {
            "entitlements": [
                {"id": "r", "guarantee_uj": 0, "guarantee_devices": 4, "over_quota_weight": 0},
                {
                    "id": "a",
                    "parent": "r",
                    "guarantee_uj": 100,
                    "guarantee_devices": 2,
                    "over_quota_weight": 1,
                },
            ]
        },
        "usage": {"a": {"spent_uj": 5, "held_devices": 1}},
        "claim": {
            "id": "c",
            "entitlement": "a",
            "gang_size": 1,
            "devices_per_member": 1,
            "estimate": {"uj": 5, "grade": "HwShunt"},
        },
    },
    {"op": "attribute", "total": {"uj": 10, "grade": "HwShunt"}, "occupants": {"x": 1, "y": 2}},
    {
        "op": "derive_estimate",
        "history": [{"entitlement": "a", "class": "x", "actual": {"uj": 3, "grade": "HwShunt"}}],
        "class": "x",
        "required": 1,
    },
    {
        "op": "preemption_order",
        "workloads": [{"key": "w", "spent_uj": 1, "completed_units": 1, "priority": 0}],
    },
    {
        "op": "idle",
        "policy": {"window_us": 10, "threshold_uw": 5},
        "workloads": [
            {
                "key": "w",
                "held_devices": 1,
                "observed_us": 20,
                "energy": {"uj": 1, "grade": "HwShunt"},
            }
        ],
    },
    {
        "op": "over_reservation",
        "policy": {"over_reservation": "signal", "margin_pct": 10, "notice_s": 300},
        "evidence": {
            "reserved_uj": 1000,
            "energy": {"uj": 1101, "grade": "HwShunt"},
            "exhausts_at_ms": 5,
        },
        "now_ms": 0,
        "done": ["notice"],
    },
    {
        "op": "live_projection",
        "policy": {"window_us": 60_000_000, "threshold_uw": 1_000_000},
        "reserved_uj": 1000,
        "held_devices": 1,
        "readings": [
            {"at_ms": 0, "energy": {"uj": 0, "grade": "HwShunt"}},
            {"at_ms": 60_000, "energy": {"uj": 700, "grade": "ModelBased"}},
        ],
        "progress": {"units": 3, "unit": "steps", "total": 9},
        "sample_period_ms": 30_000,
        "now_ms": 60_000,
    },
    {
        "op": "idle_act",
        "policy": {"window_us": 10, "threshold_uw": 5, "action": "requeue", "notice_s": 1},
        "live": {"verdict": "working", "reason": "progress"},
        "contended": True,
        "state": {"done": ["notice"], "notice_at_ms": 0},
        "now_ms": 1000,
    },
    {
        "op": "victims",
        "policy": {"action": "requeue", "after_s": 0, "cooldown_s": 1},
        "now_ms": 10_000,
        "waiting": [
            {
                "claim": "w",
                "entitlement": "a",
                "priority": 5,
                "partition": "p",
                "gpus": 2,
                "since_ms": 0,
                "requeued_at_ms": None,
            }
        ],
        "running": [
            {
                "claim": "r",
                "entitlement": "a",
                "priority": 1,
                "partition": "p",
                "gpus": 2,
                "spent_uj": 9,
                "units": 3,
                "requeueable": True,
                "requeued_at_ms": 0,
            }
        ],
    },
    {
        "op": "replay",
        "steward": STEWARD.kid,
        "public_key_hex": STEWARD.public_key.hex(),
        "ledger_hex": LEDGER.hex(),
    },
    {
        "op": "check_witness",
        "steward": STEWARD.kid,
        "steward_public_key_hex": STEWARD.public_key.hex(),
        "ledger_hex": LEDGER.hex(),
        "witness": WITNESS.kid,
        "witness_public_key_hex": WITNESS.public_key.hex(),
    },
]


@st.composite
def mutated_json(draw: st.DrawFn, bases: list[dict[str, Any]]) -> Any:
    """A valid document with one node replaced, removed or added, at any depth."""
    doc = json.loads(json.dumps(draw(st.sampled_from(bases))))
    node: Any = doc
    while True:
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        if not keys:
            break
        k = draw(st.sampled_from(keys))
        child = node[k]
        if isinstance(child, dict | list) and child and draw(st.booleans()):
            node = child
            continue
        action = draw(st.sampled_from(["replace", "remove", "add"]))
        if action == "replace":
            node[k] = draw(json_values)
        elif action == "remove" and isinstance(node, dict):
            del node[k]
        elif isinstance(node, dict):
            node[draw(st.text(max_size=8))] = draw(json_values)
        else:
            node.append(draw(json_values))
        break
    return doc


def as_bytes(doc: Any) -> bytes:
    """JSON as a hostile sender writes it: NaN, Infinity and lone surrogates included."""
    text = json.dumps(doc, allow_nan=True)
    return text.encode("utf-8", "surrogatepass")


EXEC_ERRORS = {
    "invalid_input",
    "invalid_tree",
    "no_occupants",
    "no_weight",
    "reading_out_of_order",
    "reading_decreased",
}


def exec_typed(data: bytes) -> None:
    out = json.loads(exec_bytes(data))
    assert isinstance(out, dict)
    if "error" in out:
        assert out["error"] in EXEC_ERRORS | REFUSALS, out
        assert isinstance(out["detail"], str) and "Traceback" not in out["detail"]


@FUZZ
@given(json_values)
def test_pool_exec_on_random_json(doc: Any) -> None:
    bounded("exec_random", lambda: exec_typed(as_bytes(doc)))


@FUZZ
@given(mutated_json(VALID_CASES))
def test_pool_exec_on_mutated_cases(doc: Any) -> None:
    bounded("exec_mutated", lambda: exec_typed(as_bytes(doc)))


@FUZZ
@given(st.binary(max_size=2048))
def test_pool_exec_on_random_bytes(data: bytes) -> None:
    bounded("exec_random", lambda: exec_typed(data))


def test_pool_exec_processes_answer_hostile_json_with_typed_errors_under_rlimits() -> None:
    cases = [
        b"[" * 200_000 + b"]" * 200_000,
        b'{"op": "decide", "claim": {"id": "' + b"x" * (8 << 20) + b'"}}',
        b'{"op": "attribute", "total": {"uj": 1'
        + b"0" * 4299
        + b', "grade": "HwShunt"}, "occupants": {"a": 1}}',
        b'{"op": "attribute", "total": {"uj": 1e999999, "grade": "HwShunt"}, "occupants": {"a": 1}}',
        b'{"op": "replay", "steward": "s", "public_key_hex": "'
        + b"0" * 64
        + b'", "ledger_hex": "'
        + (b"9b" + b"ff" * 8)
        + b'"}',
        b'{"op": "idle", "policy": {"window_us": ' + b"9" * 4000 + b'}, "workloads": []}',
        b"\xef\xbb\xbf{}",
        b'{"op": "\\ud800"}',
    ]
    for raw in cases:
        proc = pool_exec(raw)
        assert (proc.returncode, proc.stderr) == (0, b""), proc.stderr[-2000:]
        out = json.loads(proc.stdout)
        # A giant integer is valid in the pure operations, so some of these are results.
        assert "error" not in out or out["error"] in EXEC_ERRORS | REFUSALS, out
        assert "error" in out or "Traceback" not in proc.stdout.decode()
        _count["pool_exec_processes"] = _count.get("pool_exec_processes", 0) + 1


# -- the HTTP API --------------------------------------------------------------------------------

VALID_BODIES: dict[str, dict[str, Any]] = {
    "/v1/claims": {
        "id": "c",
        "entitlement": "robotics",  # within the tenant token's scope too
        "gang_size": 1,
        "devices_per_member": 1,
        "estimate": {"uj": MJ, "grade": "HwShunt"},
        "class": "train",
    },
    "/v1/claims/c/release": {"actual": {"uj": 1, "grade": "HwShunt"}},
    "/v1/estimates": {"class": "train", "entitlement": "vision", "required": 1},
    "/v1/preemption-order": VALID_CASES[3] | {"op": None},
    "/v1/idle": VALID_CASES[4] | {"op": None},
    "/v1/attribution": VALID_CASES[1] | {"op": None},
    "/v1/witness-receipts": {
        "witness": WITNESS.kid,
        "public_key_hex": WITNESS.public_key.hex(),
        "receipt_hex": RECEIPTS[0].hex(),
    },
}
for _body in VALID_BODIES.values():
    _body.pop("op", None)

# 413: a body past `pool serve --max-body-bytes`, refused before it is parsed.
HTTP_STATUSES = {200, 401, 403, 404, 405, 409, 413, 422, 503}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Deployment, Serve]]:
    yield from serving(tmp_path_factory.mktemp("hostile") / "d")


def answer_typed(
    serve: Serve, method: str, path: str, token: str | None, body: bytes | None
) -> int:
    import httpx

    headers = {"content-type": "application/json"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    began = time.monotonic()
    r = httpx.request(method, serve.url + path, content=body, headers=headers, timeout=30)
    assert time.monotonic() - began < MAX_SECONDS * 2, path
    assert r.status_code in HTTP_STATUSES, (path, r.status_code, r.text[:500])
    if r.status_code != 200:
        out = r.json()
        assert set(out) == {"error", "detail"}, out
        assert isinstance(out["error"], str) and "Traceback" not in out["detail"]
    _count["http_requests"] = _count.get("http_requests", 0) + 1
    return r.status_code


HTTP_FUZZ = settings(FUZZ, max_examples=150)


def bodies_for(path: str) -> st.SearchStrategy[tuple[str, Any]]:
    """For one endpoint: its valid body mutated, random JSON, or the valid body itself
    (so the fuzzed ledger has entries to verify afterwards)."""
    valid = VALID_BODIES[path]
    return st.tuples(
        st.just(path),
        st.one_of(
            mutated_json([valid]),
            json_values,
            st.just(valid).map(lambda v: json.loads(json.dumps(v))),
        ),
    )


@HTTP_FUZZ
@given(
    st.sampled_from(sorted(VALID_BODIES)).flatmap(bodies_for),
    st.sampled_from(["operator", "tenant", "none", "garbage"]),
)
def test_the_api_answers_hostile_bodies_with_typed_errors(
    served: tuple[Deployment, Serve], case: tuple[str, Any], who: str
) -> None:
    deployment, serve = served
    path, doc = case
    token = {
        "operator": deployment.operator,
        "tenant": deployment.tenants["robotics"],
        "none": None,
        "garbage": "jp_" + "x" * 300,  # unknown; a header h11 refuses never reaches the app
    }[who]
    if isinstance(doc, dict) and path == "/v1/claims" and isinstance(doc.get("id"), str):
        doc["id"] = f"{doc['id']}-{_count.get('http_requests', 0)}"  # mostly fresh ids
    answer_typed(serve, "POST", path, token, as_bytes(doc))


extreme_figures = st.one_of(st.integers(0, 2**64 + 1), st.sampled_from([0, 1, 2**63, 2**64 - 1]))


@settings(HTTP_FUZZ, max_examples=80)
@given(
    st.text(min_size=1, max_size=64),
    st.sampled_from(["research", "vision", "language", "robotics", "nobody"]),
    st.one_of(st.integers(1, 4), extreme_figures),
    st.one_of(st.integers(0, 10 * MJ), extreme_figures),
    st.sampled_from(["HwShunt", "ModelBased", "Estimator"]),
    st.one_of(st.none(), st.text(max_size=32)),
    extreme_figures,
)
def test_the_api_takes_extreme_but_well_formed_claims_and_releases(
    served: tuple[Deployment, Serve],
    cid: str,
    ent: str,
    devices: int,
    uj: int,
    grade: str,
    class_: str | None,
    actual: int,
) -> None:
    """Figures at and past 2**64, any Unicode id and class: a verdict or a typed error,
    and whatever is admitted and released is sealed into a ledger that verifies."""
    deployment, serve = served
    cid = f"{cid}-{_count.get('http_requests', 0)}"
    body: dict[str, Any] = {
        "id": cid,
        "entitlement": ent,
        "gang_size": 1,
        "devices_per_member": devices,
        "estimate": {"uj": uj, "grade": grade},
    }
    if class_ is not None:
        body["class"] = class_
    status = answer_typed(serve, "POST", "/v1/claims", deployment.operator, as_bytes(body))
    if status == 200:
        release = {"actual": {"uj": actual, "grade": grade}}
        answer_typed(
            serve,
            "POST",
            f"/v1/claims/{quote(cid.encode('utf-8', 'surrogatepass'), safe='')}/release",
            deployment.operator,
            as_bytes(release),
        )


@settings(HTTP_FUZZ, max_examples=80)
@given(st.text(min_size=1, max_size=300), st.text(max_size=40))
def test_the_api_answers_hostile_paths_and_queries_with_typed_errors(
    served: tuple[Deployment, Serve], segment: str, query: str
) -> None:
    deployment, serve = served
    seg = quote(segment.encode("utf-8", "surrogatepass"), safe="")
    q = quote(query.encode("utf-8", "surrogatepass"), safe="")
    for method, path in [
        ("GET", f"/v1/claims/{seg}"),
        ("GET", f"/v1/entitlements/{seg}"),
        ("GET", f"/v1/ledger/entries?from={q}"),
        ("POST", f"/v1/claims/{seg}/release"),
    ]:
        body = b'{"actual": {"uj": 1, "grade": "HwShunt"}}' if method == "POST" else None
        answer_typed(serve, method, path, deployment.operator, body)


def test_the_api_survives_bombs_in_bounded_memory(served: tuple[Deployment, Serve]) -> None:
    deployment, serve = served
    before = rss_kib(serve.proc.pid)
    bombs = [
        b"[" * 500_000 + b"]" * 500_000,
        b'{"id": "' + b"x" * (8 << 20) + b'", "entitlement": "vision", "gang_size": 1, '
        b'"devices_per_member": 1, "estimate": {"uj": 1, "grade": "HwShunt"}}',
        b'{"id": "big-int", "entitlement": "vision", "gang_size": 1' + b"0" * 4299 + b", "
        b'"devices_per_member": 1, "estimate": {"uj": 1, "grade": "HwShunt"}}',
        b'{"id": "huge-float", "entitlement": "vision", "gang_size": 1e999999, '
        b'"devices_per_member": 1, "estimate": {"uj": 1, "grade": "HwShunt"}}',
        b"\xff\xfe\x00",
    ]
    for _ in range(3):
        for bomb in bombs:
            # A giant but well-formed figure is a verdict (a Deny); the rest are refused,
            # those past the body limit before they are parsed.
            assert answer_typed(serve, "POST", "/v1/claims", deployment.operator, bomb) in (
                200,
                413,
                422,
            )
    receipt_bombs = [
        b"\x9b" + b"\xff" * 8,
        b"\x81" * 100_000,
        b"\xc2\x5a\x00\x0f\xff\x00" + b"\xff" * 0xFFF00,
    ]
    for bomb in receipt_bombs:
        body = json.dumps(VALID_BODIES["/v1/witness-receipts"] | {"receipt_hex": bomb.hex()})
        assert answer_typed(
            serve, "POST", "/v1/witness-receipts", deployment.operator, body.encode()
        ) in (413, 422)
    grown = rss_kib(serve.proc.pid) - before
    assert serve.proc.poll() is None
    assert grown < 256 * 1024, f"pool serve grew by {grown} KiB"
    _count["http_rss_growth_kib"] = grown


def test_the_ledger_still_verifies_after_the_fuzzing(served: tuple[Deployment, Serve]) -> None:
    """Whatever the fuzzers got admitted is a well-formed ledger the service replays to."""
    from joulepool.ledger.keys import load_key_file

    deployment, serve = served
    key = load_key_file(deployment.folder / "steward.pub")
    with serve.client(deployment.operator) as ops:
        raw = ops.get("/v1/ledger/entries").content
    replayer = replay_bytes(raw, key.kid, key.public_key)
    assert (
        replayer.length
        == json.loads(
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "joulepool",
                    "ledger",
                    "verify",
                    str(deployment.folder / "ledger.cbor"),
                    "--json",
                ],
                capture_output=True,
                check=True,
            ).stdout
        )["length"]
    )
    _count["http_ledger_entries"] = replayer.length


# -- one hostile request among honest ones ---------------------------------------------------


def test_a_hostile_request_in_a_group_commit_fails_alone(tmp_path: Path) -> None:
    """A request that cannot be sealed (an id too long for an entry) or recorded (a release
    of a claim never admitted) is refused by itself; the honest requests committed with it
    get their verdicts."""
    # A figure past 2**64 - 1 never reaches a commit: it is refused where it is built
    # (DESIGN.md §3, "Edge cases, pinned").
    with pytest.raises(InvalidInput):
        Energy(2**64, Grade.HwShunt)
    pool = Pool(team_tree(g=10**6), STEWARD, create(tmp_path / "ledger.cbor"))
    try:
        pool.submit(claim("victim", "a", 10))
        names = ["honest-1", "too-long", "honest-2", "never-admitted", "honest-3"]
        # One `apply` is one group commit: all five meet in it.
        outcomes = pool.apply(
            [
                claim("h1", "a", 10),
                claim("x" * (2 << 20), "b", 10),
                claim("h2", "b", 10),
                ReleaseRequest("ghost", Energy(1, Grade.HwShunt)),
                claim("h3", "c", 10),
            ]
        )
        results = dict(zip(names, outcomes, strict=True))
        for name in ("honest-1", "honest-2", "honest-3"):
            decision = results[name]
            assert isinstance(decision, Decision), (name, decision)
            assert isinstance(decision.verdict, Admit), (name, decision)
        assert isinstance(results["too-long"], InvalidInput), results["too-long"]
        assert isinstance(results["never-admitted"], ClaimError), results["never-admitted"]
        assert pool.appends == 2
        assert pool.length == 4
        assert pool.claim_state("victim") is not None and pool.claim_state("victim").running  # type: ignore[union-attr]
    finally:
        pool.close()


def test_zz_record_the_figures() -> None:
    """Runs last in this module (pytest keeps file order): writes what the fuzzers did."""
    _figures.rounds = sum(
        v for k, v in _count.items() if not k.startswith("http_rss") and k != "http_ledger_entries"
    )
    _figures.faults_injected = _figures.rounds
    _figures.entries_checked = _count.get("http_ledger_entries", 0)
    _figures.entries_lost = 0
    _figures.extra = dict(sorted(_count.items()))
    _figures.record()
