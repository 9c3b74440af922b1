"""`pool proof follow`: the tenant keeps the last verified checkpoint, accepts a larger one
only with a consistency proof that verifies (from the server's endpoint or from its tiles),
and raises the alarm on a rollback or a fork without ever overwriting what it kept
(DESIGN.md §8; docs/transparency.md). The log is served over real HTTP."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from joulepool.cli import main
from joulepool.ledger.checkpoint import (
    Checkpoint,
    add_signatures,
    cosign,
    log_verifier_key,
    witness_verifier_key,
)
from joulepool.ledger.keys import KeyPair
from joulepool.ledger.note import NoteSignature
from joulepool.transparency.errors import CheckpointUnverified, ForkAlarm, Unreachable
from joulepool.transparency.follow import follow_round
from joulepool.transparency.http import get_ok
from joulepool.transparency.logkeys import parse_vkeys
from tests.support.ledgers import OTHER, WITNESS
from tests.transparency.logs import VKEY, Log, entries, note_of, serving

KEYS = parse_vkeys(VKEY)
LEAVES = entries(700)
TOKEN = "jp_not_a_real_token"  # noqa: S105


def _follow(url: str, state: Path, *extra: str) -> int:
    return main(["proof", "follow", url, "--vkey", VKEY, "--state", str(state), "--once", *extra])


@pytest.mark.parametrize("tiles", [False, True], ids=["proof endpoint", "tiles"])
def test_a_growing_log_is_followed_round_by_round(tiles: bool, tmp_path: Path) -> None:
    state = tmp_path / "kept"
    log = Log(LEAVES[:5])
    with serving(log) as url:
        first = follow_round(url, KEYS, state, tiles=tiles)
        assert (first.outcome, first.kept.checkpoint.size) == ("first", 5)
        assert follow_round(url, KEYS, state, tiles=tiles).outcome == "unchanged"
        # Across a tile boundary and up to a level-1 tile.
        for size in (256, 257, 700):
            log.leaves = LEAVES[:size]
            grew = follow_round(url, KEYS, state, tiles=tiles)
            assert (grew.outcome, grew.kept.checkpoint.size) == ("grew", size)
    assert state.read_bytes() == note_of(LEAVES)


def test_pool_proof_follow_once_reports_the_round(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "kept"
    log = Log(LEAVES[:3])
    with serving(log) as url:
        assert _follow(url, state, "--json") == 0
        assert json.loads(capsys.readouterr().out)["outcome"] == "first"
        log.leaves = LEAVES[:9]
        assert _follow(url, state, "--json") == 0
        out = json.loads(capsys.readouterr().out)
    assert (out["outcome"], out["size"], out["previous_size"]) == ("grew", 9, 3)


def _alarm(url: str, state: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    kept = state.read_bytes()
    assert _follow(url, state, *extra) == 5
    assert state.read_bytes() == kept, "an alarm must never overwrite the kept checkpoint"
    return capsys.readouterr().err


def test_a_rollback_is_an_alarm_naming_both_checkpoints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "kept"
    log = Log(LEAVES[:20])
    with serving(log) as url:
        assert _follow(url, state) == 0
        log.leaves = LEAVES[:12]
        err = _alarm(url, state, capsys)
    assert "ALARM: rollback" in err
    assert "size 20" in err and "size 12" in err


def test_another_root_at_the_kept_size_is_a_fork_alarm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "kept"
    log = Log(LEAVES[:20])
    with serving(log) as url:
        assert _follow(url, state) == 0
        log.leaves = LEAVES[:10] + entries(20, salt=1)[10:]
        err = _alarm(url, state, capsys)
    assert "fork: two signed checkpoints at size 20" in err


@pytest.mark.parametrize("tiles", [[], ["--tiles"]], ids=["proof endpoint", "tiles"])
def test_a_rewritten_history_that_grew_is_a_fork_alarm(
    tiles: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "kept"
    log = Log(LEAVES[:300])
    with serving(log) as url:
        assert _follow(url, state) == 0
        # Rolled back to 250 and rewritten from there, then grown past the kept size.
        log.leaves = LEAVES[:250] + entries(400, salt=1)[250:]
        err = _alarm(url, state, capsys, *tiles)
    assert "does not extend the kept one at size 300" in err


def test_a_consistency_proof_that_does_not_verify_is_a_fork_alarm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "kept"
    log = Log(LEAVES[:30])
    with serving(log) as url:
        assert _follow(url, state) == 0
        log.leaves = LEAVES[:60]
        log.proof_override = [bytes(32)] * 3
        _alarm(url, state, capsys)


def test_a_checkpoint_not_signed_by_the_vkey_is_refused_and_nothing_kept(
    tmp_path: Path,
) -> None:
    state = tmp_path / "kept"
    log = Log(LEAVES[:5], note=note_of(LEAVES[:5], OTHER))
    with serving(log) as url, pytest.raises(CheckpointUnverified):
        follow_round(url, KEYS, state)
    assert not state.exists()


def test_a_kept_checkpoint_altered_on_disk_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "kept"
    state.write_bytes(note_of(LEAVES[:5], OTHER))
    log = Log(LEAVES[:9])
    with serving(log) as url, pytest.raises(CheckpointUnverified, match="state file"):
        follow_round(url, KEYS, state)


def test_a_log_under_another_origin_is_a_fork_alarm(tmp_path: Path) -> None:
    state = tmp_path / "kept"
    both = (*KEYS, log_verifier_key(OTHER, "pool.example/other"))
    log = Log(LEAVES[:5])
    with serving(log) as url:
        follow_round(url, both, state)
        log.note = note_of(LEAVES[:9], OTHER, "pool.example/other")
        with pytest.raises(ForkAlarm, match="origin"):
            follow_round(url, both, state)


def test_an_unreachable_log_is_one_line_and_keeps_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with serving(Log(LEAVES[:1])) as url:
        pass
    state = tmp_path / "kept"
    assert _follow(url, state) == 1
    assert capsys.readouterr().err.startswith("pool: unreachable: ")
    assert not state.exists()
    with pytest.raises(Unreachable):
        follow_round(url, KEYS, state)


def test_a_checkpoint_answer_over_the_note_bound_is_refused(tmp_path: Path) -> None:
    log = Log(LEAVES[:1], note=b"x" * (256 * 1024 + 1))
    with serving(log) as url, pytest.raises(Unreachable, match="longer than"):
        follow_round(url, KEYS, tmp_path / "kept")


def test_a_log_that_answers_a_byte_at_a_time_is_given_up_on(tmp_path: Path) -> None:
    class Drip(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            with contextlib.suppress(OSError):
                for _ in range(1000):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.05)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Drip)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    started = time.monotonic()
    try:
        with pytest.raises(Unreachable, match="time limit"):
            follow_round(
                f"http://127.0.0.1:{server.server_port}/", KEYS, tmp_path / "k", timeout_s=0.3
            )
    finally:
        server.shutdown()
        server.server_close()
    # Each byte came well within the socket's timeout; the whole answer's limit held.
    assert time.monotonic() - started < 10


def test_a_redirect_is_not_followed_so_the_token_stays_with_the_log() -> None:
    asked: list[str | None] = []

    class Elsewhere(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            asked.append(self.headers.get("Authorization"))
            self.send_response(200)
            self.end_headers()

    with _server(Elsewhere) as elsewhere:

        class Redirect(Elsewhere):
            def do_GET(self) -> None:
                self.send_response(302)
                self.send_header("Location", elsewhere + self.path)
                self.send_header("Content-Length", "0")
                self.end_headers()

        with _server(Redirect) as url, pytest.raises(Unreachable, match="HTTP 302"):
            get_ok(url + "v1/proof/consistency?from=1", 1024, token=TOKEN)
    assert asked == []


@contextlib.contextmanager
def _server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("mode", "text", "says"),
    [
        (0o644, TOKEN, "must be 0600"),
        (0o600, "", "one token on one line"),
        (0o600, "two tokens", "one token on one line"),
    ],
)
def test_a_token_file_others_can_read_or_that_holds_no_one_token_is_refused(
    mode: int, text: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token = tmp_path / "token"
    token.write_text(text + "\n")
    token.chmod(mode)
    with serving(Log(LEAVES[:1])) as url:
        assert _follow(url, tmp_path / "kept", "--token-file", str(token)) == 1
    assert says in capsys.readouterr().err
    assert not (tmp_path / "kept").exists()


def test_the_token_is_sent_for_the_consistency_proof(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    log = Log(LEAVES[:3])
    with serving(log) as url:
        assert _follow(url, tmp_path / "kept", "--token-file", str(token)) == 0
        log.leaves = LEAVES[:9]
        assert _follow(url, tmp_path / "kept", "--token-file", str(token)) == 0
    assert log.authorizations[-1] == f"Bearer {TOKEN}"


W1 = witness_verifier_key("witness.test/w1", WITNESS.public_key)
W2 = witness_verifier_key("witness.test/w2", OTHER.public_key)


def _cosigned(leaves: list[bytes], *signers: tuple[KeyPair, str]) -> bytes:
    note = note_of(leaves)
    checkpoint = Checkpoint.parse(note.decode().split("\n\n")[0] + "\n")
    return add_signatures(note, [cosign(checkpoint, k, n, 1_764_000_000) for k, n in signers])


def test_with_witness_keys_only_a_cosigned_checkpoint_is_followed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "kept"
    both = ["--witness-vkey", W1.encode(), "--witness-vkey", W2.encode(), "--json"]
    log = Log(LEAVES[:5], note=_cosigned(LEAVES[:5], (WITNESS, "witness.test/w1")))
    with serving(log) as url:
        assert _follow(url, state, *both) == 0
        assert json.loads(capsys.readouterr().out)["cosigned_by"] == ["witness.test/w1"]
        # Grown, but no witness has seen it: not followed, and nothing is overwritten.
        log.leaves, log.note = LEAVES[:9], None
        kept = state.read_bytes()
        assert _follow(url, state, *both) == 1
        assert "cosigned by 0 of the witnesses given (none), fewer than the 1" in (
            capsys.readouterr().err
        )
        assert state.read_bytes() == kept
        # Both required: one is not enough.
        log.note = _cosigned(LEAVES[:9], (WITNESS, "witness.test/w1"))
        assert _follow(url, state, *both, "--cosigned", "2") == 1
        assert "fewer than the 2 required" in capsys.readouterr().err
        log.note = _cosigned(LEAVES[:9], (WITNESS, "witness.test/w1"), (OTHER, "witness.test/w2"))
        assert _follow(url, state, *both, "--cosigned", "2") == 0
        out = json.loads(capsys.readouterr().out)
    assert (out["outcome"], out["cosigned_by"]) == ("grew", ["witness.test/w1", "witness.test/w2"])


def test_a_forged_cosignature_by_a_witness_given_is_a_bad_signature(tmp_path: Path) -> None:
    # Signed by another key under w1's name and key hash: the known key's line fails.
    note = note_of(LEAVES[:5])
    checkpoint = Checkpoint.parse(note.decode().split("\n\n")[0] + "\n")
    good = cosign(checkpoint, WITNESS, "witness.test/w1", 1)
    bad = cosign(checkpoint, OTHER, "witness.test/w1", 1)
    forged = add_signatures(note, [NoteSignature(good.name, good.key_hash, bad.signature)])
    with (
        serving(Log(LEAVES[:5], note=forged)) as url,
        pytest.raises(CheckpointUnverified, match="invalid"),
    ):
        follow_round(url, KEYS, tmp_path / "kept", witnesses=(W1,), quorum=1)


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--witness-vkey", VKEY], "bundle_malformed"),
        (["--witness-vkey", W1.encode(), "--cosigned", "2"], "--cosigned: must be in [0, 1]"),
        (["--witness-vkey", W1.encode(), "--witness-vkey", W1.encode()], "names one witness"),
    ],
)
def test_witness_flags_that_cannot_be_met_are_refused_before_any_round(
    extra: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _follow("http://127.0.0.1:9/", tmp_path / "kept", *extra) == 1
    assert says in capsys.readouterr().err
