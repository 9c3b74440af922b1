"""The PostgreSQL ledger store: one ledger shared by several `pool serve` replicas (DESIGN.md §6).

Entries are opaque bytes in one table, `pool_ledger_entries(ledger, seq, entry)`, keyed by
ledger name and index; the ledger is the only durable state (standard §6.1). Beside it,
`pool_ledger_high_water(ledger, length, head)` remembers the longest (length, head) each
ledger acknowledged, written in the same transaction as the entries, so entries deleted
from the table later are detected at start (`ledger.rollback`) instead of silently
refilling a quota. Several ledgers may share a database: each is one `ledger` value.

Linearizability across replicas: `writing()` opens a READ COMMITTED transaction and takes a
transaction-level advisory lock derived from the ledger name. Under it the writer reads the
ledger's length, hands back the entries this replica has not seen, and appends. The lock is
taken before the length is read, and in READ COMMITTED every statement takes a new snapshot,
so the length read under the lock includes everything the previous holder committed.

Durability and the one guarantee that matters: a caller gets an error or a verdict whose
entry is committed, never a verdict whose entry is not, and no entry is written twice.
`append()` commits before it returns (the Writer contract: "on return they are committed"),
with `synchronous_commit` forced on for the session, so PostgreSQL has flushed its WAL.
A failure before COMMIT was sent means nothing was written, and says so. A COMMIT whose
answer never came (the connection died) has an unknown outcome: it is never retried, and
`CommitOutcomeUnknown` says so; the next `writing()` reconnects and its `unseen()` shows
whether the entries landed, so the caller learns the truth from the ledger, not a guess.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, LiteralString, TypeAlias

import psycopg
from psycopg import conninfo

from joulepool.errors import StoreError
from joulepool.ledger.cose import content_address
from joulepool.ledger.rollback import HighWater

TABLE = "pool_ledger_entries"
HIGH_WATER_TABLE = "pool_ledger_high_water"
BATCH_BYTES = 4 << 20
"""About this many bytes of entries per query when streaming a ledger."""
MIN_BATCH_ROWS = 64
MAX_BATCH_ROWS = 16_384

SCHEMA_LOCK_KEY = int.from_bytes(
    hashlib.sha256(b"joulepool schema " + TABLE.encode()).digest()[:8], "big", signed=True
)

# Defaults added to a DSN that does not set them. Keepalives and tcp_user_timeout bound how
# long a replica waits on a server that vanished from the network (about 30 s), instead of
# the kernel's two hours; application_name makes replicas visible in pg_stat_activity.
_DSN_DEFAULTS = {
    "application_name": "joulepool",
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
    "tcp_user_timeout": "30000",
}

_SCHEMA: LiteralString = """
CREATE TABLE IF NOT EXISTS pool_ledger_entries (
    ledger text NOT NULL,
    seq bigint NOT NULL CHECK (seq >= 0),
    entry bytea NOT NULL,
    PRIMARY KEY (ledger, seq)
)
"""
_HIGH_WATER_SCHEMA: LiteralString = """
CREATE TABLE IF NOT EXISTS pool_ledger_high_water (
    ledger text PRIMARY KEY,
    length bigint NOT NULL CHECK (length >= 0),
    head bytea NOT NULL CHECK (octet_length(head) = 32)
)
"""
_HAS_TABLE: LiteralString = "SELECT to_regclass('pool_ledger_entries') IS NOT NULL"
_HAS_TABLES: LiteralString = (
    "SELECT to_regclass('pool_ledger_entries') IS NOT NULL"
    " AND to_regclass('pool_ledger_high_water') IS NOT NULL"
)
# Raised, never lowered, by an append: in the append's own transaction.
_RAISE_HIGH_WATER: LiteralString = (
    "INSERT INTO pool_ledger_high_water AS h (ledger, length, head) VALUES (%s, %s, %s)"
    " ON CONFLICT (ledger) DO UPDATE SET length = EXCLUDED.length, head = EXCLUDED.head"
    " WHERE h.length < EXCLUDED.length"
)
# Set as given, by an operator accepting the ledger as it is (`pool ledger acknowledge`).
_SET_HIGH_WATER: LiteralString = (
    "INSERT INTO pool_ledger_high_water (ledger, length, head) VALUES (%s, %s, %s)"
    " ON CONFLICT (ledger) DO UPDATE SET length = EXCLUDED.length, head = EXCLUDED.head"
)
_HIGH_WATER: LiteralString = "SELECT length, head FROM pool_ledger_high_water WHERE ledger = %s"
_SESSION: LiteralString = (
    "SELECT set_config('synchronous_commit', 'on', false),"
    " set_config('lock_timeout', %s, false),"
    " set_config('idle_in_transaction_session_timeout', %s, false)"
)
# The index (ledger, seq) answers this with one backward probe, not a count of the ledger.
_LENGTH: LiteralString = (
    "SELECT coalesce(max(seq) + 1, 0) FROM pool_ledger_entries WHERE ledger = %s"
)
_PAGE: LiteralString = (
    "SELECT seq, entry FROM pool_ledger_entries"
    " WHERE ledger = %s AND seq >= %s ORDER BY seq LIMIT %s"
)
_RANGE: LiteralString = (
    "SELECT seq, entry FROM pool_ledger_entries"
    " WHERE ledger = %s AND seq >= %s AND seq < %s ORDER BY seq"
)
_ONE: LiteralString = "SELECT entry FROM pool_ledger_entries WHERE ledger = %s AND seq = %s"
_INSERT: LiteralString = (
    "INSERT INTO pool_ledger_entries (ledger, seq, entry)"
    " SELECT %s, %s::bigint + u.ord - 1, u.entry"
    " FROM unnest(%s::bytea[]) WITH ORDINALITY AS u(entry, ord)"
)
# READ COMMITTED is named, not inherited: under REPEATABLE READ the snapshot would be taken
# by the lock statement before the lock was granted, and miss the previous holder's entries.
_BEGIN: LiteralString = "BEGIN ISOLATION LEVEL READ COMMITTED"
_LOCK: LiteralString = "SELECT pg_advisory_xact_lock(%s)"

_LOCK_NOT_AVAILABLE = "55P03"
_UNIQUE_VIOLATION = "23505"

_Conn: TypeAlias = psycopg.Connection[tuple[Any, ...]]


class PostgresUnavailable(StoreError):
    """PostgreSQL could not be reached, or the connection was lost; nothing was written."""

    code = "store_unavailable"


class CommitOutcomeUnknown(StoreError):
    """The connection died while COMMIT was in flight: the entries may or may not be there.

    Never retried; the next `writing()` shows through `unseen()` whether they landed.
    """

    code = "commit_outcome_unknown"

    def __init__(self, detail: str, first: int, count: int) -> None:
        super().__init__(detail)
        self.first = first
        self.count = count


class LedgerTruncated(StoreError):
    """The ledger in PostgreSQL is shorter than this replica has already seen."""

    code = "ledger_truncated"

    def __init__(self, detail: str, length: int, known: int) -> None:
        super().__init__(detail)
        self.length = length
        self.known = known


class LedgerMoved(StoreError):
    """Someone appended between two appends of one `writing()` section; nothing was written."""

    code = "ledger_moved"


class LedgerLockTimeout(StoreError):
    """Another replica held the ledger's advisory lock longer than `lock_timeout_s`."""

    code = "ledger_lock_timeout"


def lock_key(ledger: str) -> int:
    """The advisory lock key of a ledger: the first 8 bytes of a SHA-256, signed (DESIGN.md §6).

    Stable across processes, hosts and Python versions (unlike `hash()`), so every replica
    of one ledger takes the same lock, and different ledgers almost surely different ones.
    """
    digest = hashlib.sha256(b"joulepool ledger " + ledger.encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _describe(params: dict[str, Any]) -> str:
    """Where a DSN points, for messages: host, port and database; never the password."""
    host = str(params.get("host") or params.get("hostaddr") or os.environ.get("PGHOST") or "")
    port = str(params.get("port") or os.environ.get("PGPORT") or "5432")
    db = str(params.get("dbname") or os.environ.get("PGDATABASE") or params.get("user") or "")
    if not host or host.startswith("/"):
        where = f"socket {host or 'in the default folder'}, port {port}"
    else:
        where = f"{host}:{port}"
    return f"PostgreSQL at {where}" + (f", database {db!r}" if db else "")


def _reason(exc: BaseException) -> str:
    """libpq's message on one line (it names host and port, never the password)."""
    text = " ".join(str(exc).split())
    for prefix in ("connection failed: ", "connection is bad: "):
        text = text.removeprefix(prefix)
    return text or type(exc).__name__


def _lost(conn: _Conn | None) -> bool:
    """The connection is gone (server stopped, network cut), not merely a refused statement.

    Asked of the connection, not the exception's class: psycopg files a lock timeout under
    OperationalError too, and that leaves the connection perfectly usable.
    """
    return conn is None or conn.closed or conn.broken


def _answered(conn: _Conn | None, exc: psycopg.Error) -> bool:
    """Whether a failed COMMIT was refused by a server that is still there, so rolled back.

    Anything else is unknown: no answer at all (no SQLSTATE), a lost connection, or an
    error of class 57 (shutdown, crash) or 58 (I/O) that may have come after the WAL flush.
    """
    state = exc.sqlstate or ""
    return not _lost(conn) and bool(state) and state[:2] not in ("57", "58")


class _Link:
    """One lazily opened connection, replaced when it breaks (a PostgreSQL restart)."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self.conn: _Conn | None = None

    def get(self) -> tuple[_Conn, bool]:
        """The connection, and whether it was opened just now (a stale one may be retried)."""
        conn = self.conn
        if conn is not None and not conn.closed and not conn.broken:
            return conn, False
        self.drop()
        self.conn = self._store._connect()
        return self.conn, True

    def drop(self) -> None:
        """Close and forget the connection; the server rolls back anything it left open."""
        conn, self.conn = self.conn, None
        if conn is not None:
            # Closing a broken connection can fail; it is discarded either way.
            with contextlib.suppress(psycopg.Error):
                conn.close()


class PostgresWriter:
    """One `writing()` section on PostgreSQL: the advisory lock held, the length known (§6)."""

    def __init__(self, store: PostgresStore, conn: _Conn, length: int) -> None:
        self._store = store
        self._conn: _Conn | None = conn
        self._length = length
        self._in_transaction = True
        self._failed: str | None = None

    @property
    def length(self) -> int:
        """The ledger's length under the lock, including what this section appended."""
        return self._length

    def _usable(self) -> _Conn:
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
        if _lost(conn):
            store._writer.drop()
            self._conn = None
            return PostgresUnavailable(
                f"{store.where}: the connection was lost while {doing} ({_reason(exc)}); {written}"
            )
        store._rollback_quietly()
        if exc.sqlstate == _LOCK_NOT_AVAILABLE:
            return LedgerLockTimeout(
                f"{store.where}: another replica held the lock of ledger {store.ledger!r} for "
                f"more than {store.lock_timeout_s} s while {doing}; {written}"
            )
        return StoreError(f"{store.where}: {doing} failed ({_reason(exc)}); {written}")

    def _relock(self, conn: _Conn) -> None:
        """After an append committed, take the lock again for a further read or append."""
        store = self._store
        try:
            conn.execute(_BEGIN, prepare=False)
            self._in_transaction = True
            conn.execute(_LOCK, (store.lock_key,))
            length = store._length_on(conn)
        except psycopg.Error as exc:
            raise self._fail(f"locking ledger {store.ledger!r} again", exc) from None
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
        try:
            with conn.cursor(binary=True) as cur:
                rows = cur.execute(_RANGE, (store.ledger, known, self._length)).fetchall()
        except psycopg.Error as exc:
            raise self._fail("reading unseen entries", exc) from None
        return _consecutive(rows, known, store, self._length)

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
        try:
            cur = conn.execute(_INSERT, (store.ledger, first, [bytes(r) for r in raws]))
            inserted = cur.rowcount
        except psycopg.Error as exc:
            if exc.sqlstate == _UNIQUE_VIOLATION:
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
        try:
            conn.execute(_RAISE_HIGH_WATER, point)
        except psycopg.Error as exc:
            raise self._fail(f"raising the high-water record after {span}", exc) from None
        try:
            conn.execute("COMMIT", prepare=False)
        except psycopg.Error as exc:
            self._failed = "the commit"
            self._in_transaction = False
            if not _answered(conn, exc):
                store._writer.drop()
                self._conn = None
                raise CommitOutcomeUnknown(
                    f"{store.where}: the connection was lost while committing {span} of ledger "
                    f"{store.ledger!r} ({_reason(exc)}); whether they were written is unknown. "
                    "Nothing is retried: the next writing() reads the ledger and shows whether "
                    "they landed",
                    first,
                    count,
                ) from None
            # The server answered: a failed COMMIT always rolls back.
            store._rollback_quietly()
            raise StoreError(
                f"{store.where}: committing {span} was refused ({_reason(exc)}); "
                "nothing was written"
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
            conn.execute(_SET_HIGH_WATER, (store.ledger, point.length, point.head))
        except psycopg.Error as exc:
            raise self._fail("setting the high-water record", exc) from None

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
        except psycopg.Error:
            # This transaction wrote nothing, so its end does not matter; dropping the
            # connection releases the lock on the server and the next section reconnects.
            store._writer.drop()


def _consecutive(
    rows: list[tuple[Any, ...]], start: int, store: PostgresStore, end: int | None
) -> list[bytes]:
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


class PostgresStore:
    """A ledger in PostgreSQL that several replicas append to, linearizably (DESIGN.md §6).

    `dsn` is a libpq connection string or URI. Two connections are opened lazily and
    reopened after a restart: one for reads (which only ever see committed entries) and one
    for `writing()`. With `create_schema` (the default) the table is created if missing.
    Every failure is a `StoreError` naming the server, never a psycopg exception.
    """

    def __init__(
        self,
        dsn: str,
        *,
        ledger: str = "default",
        connect_timeout_s: int = 5,
        lock_timeout_s: int = 30,
        idle_in_transaction_s: int = 60,
        create_schema: bool = True,
    ) -> None:
        if not isinstance(ledger, str) or not ledger:
            raise StoreError("a PostgreSQL ledger needs a non-empty name")
        try:
            given = conninfo.conninfo_to_dict(dsn)
            extra = {k: v for k, v in _DSN_DEFAULTS.items() if k not in given}
            self._conninfo = conninfo.make_conninfo(
                dsn, connect_timeout=max(1, connect_timeout_s), **extra
            )
        except psycopg.Error:
            # libpq's parse error quotes the DSN, which may hold a password.
            raise StoreError(
                "the PostgreSQL connection string is malformed; libpq could not parse it"
            ) from None
        self.where = _describe(given)
        self.ledger = ledger
        self.lock_key = lock_key(ledger)
        self.lock_timeout_s = lock_timeout_s
        self._session = (
            f"{max(0, lock_timeout_s) * 1000}",
            f"{max(0, idle_in_transaction_s) * 1000}",
        )
        self._fsyncs = 0
        self._commits = 0
        self._connections = 0
        self._closed = False
        self._reader = _Link(self)
        self._writer = _Link(self)
        self._read_lock = threading.Lock()
        # Advisory locks are re-entrant within one session, so two threads sharing this
        # store's connection would both "hold" the lock: serialise sections here as well.
        self._write_lock = threading.Lock()
        try:
            if create_schema:
                self.ensure_schema()
            elif not self._read_rows("checking the schema", _HAS_TABLE, (), binary=False)[0][0]:
                raise StoreError(
                    f"{self.where} has no table {TABLE}; create it with "
                    "PostgresStore(..., create_schema=True) or ensure_schema()"
                )
        except BaseException:
            self.close()
            raise

    @classmethod
    def create(
        cls, dsn: str, *, ledger: str = "default", connect_timeout_s: int = 5
    ) -> PostgresStore:
        """Open a ledger, creating the table first if it is missing (DESIGN.md §6)."""
        return cls(dsn, ledger=ledger, connect_timeout_s=connect_timeout_s, create_schema=True)

    # -- connections ----------------------------------------------------------------------

    def _connect(self) -> _Conn:
        if self._closed:
            raise StoreError(f"the store for ledger {self.ledger!r} at {self.where} is closed")
        try:
            conn: _Conn = psycopg.connect(self._conninfo, autocommit=True)
        except psycopg.Error as exc:
            raise PostgresUnavailable(f"cannot connect to {self.where}: {_reason(exc)}") from None
        try:
            # Forced on whatever the server, role or database default says: a commit that
            # returns must have flushed the WAL, or a verdict could outlive its entry.
            conn.execute(_SESSION, self._session)
        except psycopg.Error as exc:
            conn.close()
            raise PostgresUnavailable(
                f"{self.where}: setting up the session failed: {_reason(exc)}"
            ) from None
        self._connections += 1
        return conn

    def _rollback_quietly(self) -> None:
        conn = self._writer.conn
        if conn is None:
            return
        try:
            conn.execute("ROLLBACK", prepare=False)
        except psycopg.Error:
            # A connection that cannot roll back is discarded; the server rolls back for it.
            self._writer.drop()

    def _read_rows(
        self, doing: str, query: LiteralString, params: Sequence[Any], *, binary: bool = True
    ) -> list[tuple[Any, ...]]:
        """One read on the reader connection, retried once on a fresh connection if the old
        one had gone stale (a server restart since it was last used): reads are idempotent."""
        with self._read_lock:
            while True:
                conn, fresh = self._reader.get()
                try:
                    with conn.cursor(binary=binary) as cur:
                        return cur.execute(query, params).fetchall()
                except psycopg.Error as exc:
                    if _lost(conn):
                        self._reader.drop()
                        if not fresh:
                            continue
                        raise PostgresUnavailable(
                            f"{self.where}: the connection was lost while {doing}: {_reason(exc)}"
                        ) from None
                    raise StoreError(f"{self.where}: {doing} failed: {_reason(exc)}") from None

    def _length_on(self, conn: _Conn) -> int:
        row = conn.execute(_LENGTH, (self.ledger,)).fetchone()
        return int(row[0]) if row else 0

    # -- the Store protocol ---------------------------------------------------------------

    def ensure_schema(self) -> None:
        """Create the entries table if it is missing; idempotent, safe from many replicas (§6.1)."""
        with self._read_lock:
            while True:
                conn, fresh = self._reader.get()
                try:
                    row = conn.execute(_HAS_TABLES).fetchone()
                    if row and row[0]:
                        return
                    # Two replicas creating the tables at once would collide in the catalog;
                    # the lock makes the second find them made.
                    with conn.transaction():
                        conn.execute(_LOCK, (SCHEMA_LOCK_KEY,))
                        conn.execute(_SCHEMA)
                        conn.execute(_HIGH_WATER_SCHEMA)
                    return
                except psycopg.Error as exc:
                    if _lost(conn):
                        self._reader.drop()
                        if not fresh:
                            continue
                        raise PostgresUnavailable(
                            f"{self.where}: the connection was lost while creating table {TABLE}: "
                            f"{_reason(exc)}"
                        ) from None
                    raise StoreError(
                        f"{self.where}: creating table {TABLE} failed: {_reason(exc)}"
                    ) from None

    @property
    def fsyncs(self) -> int:
        """Commits that wrote entries: each one flushed PostgreSQL's WAL (synchronous_commit on)."""
        return self._fsyncs

    @property
    def commits(self) -> int:
        """Every COMMIT this store completed, including sections that appended nothing."""
        return self._commits

    @property
    def connections(self) -> int:
        """Connections opened so far; more than two means it reconnected."""
        return self._connections

    def __len__(self) -> int:
        rows = self._read_rows("reading the ledger's length", _LENGTH, (self.ledger,), binary=False)
        return int(rows[0][0])

    def entries(self, start: int = 0) -> Iterator[bytes]:
        """Every committed entry from index `start`, fetched in batches of about 4 MiB (§6).

        Each batch is its own short query, so a million-entry ledger is never in memory at
        once and a slow consumer holds no transaction open; the ledger only grows, so the
        batches join into one consistent prefix.
        """
        if start < 0:
            raise StoreError(f"entries({start}): an index is never negative")
        nxt, limit = start, 1024
        while True:
            rows = self._read_rows("reading entries", _PAGE, (self.ledger, nxt, limit))
            batch = _consecutive(rows, nxt, self, None)
            yield from batch
            if len(batch) < limit:
                return
            nxt += len(batch)
            mean = max(1, sum(len(b) for b in batch) // len(batch))
            limit = min(MAX_BATCH_ROWS, max(MIN_BATCH_ROWS, BATCH_BYTES // mean))

    @property
    def name(self) -> str:
        """The ledger's name and the server it lives on."""
        return f"ledger {self.ledger!r} at {self.where}"

    def high_water(self) -> HighWater | None:
        """The longest (length, head) this ledger acknowledged, or None if it has no record.

        A database whose schema predates the record has none either.
        """
        has = self._read_rows("checking the schema", _HAS_TABLES, (), binary=False)
        if not has[0][0]:
            return None
        rows = self._read_rows("reading the high-water record", _HIGH_WATER, (self.ledger,))
        return HighWater(int(rows[0][0]), bytes(rows[0][1])) if rows else None

    def acknowledge(self, point: HighWater) -> None:
        """Set the high-water record to `point`, under the ledger's lock (an operator
        accepting the ledger as it is); appends raise it from then on."""
        self.ensure_schema()
        with self.writing() as writer:
            writer.record_high_water(point)

    def entry(self, index: int) -> bytes:
        """One committed entry, as stored."""
        if index >= 0:
            rows = self._read_rows(f"reading entry {index}", _ONE, (self.ledger, index))
            if rows:
                return bytes(rows[0][0])
        raise StoreError(
            f"{self.where}: ledger {self.ledger!r} has no entry {index}; it has {len(self)}"
        )

    @contextmanager
    def writing(self) -> Iterator[PostgresWriter]:
        """A transaction holding the ledger's advisory lock, for one decide-and-append (§6).

        On entry the lock is taken and the length read; a connection that went stale since
        the last section (PostgreSQL restarted) is replaced once, transparently, since
        nothing has been written yet. An exception in the body rolls back what was not
        committed; a normal exit commits.
        """
        with self._write_lock:
            writer = PostgresWriter(self, *self._begin())
            try:
                yield writer
            except BaseException:
                writer._finish(ok=False)
                raise
            writer._finish(ok=True)

    def _begin(self) -> tuple[_Conn, int]:
        while True:
            try:
                conn, fresh = self._writer.get()
            except PostgresUnavailable as exc:
                raise PostgresUnavailable(f"{exc.detail}; nothing was written") from None
            try:
                conn.execute(_BEGIN, prepare=False)
                conn.execute(_LOCK, (self.lock_key,))
                return conn, self._length_on(conn)
            except psycopg.Error as exc:
                if _lost(conn):
                    self._writer.drop()
                    if not fresh:
                        continue
                    raise PostgresUnavailable(
                        f"{self.where}: the connection was lost while locking ledger "
                        f"{self.ledger!r}: {_reason(exc)}; nothing was written"
                    ) from None
                self._rollback_quietly()
                if exc.sqlstate == _LOCK_NOT_AVAILABLE:
                    raise LedgerLockTimeout(
                        f"{self.where}: another replica held the lock of ledger {self.ledger!r} "
                        f"for more than {self.lock_timeout_s} s; nothing was written"
                    ) from None
                raise StoreError(
                    f"{self.where}: locking ledger {self.ledger!r} failed: {_reason(exc)}; "
                    "nothing was written"
                ) from None

    def close(self) -> None:
        """Close both connections; the server releases any lock they held."""
        self._closed = True
        self._reader.drop()
        self._writer.drop()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
