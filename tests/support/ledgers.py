"""Sealed ledgers for tests, built through the real sealing code with fixed keys."""

from __future__ import annotations

from collections.abc import Sequence

from joulepool.events import Admitted, Event, Released
from joulepool.grade import Energy, Grade
from joulepool.ledger.cose import GENESIS, content_address, seal
from joulepool.ledger.entry import core_of
from joulepool.ledger.keys import KeyPair

STEWARD = KeyPair.from_seed("steward", bytes(range(32)))
OTHER = KeyPair.from_seed("steward", bytes(range(1, 33)))
WITNESS = KeyPair.from_seed("auditor", bytes(range(2, 34)))


def admitted(
    claim: str,
    ent: str = "a",
    uj: int = 100,
    grade: Grade = Grade.HwShunt,
    class_: str | None = "x",
    borrowed: int = 0,
) -> Admitted:
    return Admitted(claim, ent, 1, 2, Energy(uj, grade), borrowed, 1_764_000_000_000, class_)


def released(claim: str, uj: int = 60, grade: Grade = Grade.HwShunt) -> Released:
    return Released(claim, Energy(uj, grade), 1_764_000_000_001)


def seal_all(events: Sequence[Event], key: KeyPair = STEWARD) -> list[bytes]:
    """Seal `events` as a chained ledger, exactly as a pool would."""
    out: list[bytes] = []
    head = GENESIS
    for seq, event in enumerate(events):
        raw = seal(core_of(event, seq, head, key.kid), key.kid, key.signing_key)
        out.append(raw)
        head = content_address(raw)
    return out


def twenty() -> list[bytes]:
    """A 20-entry ledger of admissions and releases over three entitlements."""
    events: list[Event] = []
    for i in range(10):
        events.append(admitted(f"c{i}", "abc"[i % 3], 100 + i, class_="train"))
        if i % 3 != 2:
            events.append(released(f"c{i}", 50 + i))
    while len(events) < 20:
        events.append(admitted(f"d{len(events)}", "a", 7))
    return seal_all(events[:20])
