"""One `writing()` section of the PostgreSQL store: the ledger's advisory lock held, its
length known, entries appended and committed (DESIGN.md §6).

The section shares its store's writer connection and counters; it is the store's own part,
in a file of its own because what a failure at each step means (nothing written, fenced, an
unknown outcome) is the heart of the store's guarantee.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from joulepool.errors import StoreError
from joulepool.ledger.cose import content_address
from joulepool.ledger.rollback import HighWater
from joulepool.stores.postgres.errors import (
    CommitOutcomeUnknown,
    ConfigMismatch,
    LedgerFenced,
    LedgerMoved,
    LedgerTruncated,
    PostgresUnavailable,
)
from joulepool.stores.postgres.link import Conn, answered, lost, reason
from joulepool.stores.postgres.sql import (
    BATCH_BYTES,
    BEGIN,
    IDLE_IN_TRANSACTION_TIMEOUT,
    INSERT,
    LOCK,
    MAX_BATCH_ROWS,
    MIN_BATCH_ROWS,
    RAISE_HIGH_WATER,
    RANGE,
    RECORD_CONFIG,
    SET_HIGH_WATER,
    UNIQUE_VIOLATION,
)

if TYPE_CHECKING:
    from joulepool.stores.postgres.store import PostgresStore


def fenced(store: PostgresStore, doing: str, written: str) -> LedgerFenced:
    """The refusal of a replica whose session PostgreSQL ended while it sat idle, holding
    the ledger's lock (DESIGN.md §6: a frozen replica is fenced, not waited for)."""
    return LedgerFenced(
        f"{store.where}: this replica held the lock of ledger {store.ledger!r} idle for more "
        f"than {store.idle_in_transaction_s:g} s (it was frozen or stalled), so PostgreSQL "
        f"ended its session and rolled its transaction back while {doing}; {written}. It "
        "reads the ledger again before it decides anything"
    )


class PostgresWriter:
    """One `writing()` section on PostgreSQL: the advisory lock held, the length known (§6)."""

    def __init__(self, store: PostgresStore, conn: Conn, length: int) -> None:
        self._store = store
        self._conn: Conn | None = conn
        self._length = length
        self._in_transaction = True
        self._failed: str | None = None
        # A record (high-water, configuration) written in the open transaction: its COMMIT
        # at the section's end must succeed, or the caller hears of it.
        self._wrote: str | None = None
        # When the last statement the server answered was sent: the server has been idle in
        # this transaction since no earlier, so a connection lost after longer than
        # idle_in_transaction_s was, all but surely, fenced (a frozen replica).
        self._asked_at = time.monotonic()

    def _idle_past_timeout(self) -> float | None:
        """Seconds this transaction has (at most) sat idle, if past the server's timeout."""
        idle = time.monotonic() - self._asked_at
        limit = self._store.idle_in_transaction_s
        return idle if 0 < limit < idle else None

    @property
    def length(self) -> int:
        """The ledger's length under the lock, including what this section appended."""
        return self._length

    def _usable(self) -> Conn:
        if self._failed is not None:
            raise StoreError(
                f"this writing() section already failed ({self._failed}); open a new one"
            )
        if self._conn is None:
            raise StoreError("this writing() section is over")
        return self._conn

    def _fail(
        self, doing: str, exc: psycopg.Error, *, written: str = "nothing was written"
    ) -> StoreError:
        store = self._store
        conn = self._conn
        self._failed = doing
        self._in_transaction = False
        if lost(conn):
            store._writer.drop()
            self._conn = None
            # Before COMMIT the transaction is lost with its connection whatever happened;
            # the session was fenced when the server said so, or when it sat idle past the
            # timeout (libpq often loses the server's last word to a reset connection).
            if exc.sqlstate == IDLE_IN_TRANSACTION_TIMEOUT or self._idle_past_timeout():
                return fenced(store, doing, written)
            return PostgresUnavailable(
                f"{store.where}: the connection was lost while {doing} ({reason(exc)}); {written}"
            )
        store._rollback_quietly()
        return store._refusal(doing, exc, written)

    def _relock(self, conn: Conn) -> None:
        """After an append committed, take the lock again for a further read or append."""
        store = self._store
        try:
            conn.execute(BEGIN, prepare=False)
            self._in_transaction = True
            self._asked_at = time.monotonic()
            conn.execute(LOCK, (store.lock_key,))
            length = store._locked_length(conn)
        except psycopg.Error as exc:
            raise self._fail(f"locking ledger {store.ledger!r} again", exc) from None
        except ConfigMismatch:
            self._failed = "the configuration differs"
            store._rollback_quietly()
            self._in_transaction = False
            raise
        if length != self._length:
            self._failed = "the ledger moved"
            store._rollback_quietly()
            self._in_transaction = False
            raise LedgerMoved(
                f"{store.where}: ledger {store.ledger!r} grew from {self._length} to {length} "
                "entries between two appends in one writing() section; read it again and decide "
                "again; nothing was written"
            )

    def unseen(self, known: int) -> list[bytes]:
        """Entries from index `known` to the end, appended since this replica looked (§6).

        Raises `LedgerTruncated` if the ledger is shorter than `known`: entries this replica
        saw (and may have answered on) are gone, which no append can explain.
        """
        conn = self._usable()
        store = self._store
        if not self._in_transaction:
            self._relock(conn)
        if known < 0:
            raise StoreError(f"unseen({known}): an index is never negative")
        if known > self._length:
            raise LedgerTruncated(
                f"{store.where}: ledger {store.ledger!r} has {self._length} entries but this "
                f"replica has seen {known}; entries were removed from PostgreSQL, and nothing "
                "will be appended until that is resolved",
                self._length,
                known,
            )
        if known == self._length:
            return []
        # In pages, like `entries()`: each statement stays well inside statement_timeout even
        # when this replica is far behind.
        out: list[bytes] = []
        nxt, limit = known, 1024
        while nxt < self._length:
            asked = time.monotonic()
            try:
                with conn.cursor(binary=True) as cur:
                    query = (store.ledger, nxt, self._length, limit)
                    rows = cur.execute(RANGE, query).fetchall()
            except psycopg.Error as exc:
                raise self._fail("reading unseen entries", exc) from None
            self._asked_at = asked
            batch = consecutive(rows, nxt, store, min(self._length, nxt + limit))
            out.extend(batch)
            nxt += len(batch)
            mean = max(1, sum(len(b) for b in batch) // len(batch))
            limit = min(MAX_BATCH_ROWS, max(MIN_BATCH_ROWS, BATCH_BYTES // mean))
        return out

    def append(self, raws: Sequence[bytes]) -> None:
        """Insert `raws` at the ledger's end in one statement and COMMIT before returning (§6.1).

        Raises `PostgresUnavailable` or `StoreError` when nothing was written, and
        `CommitOutcomeUnknown` when the COMMIT's answer was lost: then nothing is retried.
        """
        if not raws:
            return
        conn = self._usable()
        store = self._store
        if not self._in_transaction:
            self._relock(conn)
        first, count = self._length, len(raws)
        span = f"{count} entr{'y' if count == 1 else 'ies'} at seq {first}" + (
            f"..{first + count - 1}" if count > 1 else ""
        )
        asked = time.monotonic()
        try:
            cur = conn.execute(INSERT, (store.ledger, first, [bytes(r) for r in raws]))
            inserted = cur.rowcount
            self._asked_at = asked
        except psycopg.Error as exc:
            if exc.sqlstate == UNIQUE_VIOLATION:
                self._failed = "a duplicate seq"
                store._rollback_quietly()
                self._in_transaction = False
                raise StoreError(
                    f"{store.where}: ledger {store.ledger!r} already has an entry in seq "
                    f"{first}..{first + count - 1}: something wrote to it without its advisory "
                    f"lock; nothing was written"
                ) from None
            # No COMMIT was sent, so the server rolls the insert back, whatever happened.
            raise self._fail(f"inserting {span}", exc) from None
        if inserted != count:
            self._failed = "a short insert"
            store._rollback_quietly()
            self._in_transaction = False
            raise StoreError(
                f"{store.where}: inserting {span} wrote {inserted} rows; nothing was written"
            )
        point = (store.ledger, first + count, content_address(raws[-1]))
        asked = time.monotonic()
        try:
            conn.execute(RAISE_HIGH_WATER, point)
        except psycopg.Error as exc:
            raise self._fail(f"raising the high-water record after {span}", exc) from None
        self._asked_at = asked
        idle = self._idle_past_timeout()
        try:
            conn.execute("COMMIT", prepare=False)
        except psycopg.Error as exc:
            self._failed = "the commit"
            self._in_transaction = False
            if exc.sqlstate == IDLE_IN_TRANSACTION_TIMEOUT:
                # The server ended the session before it read the COMMIT (PostgreSQL checks
                # the timeout once more after reading a command, before running it).
                store._writer.drop()
                self._conn = None
                raise fenced(store, f"committing {span}", "nothing was written") from None
            if not answered(conn, exc):
                store._writer.drop()
                self._conn = None
                # Idle past the timeout, the session was almost surely fenced; but a starved
                # server may read a COMMIT before its timer fires, so this stays unknown.
                hint = (
                    f" (this replica had sat idle in its transaction for {idle:.1f} s, past "
                    f"idle_in_transaction_s, so PostgreSQL most likely ended it)"
                    if idle is not None
                    else ""
                )
                raise CommitOutcomeUnknown(
                    f"{store.where}: the connection was lost while committing {span} of ledger "
                    f"{store.ledger!r} ({reason(exc)}){hint}; whether they were written is "
                    "unknown. Nothing is retried: the next writing() reads the ledger and shows "
                    "whether they landed",
                    first,
                    count,
                ) from None
            # The server answered: a failed COMMIT always rolls back.
            store._rollback_quietly()
            raise StoreError(
                f"{store.where}: committing {span} was refused ({reason(exc)}); nothing was written"
            ) from None
        except BaseException:
            # Interrupted mid-COMMIT: its outcome is unknown, and this connection is not reusable.
            self._failed = "an interrupted commit"
            self._in_transaction = False
            store._writer.drop()
            self._conn = None
            raise
        self._in_transaction = False
        self._length += count
        store._fsyncs += 1
        store._commits += 1

    def record_high_water(self, point: HighWater) -> None:
        """Set this ledger's high-water record to `point`, committed when the section ends."""
        conn = self._usable()
        store = self._store
        if not self._in_transaction:
            self._relock(conn)
        try:
            conn.execute(SET_HIGH_WATER, (store.ledger, point.length, point.head))
        except psycopg.Error as exc:
            raise self._fail("setting the high-water record", exc) from None
        self._wrote = "the high-water record"

    def record_config(self, digest: bytes) -> None:
        """Record `digest` as the ledger's configuration, committed when the section ends."""
        conn = self._usable()
        store = self._store
        if not self._in_transaction:
            self._relock(conn)
        try:
            conn.execute(RECORD_CONFIG, (store.ledger, digest, store.recorded_by))
        except psycopg.Error as exc:
            raise self._fail("recording the configuration digest", exc) from None
        self._wrote = "the configuration digest"

    def _finish(self, ok: bool) -> None:
        """End the section: COMMIT a read-only transaction, or roll back after an error."""
        store = self._store
        conn, self._conn = self._conn, None
        if conn is None or not self._in_transaction:
            return
        self._in_transaction = False
        if not ok:
            store._rollback_quietly()
            return
        try:
            conn.execute("COMMIT", prepare=False)
            store._commits += 1
        except psycopg.Error as exc:
            # Dropping the connection releases the lock on the server; the next section
            # reconnects. A transaction that wrote no entries does not matter, unless it
            # set a record: then the caller must not believe it was set.
            store._writer.drop()
            if self._wrote is not None:
                raise StoreError(
                    f"{store.where}: committing {self._wrote} of ledger {store.ledger!r} failed "
                    f"({reason(exc)}); it may not be recorded"
                ) from None


def consecutive(
    rows: list[tuple[Any, ...]], start: int, store: PostgresStore, end: int | None
) -> list[bytes]:
    """The entries of `rows` (seq, entry), which must run from `start` without a gap and,
    given `end`, up to it: a missing seq is an entry removed from the table (§6.1)."""
    out: list[bytes] = []
    expect = start
    for seq, raw in rows:
        if seq != expect:
            raise StoreError(
                f"{store.where}: ledger {store.ledger!r} has no entry {expect} (the next is "
                f"{seq}); entries were removed from PostgreSQL"
            )
        out.append(bytes(raw))
        expect += 1
    if end is not None and expect != end:
        raise StoreError(
            f"{store.where}: ledger {store.ledger!r} ends at {expect} entries while its last "
            f"seq says {end}; entries were removed from PostgreSQL"
        )
    return out
