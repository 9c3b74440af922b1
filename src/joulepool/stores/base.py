"""What every ledger store promises (standard §6.1, DESIGN.md §6).

A store holds entries as opaque bytes, in order; it never interprets them. Appending goes
through `writing()`, a critical section: inside it a writer first reads whatever entries
other writers appended since it last looked, then appends, so a store shared by replicas
keeps decisions linearizable. A store with a single writer has nothing to catch up on.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Protocol


class Writer(Protocol):
    """The critical section of one append (DESIGN.md §6)."""

    def unseen(self, known: int) -> list[bytes]:
        """Entries from index `known` on, appended by someone else since this writer looked."""
        ...

    def append(self, raws: Sequence[bytes]) -> None:
        """Append entries durably; on return they are on disk (or committed), in order."""
        ...


class Store(Protocol):
    """A ledger: an ordered sequence of sealed entries (§6.1)."""

    @property
    def fsyncs(self) -> int:
        """How many times this store forced its appends to stable storage."""
        ...

    def __len__(self) -> int:
        """The number of whole entries."""
        ...

    def entries(self, start: int = 0) -> Iterator[bytes]:
        """Every entry from index `start`, as stored."""
        ...

    def entry(self, index: int) -> bytes:
        """One entry, as stored."""
        ...

    def writing(self) -> AbstractContextManager[Writer]:
        """Enter the append critical section."""
        ...

    def close(self) -> None:
        """Release the store (and its writer lock)."""
        ...
