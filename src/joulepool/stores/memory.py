"""A ledger held in memory, for simulations and tests (DESIGN.md §6); not durable."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from joulepool.errors import StoreError


class MemoryStore:
    """Entries in a list; the same interface as the durable stores."""

    def __init__(self, entries: Sequence[bytes] = ()) -> None:
        self._entries = list(entries)

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

    def close(self) -> None:
        """Nothing to release."""
