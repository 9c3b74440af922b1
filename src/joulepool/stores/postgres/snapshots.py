"""State snapshots of a ledger in PostgreSQL, in a table beside its entries (DESIGN.md §4)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import psycopg

from joulepool.errors import StoreError
from joulepool.ledger.snapshot import KEEP, MAX_SNAPSHOT_BYTES, SnapshotRefused
from joulepool.stores.postgres.link import reason
from joulepool.stores.postgres.sql import (
    SNAPSHOT_LENGTHS,
    SNAPSHOT_NEWEST,
    SNAPSHOT_PRUNE,
    SNAPSHOT_READ,
    SNAPSHOT_WRITE,
)

if TYPE_CHECKING:
    from joulepool.stores.postgres.store import PostgresStore


class PostgresSnapshots:
    """The state snapshots of a ledger in PostgreSQL, in a table beside its entries
    (DESIGN.md §4): what `ledger.snapshot.SnapshotFolder` is beside a ledger file.

    A snapshot is a cache, signed by the steward: whichever replica seals one writes it
    (the first at a length stays), and a start checks it like any other before trusting it.
    Writes run on a connection of their own, so the commit path never waits on one.
    """

    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    @property
    def where(self) -> str:
        """Where they are kept, for messages."""
        return f"table pool_ledger_snapshots of ledger {self.store.ledger!r} at {self.store.where}"

    def lengths(self) -> list[int]:
        """The lengths of the kept snapshots, newest first."""
        rows = self.store._read_rows("listing snapshots", SNAPSHOT_LENGTHS, (self.store.ledger,))
        return [int(row[0]) for row in rows]

    def newest(self) -> tuple[int, float] | None:
        """The newest kept snapshot's length and when it was written (seconds since the
        epoch, the server's clock), or None when none is kept."""
        rows = self.store._read_rows("listing snapshots", SNAPSHOT_NEWEST, (self.store.ledger,))
        return None if not rows else (int(rows[0][0]), float(rows[0][1]))

    def newest_first(self) -> Iterator[tuple[int, bytes | SnapshotRefused]]:
        """Each kept snapshot's length and bytes (or why it cannot be read), newest first."""
        for length in self.lengths():
            try:
                rows = self.store._read_rows(
                    "reading a snapshot", SNAPSHOT_READ, (self.store.ledger, length)
                )
            except StoreError as exc:
                yield length, SnapshotRefused(f"cannot be read: {exc}")
                continue
            if rows:  # pruned by another replica meanwhile: nothing to say about it
                yield length, bytes(rows[0][0])

    def write(self, length: int, raw: bytes, keep: int = KEEP) -> None:
        """Keep a new snapshot (committed before this returns), then drop all but the
        newest `keep`."""
        if len(raw) > MAX_SNAPSHOT_BYTES:
            raise StoreError(f"a snapshot of {len(raw)} bytes is larger than any kept")
        conn = self.store._connect()
        try:
            with conn.transaction():
                conn.execute(SNAPSHOT_WRITE, (self.store.ledger, length, raw))
                conn.execute(SNAPSHOT_PRUNE, (self.store.ledger, self.store.ledger, keep))
        except psycopg.Error as exc:
            raise StoreError(
                f"{self.store.where}: writing a snapshot failed: {reason(exc)}"
            ) from None
        finally:
            conn.close()
