"""Replay with signatures checked in worker processes (§6.4, §6.5): the same verdict, at the
same index and with the same error name, as a replay in one process, whatever is broken and
wherever in the stream (across batch boundaries too)."""

from __future__ import annotations

import pytest

from joulepool.errors import LedgerRefused
from joulepool.events import Event
from joulepool.ledger.replay import BATCH, replay
from tests.ledgers import OTHER, STEWARD, admitted, released, seal_all

LENGTH = 3 * BATCH + 17


def long_ledger() -> list[bytes]:
    events: list[Event] = []
    i = 0
    while len(events) < LENGTH:
        events.append(admitted(f"c{i}", "abc"[i % 3], 100 + i))
        if len(events) < LENGTH and i % 2 == 0:
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
