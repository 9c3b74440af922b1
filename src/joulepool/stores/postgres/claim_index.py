"""Released claims of a ledger in PostgreSQL, one row per claim id (standard §6.4: an id is
never admitted twice), off every replica's heap, bound to the steward, length and head they
cover (DESIGN.md §4)."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, LiteralString

import psycopg

from joulepool.errors import StoreError
from joulepool.ledger.released import Binding, ReleasedClaims
from joulepool.stores.postgres.link import Conn, lost, reason
from joulepool.stores.postgres.sql import (
    BEGIN,
    CLAIM_ROW,
    CLAIM_WRITE,
    CLAIMS_BINDING,
    CLAIMS_COUNT,
    CLAIMS_COVER,
    CLAIMS_COVERS,
    CLAIMS_DROP,
    CLAIMS_PAST,
    CLAIMS_STORED,
    CLAIMS_UNBIND,
    LOCK,
)

if TYPE_CHECKING:
    from joulepool.stores.postgres.store import PostgresStore

log = logging.getLogger("joulepool.claim_index")


class PostgresClaimIndex(ReleasedClaims):
    """Released claims of a ledger in PostgreSQL, in a table with a unique key per claim id
    (§6.4): what `stores.claim_index.ClaimIndex` is beside a ledger file.

    Every replica folds the same ledger, so the rows are facts about it, the same whoever
    writes them; each replica trusts only rows released below the length it folded
    (`base`), so a replica never reads another's future. The rows count only while the
    ledger has the head they record at the length they record; a table of another steward's
    ledger, or of a history this one no longer has, is discarded and rebuilt (DESIGN.md §4).
    Rows are never deleted while replicas run, except those and rows past the ledger's end
    (a history an operator accepted losing), both under the ledger's lock. On a connection
    of its own: it is read inside the fold, beside the store's own work.
    """

    def __init__(self, store: PostgresStore) -> None:
        super().__init__()
        self.store = store
        self.read_only = False
        self.where = f"table pool_ledger_claims of ledger {store.ledger!r} at {store.where}"
        self._link = store.link()
        self._lock = threading.Lock()

    def _query(self, doing: str, query: LiteralString, params: Sequence[Any]) -> list[Any]:
        """One statement on the index's own connection (`Link.run`: a stale one is replaced
        once)."""

        def execute(conn: Conn) -> list[Any]:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description is not None else []

        with self._lock:
            return self._link.run(doing, execute, written="nothing was changed")

    def _covers(self) -> int:
        rows = self._query("reading the claim index", CLAIMS_COVERS, (self.store.ledger,))
        return int(rows[0][0]) if rows else 0

    def _binding(self) -> Binding | None:
        return None  # read and checked in one transaction, in `_check`

    def _check(self) -> None:
        """The binding, checked against the ledger, and the rows past the ledger's end, cut,
        in one transaction under the ledger's lock (DESIGN.md §4, §6): no append lands
        between reading the length and deleting past it, and rows another deployment's
        ledger left, or a history this one no longer has, are dropped with a warning."""
        self._checked = True
        ledger = self.store.ledger
        lock_key = self.store.lock_key

        def check(conn: Conn) -> str | None:
            conn.execute(BEGIN, prepare=False)
            try:
                conn.execute(LOCK, (lock_key,))
                row = conn.execute(CLAIMS_BINDING, (ledger, ledger, ledger, ledger)).fetchone()
                assert row is not None
                steward, length, head, actual, ledger_length, rows = row
                problem = None
                if steward is None:
                    if rows:
                        problem = "it records no ledger it covers"
                elif int(length) > 0 and steward != self.steward:
                    problem = f"it covers steward {steward!r}'s ledger, not {self.steward!r}'s"
                elif int(length) > 0 and actual is None:
                    problem = f"it covers {length} entries and the ledger has {ledger_length}"
                elif int(length) > 0 and bytes(actual) != bytes(head):
                    problem = f"the ledger's head at {length} is not the head it covers"
                if problem is None:
                    # Rows past the end belong to entries the ledger no longer has (a loss
                    # accepted by an operator): no replica can have folded them.
                    conn.execute(CLAIMS_PAST, (ledger, ledger_length))
                else:
                    conn.execute(CLAIMS_DROP, (ledger,))
                    conn.execute(CLAIMS_UNBIND, (ledger,))
                conn.execute("COMMIT")
                return problem
            except BaseException:
                with contextlib.suppress(psycopg.Error):
                    conn.execute("ROLLBACK")
                raise

        with self._lock:
            problem = self._link.run(
                "checking the claim index", check, written="the index was left as it was"
            )
        if problem is not None:
            log.warning(
                "%s: %s; the claim index is discarded and rebuilt from the ledger",
                self.where,
                problem,
            )

    def _rebase(self, length: int) -> None:
        """Nothing to cut: other replicas may rely on the rows past `length`."""

    def _reset(self) -> None:
        """A replay from entry 0 rewrites each row as it folds; other replicas' rows stay."""

    def _row(self, claim: str) -> tuple[int, int] | None:
        rows = self._query(
            "reading the claim index", CLAIM_ROW, (self.store.ledger, claim, self.base)
        )
        return None if not rows else (int(rows[0][0]), int(rows[0][1]))

    def _write(self, rows: list[tuple[str, int, int]], length: int) -> None:
        ledger = self.store.ledger
        with self._lock:
            conn, _ = self._link.get()
            try:
                with conn.transaction(), conn.cursor() as cur:
                    cur.executemany(CLAIM_WRITE, [(ledger, c, a, r) for c, a, r in rows])
                    cur.execute(CLAIMS_COVER, (ledger, self.steward, length, ledger, length))
            except psycopg.Error as exc:
                if lost(conn):
                    self._link.drop()
                raise StoreError(f"{self.where}: {reason(exc)}") from None

    def _stored(self) -> Iterator[tuple[str, int, int]]:
        rows = self._query("reading the claim index", CLAIMS_STORED, (self.store.ledger, self.base))
        for claim, a, r in rows:
            yield str(claim), int(a), int(r)

    def _count(self) -> int:
        rows = self._query("reading the claim index", CLAIMS_COUNT, (self.store.ledger, self.base))
        return int(rows[0][0])

    def close(self) -> None:
        """Close its connection."""
        with self._lock:
            self._link.drop()
