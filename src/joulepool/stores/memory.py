"""A ledger held in memory, for simulations and tests (DESIGN.md §6); not durable."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from joulepool.errors import StoreError
from joulepool.ledger.cose import GENESIS, content_address
from joulepool.ledger.rollback import HighWater
from joulepool.stores.base import EntryOffsets, SharedLedger


class MemoryStore:
    """Entries in a list; the same interface as the durable stores.

    The entries it is built with count as acknowledged, like every entry appended since.
    """

    def __init__(self, entries: Sequence[bytes] = ()) -> None:
        self._entries = list(entries)
        head = content_address(self._entries[-1]) if self._entries else GENESIS
        self._high = HighWater(len(self._entries), head)

    @property
    def name(self) -> str:
        """A ledger in memory has no other name."""
        return "the ledger in memory"

    @property
    def shared(self) -> SharedLedger | None:
        """None: one writer, nobody to agree with (DESIGN.md §6)."""
        return None

    @property
    def offsets(self) -> EntryOffsets | None:
        """None: entries are items of a list, not bytes at offsets (DESIGN.md §4)."""
        return None

    @property
    def writer_pid(self) -> int | None:
        """None: no reader runs beside another process's writer here (DESIGN.md §6)."""
        return None

    def ready(self) -> int:
        """Its length: an append to memory is always expected to succeed (DESIGN.md §6)."""
        return len(self._entries)

    def high_water(self) -> HighWater:
        """What this store acknowledged: every entry it holds."""
        return self._high

    def length_and_high_water(self) -> tuple[int, HighWater]:
        """Its length and what it acknowledged (standard §6.1): one thread, one instant."""
        return len(self._entries), self._high

    def acknowledge(self, point: HighWater) -> None:
        """Set what counts as acknowledged."""
        self._high = point

    @property
    def fsyncs(self) -> int:
        """Always 0: nothing here is durable."""
        return 0

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self, start: int = 0) -> Iterator[bytes]:
        """Every entry from index `start`."""
        return iter(self._entries[start:])

    def entry(self, index: int) -> bytes:
        """One entry."""
        if not 0 <= index < len(self._entries):
            raise StoreError(f"no entry {index}: the ledger has {len(self._entries)}")
        return self._entries[index]

    @contextmanager
    def writing(self) -> Iterator[MemoryStore]:
        """A single writer has nothing to catch up on."""
        yield self

    def unseen(self, known: int) -> list[bytes]:
        """Nothing: this store has one writer."""
        return self._entries[known:]

    def append(self, raws: Sequence[bytes]) -> None:
        """Append in order."""
        self._entries.extend(raws)
        if raws:
            self._high = HighWater(len(self._entries), content_address(raws[-1]))

    def close(self) -> None:
        """Nothing to release."""
