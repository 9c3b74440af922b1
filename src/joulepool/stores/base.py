"""What every ledger store promises (standard §6.1, DESIGN.md §6).

A store holds entries as opaque bytes, in order; it never interprets them. Appending goes
through `writing()`, a critical section: inside it a writer first reads whatever entries
other writers appended since it last looked, then appends, so a store shared by replicas
keeps decisions linearizable. A store with a single writer has nothing to catch up on.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from joulepool.ledger.cose import GENESIS, content_address
from joulepool.ledger.rollback import HighWater, HighWaterMissing, Mark, check_acknowledged


class Writer(Protocol):
    """The critical section of one append (DESIGN.md §6)."""

    def unseen(self, known: int) -> list[bytes]:
        """Entries from index `known` on, appended by someone else since this writer looked."""
        ...

    def append(self, raws: Sequence[bytes]) -> None:
        """Append entries durably; on return they are on disk (or committed), in order."""
        ...


class SharedLedger(Protocol):
    """What a store shared by several `pool serve` replicas does besides holding entries
    (DESIGN.md §6): under the ledger's lock, every section checks that this replica seals
    with the steward key in force (DESIGN.md §4, key rotation) and decides under the
    configuration recorded for the ledger, so no replica decides on stale terms."""

    config_digest: bytes | None
    """This replica's configuration digest, checked in every section; None checks none."""

    def seal_with(self, public_key: bytes) -> None:
        """From now on, refuse every section unless `public_key` is the key in force
        (DESIGN.md §4, key rotation)."""
        ...

    def record_rotation(self, new: bytes, from_seq: int) -> None:
        """Record, under the lock, that `new` seals from entry `from_seq` on (only while the
        ledger's length is `from_seq`), before the rotation statement is written
        (DESIGN.md §4, key rotation)."""
        ...

    def agree_config(self) -> None:
        """Record this replica's digest if none is, or raise `StoreError` if another is
        (DESIGN.md §6)."""
        ...

    def adopt_config(self, digest: bytes) -> None:
        """Make `digest` the one the ledger is decided under: an operator's reload
        (DESIGN.md §6)."""
        ...


class EntryOffsets(Protocol):
    """Where each entry lies in a ledger file, so that a start from a state snapshot reads
    the file only from where the snapshot's length ends (DESIGN.md §4)."""

    def bounds(self, index: int) -> tuple[int, int]:
        """Where entry `index` lies: its first byte and the byte after its last (DESIGN.md §4,
        state snapshot)."""
        ...

    def resume(self, length: int, start: int, end: int, head: bytes) -> bool:
        """Before the first read: scan only after entry `length - 1`, said to lie at
        [start, end) with content address `head`, if its bytes there prove it; whether they
        did (a wrong hint costs a full scan, never a wrong entry; DESIGN.md §4)."""
        ...

    def proves_head(self, length: int, head: bytes) -> bool:
        """Whether the ledger's head at `length` is `head`, shown without reading the file
        before a state snapshot; False where it cannot be shown so (the caller reads the
        entry the usual way; DESIGN.md §4, §6.1)."""
        ...


class Store(Protocol):
    """A ledger: an ordered sequence of sealed entries (§6.1).

    What only some stores can do is declared as a facet that a store provides or answers
    None for (`shared`, `offsets`), so callers ask the store, never its class (DESIGN.md §5).
    """

    @property
    def shared(self) -> SharedLedger | None:
        """The store as replicas share it, or None for a store with a single writer
        (DESIGN.md §6)."""
        ...

    @property
    def offsets(self) -> EntryOffsets | None:
        """The entries' byte offsets in a ledger file, or None where entries are not bytes
        in one file (rows in PostgreSQL, a list in memory; DESIGN.md §4)."""
        ...

    @property
    def writer_pid(self) -> int | None:
        """The running writer this reader was opened beside, whose append in flight it
        does not read; None for a writer, with no writer running, or where a reader sees
        only committed entries (DESIGN.md §6)."""
        ...

    def ready(self) -> int:
        """The committed length, once the next append can be expected to succeed (a
        readiness probe, DESIGN.md §6); otherwise the `StoreError` that append would meet."""
        ...

    @property
    def name(self) -> str:
        """The ledger as an operator would name it: its file, or its name and server."""
        ...

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

    def high_water(self) -> HighWater | None:
        """The longest (length, head) this ledger acknowledged, or None without a record."""
        ...

    def length_and_high_water(self) -> tuple[int, HighWater | None]:
        """`len()` and `high_water()` as of one instant, for the start-up check (§6.1): an
        append landing between two separate reads would make a whole ledger look shorter
        than what it acknowledged (docs/reliability.md §16)."""
        ...

    def acknowledge(self, point: HighWater) -> None:
        """Set the high-water record to `point`, even below what it was (an accepted loss)."""
        ...

    def writing(self) -> AbstractContextManager[Writer]:
        """Enter the append critical section."""
        ...

    def close(self) -> None:
        """Release the store (and its writer lock)."""
        ...


def head_at(store: Store, length: int) -> bytes:
    """The ledger's head after its first `length` entries (DESIGN.md §4)."""
    return content_address(store.entry(length - 1)) if length else GENESIS


def refuse_rollback(store: Store, marks: Iterable[Mark] = ()) -> None:
    """Refuse a store whose ledger falls short of its own high-water record or of any of
    `marks` (kept witness receipts), before anything is replayed from it (§6.1).

    A ledger with entries and no record at all is refused too: nothing would then say
    what it acknowledged, and a copy cut short would start as if whole.
    """
    length, high = store.length_and_high_water()
    if high is None:
        if length:
            raise HighWaterMissing(
                f"{store.name} has {length} entries but no high-water record, so nothing says "
                "how many it acknowledged. If it predates high-water records, or you restored "
                "it on purpose, record it as it stands with `pool ledger acknowledge`"
            )
        mine: list[Mark] = []
    else:
        mine = [Mark("its high-water record", high)]
    offsets = store.offsets
    # A mark older than the snapshot a start folds on from would otherwise have the file
    # read from byte 0 for its entry's offset: at every start, however long the history.
    unproven = [
        mark
        for mark in [*mine, *marks]
        if offsets is None
        or mark.point.length > length
        or not offsets.proves_head(mark.point.length, mark.point.head)
    ]
    check_acknowledged(unproven, length, lambda n: head_at(store, n), store.name)
