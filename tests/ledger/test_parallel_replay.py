"""Replay with signatures checked in worker processes (§6.4, §6.5): the same verdict, at the
same index and with the same error name, as a replay in one process, whatever is broken and
wherever in the stream (across batch boundaries too)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import joulepool.ledger.replay as replay_module
from joulepool.errors import LedgerRefused
from joulepool.events import Event
from joulepool.ledger.replay import BATCH, PARALLEL_FROM, replay
from tests.support.ledgers import OTHER, STEWARD, admitted, released, seal_all

LENGTH = 3 * BATCH + 17


def long_ledger(length: int = LENGTH) -> list[bytes]:
    events: list[Event] = []
    i = 0
    while len(events) < length:
        events.append(admitted(f"c{i}", "abc"[i % 3], 100 + i))
        if len(events) < length and i % 2 == 0:
            events.append(released(f"c{i}", 40 + i))
        i += 1
    return seal_all(events)


def outcome(entries: list[bytes], workers: int) -> tuple[str, int, object]:
    try:
        r = replay(entries, STEWARD.kid, STEWARD.public_key, workers=workers)
    except LedgerRefused as exc:
        return ("refused", exc.index, exc.error)
    return ("ok", r.length, (r.head, r.state.open_claims()))


def flip(raw: bytes, at: int) -> bytes:
    return raw[:at] + bytes([raw[at] ^ 0x01]) + raw[at + 1 :]


GOOD = long_ledger()
OTHER_SIGNED = seal_all([admitted("z")], OTHER)[0]


@pytest.mark.parametrize(
    ("name", "broken"),
    [
        ("whole", GOOD),
        ("bad signature mid batch", [*GOOD[:700], flip(GOOD[700], -3), *GOOD[701:]]),
        (
            "bad signature first of a batch",
            [*GOOD[:BATCH], flip(GOOD[BATCH], -1), *GOOD[BATCH + 1 :]],
        ),
        ("malformed in the last batch", [*GOOD[:1540], b"\xa1\x01", *GOOD[1541:]]),
        ("dropped entry", [*GOOD[:600], *GOOD[601:]]),
        ("swap", [*GOOD[:900], GOOD[901], GOOD[900], *GOOD[902:]]),
        ("other key at 0", [OTHER_SIGNED, *GOOD[1:]]),
        ("payload byte changed", [*GOOD[:1200], flip(GOOD[1200], 40), *GOOD[1201:]]),
        ("truncated stream", GOOD[:1001]),
    ],
)
def test_parallel_replay_refuses_exactly_where_serial_does(name: str, broken: list[bytes]) -> None:
    serial = outcome(broken, workers=1)
    assert outcome(broken, workers=2) == serial, name
    if name not in ("whole", "truncated stream"):
        assert serial[0] == "refused"


@pytest.mark.parametrize("length", [PARALLEL_FROM - 1, PARALLEL_FROM, PARALLEL_FROM + 700])
@pytest.mark.parametrize("break_at", [None, 5, PARALLEL_FROM - 1, PARALLEL_FROM + 300])
def test_workers_0_verifies_in_processes_only_where_there_are_enough_entries(
    monkeypatch: pytest.MonkeyPatch, length: int, break_at: int | None
) -> None:
    """`workers=0` reads ahead to choose: the read-ahead is replayed like every other entry,
    so the verdict is the serial one wherever the stream breaks."""
    entries = long_ledger(length)
    if break_at is not None and break_at < length:
        entries[break_at] = flip(entries[break_at], -2)
    serial = outcome(entries, workers=1)
    parallel: list[int] = []
    real = replay_module._replay_parallel

    def spy(*args: object) -> None:
        parallel.append(1)
        real(*args)  # type: ignore[arg-type]

    # Two processors, whatever this machine has, so the choice is the one under test.
    monkeypatch.setattr(replay_module, "default_workers", lambda: 2)
    monkeypatch.setattr(replay_module, "_replay_parallel", spy)
    assert outcome(entries, workers=0) == serial
    assert bool(parallel) == (length >= PARALLEL_FROM)


BUSY_STDERR = textwrap.dedent(
    """
    import io, os, sys, threading
    from joulepool.ledger.replay import replay
    from tests.support.ledgers import STEWARD, admitted, seal_all

    entries = seal_all([admitted(f"c{i}", "a", 1) for i in range(600)])
    sink = io.FileIO(os.open(os.devnull, os.O_WRONLY), "w")
    sys.stderr = io.TextIOWrapper(io.BufferedWriter(sink), line_buffering=True)

    def log_lines() -> None:
        while True:
            sys.stderr.write("a line of the access log" + os.linesep)

    threading.Thread(target=log_lines, daemon=True).start()
    for _ in range(5):
        assert replay(entries, STEWARD.kid, STEWARD.public_key, workers=2).length == 600
    print("replayed", file=sys.__stdout__, flush=True)
    os._exit(0)
    """
)


def test_workers_forked_while_another_thread_writes_to_stderr_still_finish() -> None:
    """`pool serve` verifies its ledger in forked workers while its event loop writes the
    access log: a worker must not inherit that stream's lock and hang on its way out."""
    root = Path(__file__).resolve().parents[2]
    run = subprocess.Popen(
        [sys.executable, "-c", BUSY_STDERR],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = run.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)  # the workers too, hung or not
        run.communicate()
        pytest.fail("a worker hung: replay with workers never returned")
    assert out.strip() == "replayed", err
