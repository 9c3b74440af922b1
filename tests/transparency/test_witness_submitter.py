"""The C2SP witness submitter against witnesses that misbehave, and `[[c2sp_witness]]`
entries (c2sp.org/tlog-witness, add-checkpoint; c2sp.org/tlog-cosignature). A real witness
(aics-witness) is in tests/interop; here a scripted HTTP server on 127.0.0.1 answers what
no honest witness would, and each answer is refused by name."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from joulepool.errors import InvalidInput
from joulepool.ledger.checkpoint import Checkpoint, cosign, witness_verifier_key
from joulepool.ledger.merkle import HashLevels, consistency_proof
from joulepool.ledger.note import NoteSignature
from joulepool.transparency.errors import (
    WitnessInconsistent,
    WitnessProtocolError,
    WitnessRefused,
    WitnessUnavailable,
)
from joulepool.transparency.witness_client import (
    WitnessConfig,
    parse_witnesses,
    request_body,
    submit,
)
from tests.support.ledgers import OTHER, WITNESS
from tests.support.servers import free_port
from tests.transparency.logs import VKEY, entries, note_of

NAME = "witness.test/scripted"
WKEY = witness_verifier_key(NAME, WITNESS.public_key)
LEAVES = entries(40)
NOTE = note_of(LEAVES)
CHECKPOINT = Checkpoint.parse(NOTE.decode().split("\n\n")[0] + "\n")
LEVELS = HashLevels.of_leaves(LEAVES)

Reply = tuple[int, str, bytes]


def _proofs(old: int, new: int) -> list[bytes]:
    return consistency_proof(old, new, LEVELS)


@contextmanager
def scripted(replies: list[Reply]) -> Iterator[tuple[WitnessConfig, list[bytes]]]:
    """A witness answering `replies` in order; yields its config and the bodies received."""
    received: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            assert self.path == "/w/add-checkpoint", self.path
            received.append(self.rfile.read(int(self.headers["Content-Length"])))
            status, ctype, body = replies[min(len(received), len(replies)) - 1]
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield WitnessConfig(f"http://127.0.0.1:{server.server_port}/w/", WKEY), received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _line(sig: NoteSignature) -> bytes:
    return sig.line().encode()


GOOD_SIG = cosign(CHECKPOINT, WITNESS, NAME, 1_764_000_000)
GOOD = _line(GOOD_SIG)
FORGED = _line(
    NoteSignature(
        NAME, GOOD_SIG.key_hash, GOOD_SIG.signature[:-1] + bytes([GOOD_SIG.signature[-1] ^ 1])
    )
)
SIZE = "text/x.tlog.size"


def test_the_request_is_old_size_proof_lines_blank_line_and_the_note() -> None:
    with scripted([(409, SIZE, b"16\n"), (200, "text/plain", GOOD)]) as (config, received):
        sigs = submit(config, NOTE, 0, _proofs)
    assert [s.name for s in sigs] == [NAME]
    assert received[0] == b"old 0\n\n" + NOTE
    assert received[1] == request_body(16, _proofs(16, 40), NOTE)
    assert received[1].startswith(b"old 16\n") and received[1].count(b"\n") > NOTE.count(b"\n") + 3


def test_only_the_configured_witness_keys_lines_are_returned() -> None:
    other = _line(cosign(CHECKPOINT, OTHER, "someone.else/w", 1_764_000_000))
    with scripted([(200, "text/plain", other + GOOD)]) as (config, _):
        assert [s.name for s in submit(config, NOTE, 0, _proofs)] == [NAME]


BAD: dict[str, list[Reply]] = {
    "409 not text/x.tlog.size": [(409, "text/plain", b"16\n")],
    "409 size not decimal": [(409, SIZE, b"sixteen\n")],
    "409 size without newline": [(409, SIZE, b"16")],
    "409 size with leading zero": [(409, SIZE, b"016\n")],
    "409 naming the size sent": [(409, SIZE, b"0\n")],
    "200 with no line by its key": [
        (200, "text/plain", _line(cosign(CHECKPOINT, OTHER, "someone.else/w", 1)))
    ],
    "200 with a forged line by its key": [(200, "text/plain", FORGED)],
    "200 cosigning another checkpoint": [
        (
            200,
            "text/plain",
            _line(
                cosign(Checkpoint(CHECKPOINT.origin, 39, CHECKPOINT.root_hash), WITNESS, NAME, 1)
            ),
        )
    ],
    "200 that is not signature lines": [(200, "text/plain", b"ok\n")],
    "200 that is not UTF-8": [(200, "text/plain", b"\xff\xfe\n")],
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_witness_answer_outside_the_protocol_is_refused_by_name(case: str) -> None:
    with scripted(BAD[case]) as (config, _), pytest.raises(WitnessProtocolError):
        submit(config, NOTE, 0, _proofs)


def test_a_422_is_a_fork_alarm() -> None:
    reply = [(422, "text/plain", b"inconsistent\n")]
    with scripted(reply) as (config, _), pytest.raises(WitnessInconsistent, match="422"):
        submit(config, NOTE, 16, _proofs)


def test_a_409_naming_a_larger_tree_is_a_fork_alarm() -> None:
    ahead = pytest.raises(WitnessInconsistent, match="larger than this checkpoint's 40")
    with scripted([(409, SIZE, b"41\n")]) as (config, _), ahead:
        submit(config, NOTE, 0, _proofs)


@pytest.mark.parametrize("status", [400, 403, 404, 500])
def test_other_refusals_are_witness_refused_with_the_status(status: int) -> None:
    with (
        scripted([(status, "text/plain", b"no\n")]) as (config, _),
        pytest.raises(WitnessRefused) as refused,
    ):
        submit(config, NOTE, 0, _proofs)
    assert refused.value.status == status


def test_a_busy_witness_or_one_that_keeps_moving_is_unavailable() -> None:
    with (
        scripted([(503, "text/plain", b"later\n")]) as (config, _),
        pytest.raises(WitnessUnavailable),
    ):
        submit(config, NOTE, 0, _proofs)
    moving = [(409, SIZE, f"{n}\n".encode()) for n in (3, 5, 7, 9, 11)]
    with (
        scripted(moving) as (config, received),
        pytest.raises(WitnessUnavailable, match="409 after 4 sizes"),
    ):
        submit(config, NOTE, 0, _proofs)
    assert len(received) == 4


def test_an_answer_over_the_bound_and_a_closed_port_are_unavailable() -> None:
    reply = [(200, "text/plain", b"x" * (64 * 1024 + 1))]
    too_long = pytest.raises(WitnessUnavailable, match="longer than")
    with scripted(reply) as (config, _), too_long:
        submit(config, NOTE, 0, _proofs)
    closed = WitnessConfig(f"http://127.0.0.1:{free_port()}/", WKEY)
    with pytest.raises(WitnessUnavailable):
        submit(closed, NOTE, 0, _proofs)


def test_c2sp_witness_entries_are_read_with_the_name_from_the_vkey() -> None:
    got = parse_witnesses(
        [
            {"url": "https://w1.example/", "vkey": WKEY.encode()},
            {
                "url": "http://127.0.0.1:7380",
                "vkey": witness_verifier_key("w2", OTHER.public_key).encode(),
            },
        ]
    )
    assert [w.name for w in got] == [NAME, "w2"]
    assert got[1].add_checkpoint_url == "http://127.0.0.1:7380/add-checkpoint"
    assert parse_witnesses(None) == ()


ENTRIES: dict[str, object] = {
    "not a list": {"url": "https://w/", "vkey": WKEY.encode()},
    "not a table": ["https://w/"],
    "no vkey": [{"url": "https://w/"}],
    "an unknown field": [{"url": "https://w/", "vkey": WKEY.encode(), "name": "w"}],
    "a file URL": [{"url": "file:///etc/", "vkey": WKEY.encode()}],
    "a URL with a query": [{"url": "https://w/?a=1", "vkey": WKEY.encode()}],
    "the endpoint, not its base": [{"url": "https://w/add-checkpoint", "vkey": WKEY.encode()}],
    "a log key, not a cosignature key": [{"url": "https://w/", "vkey": VKEY}],
    "a malformed vkey": [{"url": "https://w/", "vkey": "w+00000000+AAAA"}],
    "a number for the url": [{"url": 7, "vkey": WKEY.encode()}],
    "the same witness twice": [{"url": "https://a/", "vkey": WKEY.encode()}] * 2,
    "33 witnesses": [{"url": "https://a/", "vkey": WKEY.encode()}] * 33,
}


@pytest.mark.parametrize("case", sorted(ENTRIES))
def test_a_bad_c2sp_witness_entry_is_refused_by_name(case: str) -> None:
    with pytest.raises(InvalidInput, match="c2sp_witness"):
        parse_witnesses(ENTRIES[case])


def test_a_malformed_checkpoint_or_old_size_is_refused_before_any_request() -> None:
    closed = WitnessConfig(f"http://127.0.0.1:{free_port()}/", WKEY)
    with pytest.raises(InvalidInput, match="checkpoint_note"):
        submit(closed, b"not a note\n", 0, _proofs)
    with pytest.raises(InvalidInput, match="old_size"):
        submit(closed, NOTE, -1, _proofs)
