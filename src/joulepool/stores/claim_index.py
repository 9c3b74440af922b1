"""The released-claim index: every claim id a ledger admitted and released, off the heap
(standard §6.4: an id is never admitted twice), kept off the heap so that memory does not
grow with history (DESIGN.md §4).

The fold keeps open claims in memory (they are few and decisions need them); a claim that is
released moves here, to an SQLite table beside the ledger file (`<ledger>.claims`). Rows are
buffered in memory and written in one transaction per group commit, after the ledger's own
append is durable, with the length they cover; a batch that is taken back never reaches the
table. The index is a cache of the ledger like a snapshot: at a start it is cut back to the
length the fold restarts from (`rebase`), and one that does not reach that length is not
used; the ledger is replayed from entry 0 into a fresh one instead.

A reader beside the writer opens it read-only and trusts only rows below the length it folds
on from (`base`), so the writer's later rows never make a reader refuse what it reads.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

from joulepool.errors import StoreError
from joulepool.ledger.cose import GENESIS
from joulepool.ledger.released import Binding, ReleasedClaims

log = logging.getLogger("joulepool.claim_index")


def index_path(ledger: Path) -> Path:
    """Where the claim index of the ledger file `ledger` lives: beside it."""
    return ledger.with_name(ledger.name + ".claims")


class ClaimIndex(ReleasedClaims):
    """Released claims in an SQLite file beside a ledger file (§6.4)."""

    def __init__(self, path: Path | None = None, *, read_only: bool = False) -> None:
        super().__init__()
        self._temporary = path is None
        if path is None:
            # A full verification's bounded-memory duplicate check: a private file, removed
            # on close.
            fd, name = tempfile.mkstemp(prefix="joulepool-claims-", suffix=".sqlite")
            os.close(fd)
            path = Path(name)
        self.path = path
        self.where = str(path)
        self.read_only = read_only
        try:
            if read_only:
                self._db = sqlite3.connect(
                    f"file:{path}?mode=ro", uri=True, check_same_thread=False
                )
            else:
                self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.execute(
                    "CREATE TABLE IF NOT EXISTS released (claim TEXT PRIMARY KEY, "
                    "admitted INTEGER NOT NULL, released INTEGER NOT NULL) WITHOUT ROWID"
                )
                # Every start cuts the rows past the snapshot it folds on from (`rebase`):
                # by this index that touches the tail's rows, not every claim ever released.
                # An index written before it gets it here, once.
                self._db.execute("CREATE INDEX IF NOT EXISTS released_at ON released (released)")
                # What the rows cover (DESIGN.md §4). An index without it binds nothing: it
                # starts at length 0, so none of its rows is trusted.
                self._db.execute(
                    "CREATE TABLE IF NOT EXISTS bound (steward TEXT NOT NULL, "
                    "length INTEGER NOT NULL, head BLOB NOT NULL)"
                )
                if self._db.execute("SELECT count(*) FROM bound").fetchone()[0] == 0:
                    self._db.execute("INSERT INTO bound VALUES ('', 0, ?)", (GENESIS,))
        except sqlite3.Error as exc:
            raise StoreError(f"{path}: the claim index cannot be opened: {exc}") from None

    def _binding(self) -> Binding | None:
        try:
            row = self._db.execute("SELECT steward, length, head FROM bound").fetchone()
        except sqlite3.Error:
            return None
        if row is None or not isinstance(row[2], bytes):
            return None
        return str(row[0]), int(row[1]), bytes(row[2])

    def _covers(self) -> int:
        found = self._binding()
        return found[1] if found is not None else 0

    def _bind_to(self, length: int, head: bytes) -> None:
        self._db.execute(
            "UPDATE bound SET steward = ?, length = ?, head = ?", (self.steward, length, head)
        )

    def _rebase(self, length: int, head: bytes | None = None) -> None:
        if self.read_only:
            return
        head = self.head(length) if head is None else head
        self._db.execute("BEGIN")
        self._db.execute("DELETE FROM released WHERE released >= ?", (length,))
        self._bind_to(length, head)
        self._db.execute("COMMIT")

    def _reset(self) -> None:
        if self.read_only:
            raise StoreError(f"{self.path}: a read-only claim index cannot be rebuilt")
        self._db.execute("BEGIN")
        self._db.execute("DELETE FROM released")
        self._bind_to(0, GENESIS)
        self._db.execute("COMMIT")

    def _row(self, claim: str) -> tuple[int, int] | None:
        row = self._db.execute(
            "SELECT admitted, released FROM released WHERE claim = ? AND released < ?",
            (claim, self.base),
        ).fetchone()
        return None if row is None else (int(row[0]), int(row[1]))

    def _write(self, rows: list[tuple[str, int, int]], length: int) -> None:
        head = self.head(length)
        try:
            self._db.execute("BEGIN")
            self._db.executemany("INSERT INTO released VALUES (?, ?, ?)", rows)
            self._bind_to(length, head)
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
            raise StoreError(str(exc)) from None

    def _stored(self) -> Iterator[tuple[str, int, int]]:
        for claim, a, r in self._db.execute(
            "SELECT claim, admitted, released FROM released WHERE released < ? ORDER BY claim",
            (self.base,),
        ):
            yield str(claim), int(a), int(r)

    def _count(self) -> int:
        row = self._db.execute(
            "SELECT count(*) FROM released WHERE released < ?", (self.base,)
        ).fetchone()
        return int(row[0])

    def copy_to(self, path: Path, length: int, head: bytes | None = None) -> int:
        """Write a consistent copy of this index to the new file `path`, cut back to the
        ledger length `length` (a backup's, whose head is `head`) or to the length it
        reaches, if less (the writer writes it just after each append); the length the copy
        covers. A copy cut to a length whose head is not known covers nothing (DESIGN.md §4)."""
        try:
            copy = sqlite3.connect(path, isolation_level=None)
            try:
                # SQLite's online backup: one consistent state, whatever the writer does.
                self._db.backup(copy)
            finally:
                copy.close()
        except sqlite3.Error as exc:
            raise StoreError(f"{path}: the claim index cannot be copied: {exc}") from None
        index = ClaimIndex(path)
        try:
            found = index._binding()
            if found is None:
                return 0
            index.steward, covered, _ = found
            if covered <= length:
                return covered  # its binding, taken whole, still holds for the copy
            cut = length if head is not None else 0
            index._rebase(cut, head if head is not None else GENESIS)
            return cut
        finally:
            index.close()

    def close(self) -> None:
        """Close the database; a temporary index is removed."""
        with contextlib.suppress(sqlite3.Error):
            self._db.close()
        if self._temporary:
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(OSError):
                    os.unlink(f"{self.path}{suffix}")


def open_index(ledger: Path, *, read_only: bool = False) -> ClaimIndex | None:
    """The claim index beside the ledger file `ledger`: created for a writer; for a reader,
    None where there is none yet (it then keeps released claims in memory)."""
    path = index_path(ledger)
    if read_only and not path.exists():
        return None
    try:
        return ClaimIndex(path, read_only=read_only)
    except StoreError:
        if read_only:
            return None
        raise
