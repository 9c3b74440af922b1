"""Released claims of a ledger in PostgreSQL, one row per claim id (standard §6.4: an id is
never admitted twice), off every replica's heap (DESIGN.md §4)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, LiteralString

import psycopg

from joulepool.errors import StoreError
from joulepool.ledger.released import ReleasedClaims
from joulepool.stores.postgres.link import Conn, lost, reason
from joulepool.stores.postgres.sql import (
    CLAIM_ROW,
    CLAIM_WRITE,
    CLAIMS_COUNT,
    CLAIMS_COVER,
    CLAIMS_COVERS,
    CLAIMS_PAST,
    CLAIMS_STORED,
)

if TYPE_CHECKING:
    from joulepool.stores.postgres.store import PostgresStore


class PostgresClaimIndex(ReleasedClaims):
    """Released claims of a ledger in PostgreSQL, in a table with a unique key per claim id
    (§6.4): what `stores.claim_index.ClaimIndex` is beside a ledger file.

    Every replica folds the same ledger, so the rows are facts about it, the same whoever
    writes them; each replica trusts only rows released below the length it folded
    (`base`), so a replica never reads another's future. Rows are never deleted while
    replicas run, except rows past the ledger's end (a history an operator accepted losing).
    On a connection of its own: it is read inside the fold, beside the store's own work.
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

    @property
    def covers(self) -> int:
        """The longest ledger length any replica wrote the rows through (0: none yet)."""
        rows = self._query("reading the claim index", CLAIMS_COVERS, (self.store.ledger,))
        return int(rows[0][0]) if rows else 0

    def _forget_past_the_end(self) -> None:
        # Rows past the ledger's end belong to entries it no longer has (a loss accepted
        # by an operator): no replica can have folded them, so none relies on them.
        self._query("cutting the claim index", CLAIMS_PAST, (self.store.ledger, len(self.store)))

    def rebase(self, length: int) -> bool:
        """Trust rows released below `length`, the length this replica's fold starts from."""
        if self.covers < length:
            return False
        self._forget_past_the_end()
        self.base = length
        return True

    def reset(self) -> None:
        """A replay from entry 0: it rewrites each row as it folds; other replicas' rows stay."""
        self._forget_past_the_end()
        self._pending.clear()
        self.base = 0

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
                    cur.execute(CLAIMS_COVER, (ledger, length))
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
