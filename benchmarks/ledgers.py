"""Large sealed ledgers for benchmarks, built once and cached under .cache/bench/."""

from __future__ import annotations

from pathlib import Path

from joulepool.events import Admitted, Event, Released
from joulepool.grade import Energy, Grade
from joulepool.ledger.cose import GENESIS, content_address, seal
from joulepool.ledger.entry import core_of
from joulepool.ledger.keys import KeyPair

CACHE = Path(__file__).resolve().parent.parent / ".cache" / "bench"
KEY = KeyPair.from_seed("steward", bytes(range(32)))


def event(i: int) -> Event:
    """Admissions and releases in turn over 50 entitlements, one of eight classes each."""
    claim = f"job-{i // 2:08d}"
    if i % 2 == 0:
        return Admitted(
            claim,
            f"team-{(i // 2) % 50:02d}",
            1 + i % 4,
            1 + i % 8,
            Energy(10**9 + i, Grade.ModelBased),
            0,
            1_764_000_000_000 + i,
            f"class-{i % 8}",
        )
    return Released(claim, Energy(9 * 10**8 + i, Grade.HwShunt), 1_764_000_000_000 + i)


def ledger_file(entries: int) -> Path:
    """A ledger file of `entries` sealed entries (built on first use; sealing is sequential,
    since each entry's `prev` is the address of the one before)."""
    path = CACHE / f"ledger-{entries}.cbor"
    if path.exists():
        return path
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    head = GENESIS
    signing = KEY.signing_key
    with tmp.open("wb") as out:
        for i in range(entries):
            raw = seal(core_of(event(i), i, head, KEY.kid), KEY.kid, signing)
            out.write(raw)
            head = content_address(raw)
    tmp.replace(path)
    return path
