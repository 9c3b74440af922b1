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

Bounded waits (issue 14): every session sets `lock_timeout`, `statement_timeout` and
`idle_in_transaction_session_timeout`. A replica frozen inside its transaction (SIGSTOP, a
stalled VM, a GC pause) holds the advisory lock only until PostgreSQL ends its idle session,
`idle_in_transaction_s` (5 s) after its last statement; the others wait for the lock at most
`lock_timeout_s` (8 s, longer on purpose, so they get it rather than an error) and then
append. The frozen replica is fenced: its transaction was rolled back by the server, so when
it wakes its next statement or its COMMIT fails with SQLSTATE 25P03 (`LedgerFenced`, "nothing
was written"), and its next section reconnects and catches up through `unseen()`.

One configuration (issue 14): with `config_digest` set, every section checks, under the
lock and in its own transaction, that the digest recorded for the ledger in
`pool_ledger_config` is this replica's (recording it when there is none), and refuses with
`ConfigMismatch` otherwise. Every commit is therefore made under the recorded configuration.
`adopt_config()` replaces the record, under the same lock: an operator's explicit reload.

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
import datetime
import hashlib
import os
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, LiteralString, TypeAlias

import psycopg
from psycopg import conninfo

from joulepool.errors import StoreError
from joulepool.ledger.cose import content_address
from joulepool.ledger.released import ReleasedClaims
from joulepool.ledger.rollback import HighWater
from joulepool.ledger.snapshot import KEEP, MAX_SNAPSHOT_BYTES, SnapshotRefused
from joulepool.stores import PG_IDLE_IN_TRANSACTION_S, PG_LOCK_TIMEOUT_S, PG_STATEMENT_TIMEOUT_S

TABLE = "pool_ledger_entries"
HIGH_WATER_TABLE = "pool_ledger_high_water"
CONFIG_TABLE = "pool_ledger_config"

LOCK_TIMEOUT_S = PG_LOCK_TIMEOUT_S
STATEMENT_TIMEOUT_S = PG_STATEMENT_TIMEOUT_S
IDLE_IN_TRANSACTION_S = PG_IDLE_IN_TRANSACTION_S
PROBE_TIMEOUT_S = 2.0
"""How long `/readyz`'s round trip to PostgreSQL may take before it counts as unavailable."""
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
_HAS_ALL_TABLES: LiteralString = (
    "SELECT to_regclass('pool_ledger_entries') IS NOT NULL"
    " AND to_regclass('pool_ledger_high_water') IS NOT NULL"
    " AND to_regclass('pool_ledger_config') IS NOT NULL"
    " AND to_regclass('pool_ledger_snapshots') IS NOT NULL"
    " AND to_regclass('pool_ledger_claims') IS NOT NULL"
    " AND to_regclass('pool_ledger_steward') IS NOT NULL"
)
# The steward key that seals the ledger's next entry (DESIGN.md §4, key rotation), checked
# under the ledger's lock in every section: a replica that missed a rotation seals nothing.
_STEWARD_SCHEMA: LiteralString = """
CREATE TABLE IF NOT EXISTS pool_ledger_steward (
    ledger text PRIMARY KEY,
    public_key bytea NOT NULL CHECK (octet_length(public_key) = 32),
    from_seq bigint NOT NULL CHECK (from_seq >= 0),
    recorded_by text NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
)
"""
_STEWARD_READ: LiteralString = (
    "SELECT public_key, from_seq, recorded_by FROM pool_ledger_steward WHERE ledger = %s"
)
_STEWARD_FIRST: LiteralString = (
    "INSERT INTO pool_ledger_steward (ledger, public_key, from_seq, recorded_by)"
    " VALUES (%s, %s, 0, %s) ON CONFLICT (ledger) DO NOTHING"
)
_STEWARD_ROTATE: LiteralString = (
    "INSERT INTO pool_ledger_steward (ledger, public_key, from_seq, recorded_by)"
    " VALUES (%s, %s, %s, %s) ON CONFLICT (ledger) DO UPDATE SET public_key ="
    " excluded.public_key, from_seq = excluded.from_seq, recorded_by = excluded.recorded_by,"
    " recorded_at = now()"
)
# Released claims (§6.4's duplicate check, issue 16), off every replica's heap: one row per
# claim id, unique per ledger; `covers` the longest length any replica wrote them through.
_CLAIMS_SCHEMA: LiteralString = """
CREATE TABLE IF NOT EXISTS pool_ledger_claims (
    ledger text NOT NULL,
    claim text NOT NULL,
    admitted bigint NOT NULL CHECK (admitted >= 0),
    released bigint NOT NULL CHECK (released > admitted),
    PRIMARY KEY (ledger, claim)
);
CREATE TABLE IF NOT EXISTS pool_ledger_claims_covers (
    ledger text PRIMARY KEY,
    length bigint NOT NULL CHECK (length >= 0)
)
"""
_CLAIM_ROW: LiteralString = (
    "SELECT admitted, released FROM pool_ledger_claims"
    " WHERE ledger = %s AND claim = %s AND released < %s"
)
_CLAIM_WRITE: LiteralString = (
    "INSERT INTO pool_ledger_claims (ledger, claim, admitted, released) VALUES (%s, %s, %s, %s)"
    " ON CONFLICT (ledger, claim) DO UPDATE"
    " SET admitted = excluded.admitted, released = excluded.released"
)
_CLAIMS_COVER: LiteralString = (
    "INSERT INTO pool_ledger_claims_covers (ledger, length) VALUES (%s, %s)"
    " ON CONFLICT (ledger) DO UPDATE"
    " SET length = GREATEST(pool_ledger_claims_covers.length, excluded.length)"
)
_CLAIMS_COVERS: LiteralString = "SELECT length FROM pool_ledger_claims_covers WHERE ledger = %s"
_CLAIMS_PAST: LiteralString = "DELETE FROM pool_ledger_claims WHERE ledger = %s AND released >= %s"
_CLAIMS_STORED: LiteralString = (
    "SELECT claim, admitted, released FROM pool_ledger_claims"
    " WHERE ledger = %s AND released < %s ORDER BY claim"
)
_CLAIMS_COUNT: LiteralString = (
    "SELECT count(*) FROM pool_ledger_claims WHERE ledger = %s AND released < %s"
)
# State snapshots (DESIGN.md §4): a cache of the fold, signed like a ledger entry, so any
# replica may write one and every replica checks one before it starts from it.
_SNAPSHOT_SCHEMA: LiteralString = """
CREATE TABLE IF NOT EXISTS pool_ledger_snapshots (
    ledger text NOT NULL,
    length bigint NOT NULL CHECK (length >= 0),
    snapshot bytea NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (ledger, length)
)
"""
_SNAPSHOT_LENGTHS: LiteralString = (
    "SELECT length FROM pool_ledger_snapshots WHERE ledger = %s ORDER BY length DESC"
)
_SNAPSHOT_NEWEST: LiteralString = (
    "SELECT length, extract(epoch FROM written_at)::float8 FROM pool_ledger_snapshots"
    " WHERE ledger = %s ORDER BY length DESC LIMIT 1"
)
_SNAPSHOT_READ: LiteralString = (
    "SELECT snapshot FROM pool_ledger_snapshots WHERE ledger = %s AND length = %s"
)
_SNAPSHOT_WRITE: LiteralString = (
    "INSERT INTO pool_ledger_snapshots (ledger, length, snapshot) VALUES (%s, %s, %s)"
    " ON CONFLICT (ledger, length) DO NOTHING"
)
_SNAPSHOT_PRUNE: LiteralString = (
    "DELETE FROM pool_ledger_snapshots WHERE ledger = %s AND length NOT IN"
    " (SELECT length FROM pool_ledger_snapshots WHERE ledger = %s"
    " ORDER BY length DESC LIMIT %s)"
)
_CONFIG_SCHEMA: LiteralString = """
CREATE TABLE IF NOT EXISTS pool_ledger_config (
    ledger text PRIMARY KEY,
    digest bytea NOT NULL CHECK (octet_length(digest) = 32),
    recorded_by text NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
)
"""
# The length and the recorded configuration in one round trip, under the lock.
_LENGTH_AND_CONFIG: LiteralString = (
    "SELECT (SELECT coalesce(max(seq) + 1, 0) FROM pool_ledger_entries WHERE ledger = %s),"
    " c.digest, c.recorded_by, c.recorded_at"
    " FROM (SELECT 1) AS one LEFT JOIN pool_ledger_config AS c ON c.ledger = %s"
)
_CONFIG: LiteralString = (
    "SELECT digest, recorded_by, recorded_at FROM pool_ledger_config WHERE ledger = %s"
)
_RECORD_CONFIG: LiteralString = (
    "INSERT INTO pool_ledger_config AS c (ledger, digest, recorded_by) VALUES (%s, %s, %s)"
    " ON CONFLICT (ledger) DO UPDATE SET digest = EXCLUDED.digest,"
    " recorded_by = EXCLUDED.recorded_by, recorded_at = now()"
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
    " set_config('statement_timeout', %s, false),"
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
    " WHERE ledger = %s AND seq >= %s AND seq < %s ORDER BY seq LIMIT %s"
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
_QUERY_CANCELED = "57014"
_IDLE_IN_TRANSACTION_TIMEOUT = "25P03"

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


class LedgerFenced(StoreError):
    """PostgreSQL ended this replica's session because it sat idle inside its transaction
    (frozen, or stalled) past `idle_in_transaction_s`: the transaction was rolled back and
    the lock released to the others, so nothing of it was written (SQLSTATE 25P03)."""

    code = "ledger_fenced"


class StatementTimeout(StoreError):
    """A statement ran longer than `statement_timeout_s` and PostgreSQL cancelled it."""

    code = "store_timeout"


@dataclass(frozen=True, slots=True)
class RecordedConfig:
    """The configuration digest recorded for a ledger, who recorded it, and when."""

    digest: bytes
    by: str
    at: datetime.datetime | None = None

    def describe(self) -> str:
        """The digest in hex, with who recorded it and when, for messages."""
        when = f" at {self.at.isoformat(timespec='seconds')}" if self.at is not None else ""
        return f"{self.digest.hex()} (recorded by {self.by}{when})"


@dataclass(frozen=True, slots=True)
class Probe:
    """What a readiness probe saw: the committed length, and the recorded configuration."""

    length: int
    recorded: RecordedConfig | None


class StewardRotated(StoreError):
    """The ledger's steward key in force is not the one this replica seals with: another
    replica put a new key in force (DESIGN.md §4), or this one did and the others did not."""

    code = "steward_key_not_in_force"


class ConfigMismatch(StoreError):
    """This replica's configuration digest is not the one recorded for its ledger: its
    pool.toml differs from the one the ledger is decided under, so it decides nothing."""

    code = "config_mismatch"

    def __init__(self, detail: str, mine: bytes, recorded: RecordedConfig) -> None:
        super().__init__(detail)
        self.mine = mine
        self.recorded = recorded


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


def _fenced(store: PostgresStore, doing: str, written: str) -> LedgerFenced:
    return LedgerFenced(
        f"{store.where}: this replica held the lock of ledger {store.ledger!r} idle for more "
        f"than {store.idle_in_transaction_s:g} s (it was frozen or stalled), so PostgreSQL "
        f"ended its session and rolled its transaction back while {doing}; {written}. It "
        "reads the ledger again before it decides anything"
    )


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
            # Before COMMIT the transaction is lost with its connection whatever happened;
            # the session was fenced when the server said so, or when it sat idle past the
            # timeout (libpq often loses the server's last word to a reset connection).
            if exc.sqlstate == _IDLE_IN_TRANSACTION_TIMEOUT or self._idle_past_timeout():
                return _fenced(store, doing, written)
            return PostgresUnavailable(
                f"{store.where}: the connection was lost while {doing} ({_reason(exc)}); {written}"
            )
        store._rollback_quietly()
        return store._refusal(doing, exc, written)

    def _relock(self, conn: _Conn) -> None:
        """After an append committed, take the lock again for a further read or append."""
        store = self._store
        try:
            conn.execute(_BEGIN, prepare=False)
            self._in_transaction = True
            self._asked_at = time.monotonic()
            conn.execute(_LOCK, (store.lock_key,))
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
                    rows = cur.execute(_RANGE, query).fetchall()
            except psycopg.Error as exc:
                raise self._fail("reading unseen entries", exc) from None
            self._asked_at = asked
            batch = _consecutive(rows, nxt, store, min(self._length, nxt + limit))
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
            cur = conn.execute(_INSERT, (store.ledger, first, [bytes(r) for r in raws]))
            inserted = cur.rowcount
            self._asked_at = asked
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
        asked = time.monotonic()
        try:
            conn.execute(_RAISE_HIGH_WATER, point)
        except psycopg.Error as exc:
            raise self._fail(f"raising the high-water record after {span}", exc) from None
        self._asked_at = asked
        idle = self._idle_past_timeout()
        try:
            conn.execute("COMMIT", prepare=False)
        except psycopg.Error as exc:
            self._failed = "the commit"
            self._in_transaction = False
            if exc.sqlstate == _IDLE_IN_TRANSACTION_TIMEOUT:
                # The server ended the session before it read the COMMIT (PostgreSQL checks
                # the timeout once more after reading a command, before running it).
                store._writer.drop()
                self._conn = None
                raise _fenced(store, f"committing {span}", "nothing was written") from None
            if not _answered(conn, exc):
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
                    f"{store.ledger!r} ({_reason(exc)}){hint}; whether they were written is "
                    "unknown. Nothing is retried: the next writing() reads the ledger and shows "
                    "whether they landed",
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
        self._wrote = "the high-water record"

    def record_config(self, digest: bytes) -> None:
        """Record `digest` as the ledger's configuration, committed when the section ends."""
        conn = self._usable()
        store = self._store
        if not self._in_transaction:
            self._relock(conn)
        try:
            conn.execute(_RECORD_CONFIG, (store.ledger, digest, store.recorded_by))
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
                    f"({_reason(exc)}); it may not be recorded"
                ) from None


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
    for `writing()`; a third, for `probe()`, when a readiness probe first asks. With
    `create_schema` (the default) the tables are created if missing. Every failure is a
    `StoreError` naming the server, never a psycopg exception.

    Waits are bounded (seconds; 0 turns one off): `lock_timeout_s` for another replica's
    lock, `statement_timeout_s` for one statement, `idle_in_transaction_s` for a session
    idle inside its transaction before PostgreSQL ends it (fencing a frozen replica).
    `config_digest`, when set, is checked against the ledger's recorded one in every section.
    """

    def __init__(
        self,
        dsn: str,
        *,
        ledger: str = "default",
        connect_timeout_s: int = 5,
        lock_timeout_s: float = LOCK_TIMEOUT_S,
        statement_timeout_s: float = STATEMENT_TIMEOUT_S,
        idle_in_transaction_s: float = IDLE_IN_TRANSACTION_S,
        config_digest: bytes | None = None,
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
        self.statement_timeout_s = statement_timeout_s
        self.idle_in_transaction_s = idle_in_transaction_s
        self._session = tuple(
            f"{round(max(0.0, s) * 1000)}"
            for s in (lock_timeout_s, statement_timeout_s, idle_in_transaction_s)
        )
        if config_digest is not None and len(config_digest) != 32:
            raise StoreError("a configuration digest is 32 bytes (SHA-256)")
        self.config_digest = config_digest
        # The public key this replica seals with, checked against the ledger's record in
        # every section once the pool sets it (DESIGN.md §4, key rotation).
        self.steward_key: bytes | None = None
        self.recorded_by = f"{socket.gethostname()} pid {os.getpid()}"
        self._fsyncs = 0
        self._commits = 0
        self._connections = 0
        self._closed = False
        self._reader = _Link(self)
        self._writer = _Link(self)
        self._prober = _Link(self)
        self._read_lock = threading.Lock()
        self._probe_lock = threading.Lock()
        self._probe_since: float | None = None
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

    def _refusal(self, doing: str, exc: psycopg.Error, written: str) -> StoreError:
        """The error for a statement the server refused (the connection still usable)."""
        if exc.sqlstate == _LOCK_NOT_AVAILABLE:
            return LedgerLockTimeout(
                f"{self.where}: another replica held the lock of ledger {self.ledger!r} for "
                f"more than {self.lock_timeout_s:g} s while {doing}; {written}"
            )
        if exc.sqlstate == _QUERY_CANCELED:
            return StatementTimeout(
                f"{self.where}: {doing} took longer than {self.statement_timeout_s:g} s and "
                f"was cancelled ({_reason(exc)}); {written}"
            )
        return StoreError(f"{self.where}: {doing} failed ({_reason(exc)}); {written}")

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
                    raise self._refusal(doing, exc, "nothing was changed") from None

    def _length_on(self, conn: _Conn) -> int:
        row = conn.execute(_LENGTH, (self.ledger,)).fetchone()
        return int(row[0]) if row else 0

    def _locked_length(self, conn: _Conn) -> int:
        """Under the lock: the ledger's length, once the recorded configuration is checked.

        With no `config_digest` nothing is checked. With one, a ledger with no record gets
        this replica's (in this transaction), and a different record is `ConfigMismatch`.
        """
        if self.steward_key is not None:
            self._check_steward(conn, self.steward_key)
        mine = self.config_digest
        if mine is None:
            return self._length_on(conn)
        row = conn.execute(_LENGTH_AND_CONFIG, (self.ledger, self.ledger)).fetchone()
        assert row is not None
        length = int(row[0])
        if row[1] is None:
            conn.execute(_RECORD_CONFIG, (self.ledger, mine, self.recorded_by))
            return length
        recorded = RecordedConfig(bytes(row[1]), str(row[2]), row[3])
        if recorded.digest != mine:
            raise self.mismatch(recorded)
        return length

    def _check_steward(self, conn: _Conn, mine: bytes) -> None:
        """Under the lock: refuse to seal with `mine` when the ledger records another key in
        force; a ledger with no record takes this replica's (its first key)."""
        row = conn.execute(_STEWARD_READ, (self.ledger,)).fetchone()
        if row is None:
            conn.execute(_STEWARD_FIRST, (self.ledger, mine, self.recorded_by))
            return
        if bytes(row[0]) != mine:
            raise StewardRotated(
                f"{self.where}: ledger {self.ledger!r} seals with steward key "
                f"{bytes(row[0]).hex()} from entry {row[1]} (put in force by {row[2]}), and "
                f"this replica with {mine.hex()}: nothing was written. Give this replica the "
                "deployment's rotations/ and steward.key, then restart it"
            )

    def seal_with(self, public_key: bytes) -> None:
        """Check, in every section from now on, that `public_key` is the ledger's key in
        force before anything is sealed with it (DESIGN.md §4)."""
        self.steward_key = public_key

    def record_rotation(self, new: bytes, from_seq: int) -> None:
        """Record, under the ledger's lock, that `new` seals from entry `from_seq` on
        (DESIGN.md §4), before the rotation statement is written: only while this replica's
        key is the one in force and the ledger's length is `from_seq`, so no replica sealed
        past the rotation's start (recording the same again is a no-op). Otherwise
        `StewardRotated` or `StoreError`, nothing recorded. From then on this replica checks
        `new`: every other replica's sections are refused until it is given the new key."""
        with self._write_lock:
            conn, length = self._begin(check_config=False)
            try:
                row = conn.execute(_STEWARD_READ, (self.ledger,)).fetchone()
                in_force = None if row is None else bytes(row[0])
                if row is not None and in_force == new and int(row[1]) == from_seq:
                    conn.execute("COMMIT")
                    self.steward_key = new
                    return
                if in_force is not None and in_force != self.steward_key:
                    raise StewardRotated(
                        f"{self.where}: ledger {self.ledger!r} seals with steward key "
                        f"{in_force.hex()} (put in force by {row[2] if row else '?'}), not this "
                        "replica's: the rotation is not recorded"
                    )
                if length != from_seq:
                    raise StoreError(
                        f"{self.where}: ledger {self.ledger!r} has {length} entries, not "
                        f"{from_seq}: another replica appended since; the rotation is not "
                        "recorded, try again"
                    )
                conn.execute(_STEWARD_ROTATE, (self.ledger, new, from_seq, self.recorded_by))
                conn.execute("COMMIT")
            except psycopg.Error as exc:
                self._rollback_quietly()
                raise self._refusal(
                    "recording a key rotation", exc, "nothing was recorded"
                ) from None
            except BaseException:
                self._rollback_quietly()
                raise
        self.steward_key = new

    def mismatch(self, recorded: RecordedConfig) -> ConfigMismatch:
        """The refusal of a replica whose configuration is not the recorded one."""
        mine = self.config_digest or b""
        return ConfigMismatch(
            f"{self.where}: ledger {self.ledger!r} is decided under configuration "
            f"{recorded.describe()}, but this replica's pool.toml has digest {mine.hex()}: "
            "it decides nothing until they agree (make pool.toml the same on every replica "
            "and send SIGHUP, docs/reliability.md); nothing was written",
            mine,
            recorded,
        )

    # -- the Store protocol ---------------------------------------------------------------

    def ensure_schema(self) -> None:
        """Create the entries table if it is missing; idempotent, safe from many replicas (§6.1)."""
        with self._read_lock:
            while True:
                conn, fresh = self._reader.get()
                try:
                    row = conn.execute(_HAS_ALL_TABLES).fetchone()
                    if row and row[0]:
                        return
                    # Two replicas creating the tables at once would collide in the catalog;
                    # the lock makes the second find them made.
                    with conn.transaction():
                        conn.execute(_LOCK, (SCHEMA_LOCK_KEY,))
                        conn.execute(_SCHEMA)
                        conn.execute(_HIGH_WATER_SCHEMA)
                        conn.execute(_CONFIG_SCHEMA)
                        conn.execute(_SNAPSHOT_SCHEMA)
                        conn.execute(_CLAIMS_SCHEMA)
                        conn.execute(_STEWARD_SCHEMA)
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

    # -- one configuration across replicas ------------------------------------------------

    def recorded_config(self) -> RecordedConfig | None:
        """The configuration digest recorded for this ledger, or None if none is."""
        has = self._read_rows("checking the schema", _HAS_ALL_TABLES, (), binary=False)
        if not has[0][0]:
            return None
        rows = self._read_rows("reading the configuration digest", _CONFIG, (self.ledger,))
        return RecordedConfig(bytes(rows[0][0]), str(rows[0][1]), rows[0][2]) if rows else None

    def agree_config(self) -> None:
        """Under the ledger's lock, record this replica's digest if none is, or raise
        `ConfigMismatch` if another is (what every section does before it appends)."""
        if self.config_digest is None:
            return
        with self.writing():
            pass

    def adopt_config(self, digest: bytes) -> None:
        """Make `digest` the configuration this ledger is decided under, replacing any other,
        under the ledger's lock; from its commit on, replicas with another digest decide
        nothing. An operator's explicit act (`pool serve` does it on SIGHUP with a changed
        pool.toml), never done at start."""
        if len(digest) != 32:
            raise StoreError("a configuration digest is 32 bytes (SHA-256)")
        self.ensure_schema()
        with self._write_lock:
            conn, _ = self._begin(check_config=False)
            writer = PostgresWriter(self, conn, 0)
            try:
                writer.record_config(digest)
            except BaseException:
                writer._finish(ok=False)
                raise
            writer._finish(ok=True)
            self.config_digest = digest

    def probe(self, timeout_s: float = PROBE_TIMEOUT_S) -> Probe:
        """A bounded round trip to PostgreSQL for a readiness probe: the ledger's committed
        length and its recorded configuration, or `PostgresUnavailable` if no answer came
        within `timeout_s`, whatever the network does. Runs on a connection of its own, so
        a long read or a held write lock never makes the service look down."""
        if not self._probe_lock.acquire(blocking=False):
            since = self._probe_since or time.monotonic()
            raise PostgresUnavailable(
                f"{self.where} has not answered a readiness probe for "
                f"{time.monotonic() - since:.1f} s"
            )
        self._probe_since = time.monotonic()
        result: list[Probe | BaseException] = []
        done = threading.Event()

        def ask() -> None:
            try:
                result.append(self._probe_once())
            except BaseException as exc:  # handed to the waiting caller
                result.append(exc)
            finally:
                if self._closed:
                    self._prober.drop()
                done.set()
                self._probe_since = None
                self._probe_lock.release()

        threading.Thread(target=ask, name="postgres-probe", daemon=True).start()
        if not done.wait(timeout_s):
            raise PostgresUnavailable(
                f"{self.where} did not answer a readiness probe within {timeout_s:g} s"
            )
        answer = result[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def _probe_once(self) -> Probe:
        while True:
            conn, fresh = self._prober.get()
            try:
                has = conn.execute(_HAS_ALL_TABLES).fetchone()
                if not (has and has[0]):
                    return Probe(self._length_on(conn), None)
                row = conn.execute(_LENGTH_AND_CONFIG, (self.ledger, self.ledger)).fetchone()
            except psycopg.Error as exc:
                if _lost(conn):
                    self._prober.drop()
                    if not fresh:
                        continue
                    raise PostgresUnavailable(
                        f"{self.where}: the connection was lost during a readiness probe: "
                        f"{_reason(exc)}"
                    ) from None
                raise self._refusal("a readiness probe", exc, "nothing was changed") from None
            assert row is not None
            recorded = RecordedConfig(bytes(row[1]), str(row[2]), row[3]) if row[1] else None
            return Probe(int(row[0]), recorded)

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

    def _begin(self, *, check_config: bool = True) -> tuple[_Conn, int]:
        doing = f"locking ledger {self.ledger!r}"
        while True:
            try:
                conn, fresh = self._writer.get()
            except PostgresUnavailable as exc:
                raise PostgresUnavailable(f"{exc.detail}; nothing was written") from None
            try:
                conn.execute(_BEGIN, prepare=False)
                conn.execute(_LOCK, (self.lock_key,))
                if check_config:
                    return conn, self._locked_length(conn)
                return conn, self._length_on(conn)
            except psycopg.Error as exc:
                if _lost(conn):
                    self._writer.drop()
                    if not fresh:
                        continue
                    raise PostgresUnavailable(
                        f"{self.where}: the connection was lost while {doing}: "
                        f"{_reason(exc)}; nothing was written"
                    ) from None
                self._rollback_quietly()
                raise self._refusal(doing, exc, "nothing was written") from None
            except (ConfigMismatch, StewardRotated):
                self._rollback_quietly()
                raise

    def close(self) -> None:
        """Close both connections; the server releases any lock they held."""
        self._closed = True
        self._reader.drop()
        self._writer.drop()
        if self._probe_lock.acquire(blocking=False):
            # A probe still waiting on the network drops its own connection when it ends.
            try:
                self._prober.drop()
            finally:
                self._probe_lock.release()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
        rows = self.store._read_rows("listing snapshots", _SNAPSHOT_LENGTHS, (self.store.ledger,))
        return [int(row[0]) for row in rows]

    def newest(self) -> tuple[int, float] | None:
        """The newest kept snapshot's length and when it was written (seconds since the
        epoch, the server's clock), or None when none is kept."""
        rows = self.store._read_rows("listing snapshots", _SNAPSHOT_NEWEST, (self.store.ledger,))
        return None if not rows else (int(rows[0][0]), float(rows[0][1]))

    def newest_first(self) -> Iterator[tuple[int, bytes | SnapshotRefused]]:
        """Each kept snapshot's length and bytes (or why it cannot be read), newest first."""
        for length in self.lengths():
            try:
                rows = self.store._read_rows(
                    "reading a snapshot", _SNAPSHOT_READ, (self.store.ledger, length)
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
                conn.execute(_SNAPSHOT_WRITE, (self.store.ledger, length, raw))
                conn.execute(_SNAPSHOT_PRUNE, (self.store.ledger, self.store.ledger, keep))
        except psycopg.Error as exc:
            raise StoreError(
                f"{self.store.where}: writing a snapshot failed: {_reason(exc)}"
            ) from None
        finally:
            conn.close()


class PostgresClaimIndex(ReleasedClaims):
    """Released claims of a ledger in PostgreSQL, in a table with a unique key per claim id
    (§6.4, issue 16): what `stores.claim_index.ClaimIndex` is beside a ledger file.

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
        self._link = _Link(store)
        self._lock = threading.Lock()

    def _query(self, doing: str, query: LiteralString, params: Sequence[Any]) -> list[Any]:
        """One statement, retried once on a fresh connection if the old one had gone stale
        (as `PostgresStore._read_rows`)."""
        with self._lock:
            while True:
                conn, fresh = self._link.get()
                try:
                    cur = conn.execute(query, params)
                    return cur.fetchall() if cur.description is not None else []
                except psycopg.Error as exc:
                    if _lost(conn):
                        self._link.drop()
                        if not fresh:
                            continue
                    raise self.store._refusal(doing, exc, "nothing was changed") from None

    @property
    def covers(self) -> int:
        """The longest ledger length any replica wrote the rows through (0: none yet)."""
        rows = self._query("reading the claim index", _CLAIMS_COVERS, (self.store.ledger,))
        return int(rows[0][0]) if rows else 0

    def _forget_past_the_end(self) -> None:
        # Rows past the ledger's end belong to entries it no longer has (a loss accepted
        # by an operator): no replica can have folded them, so none relies on them.
        self._query("cutting the claim index", _CLAIMS_PAST, (self.store.ledger, len(self.store)))

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
            "reading the claim index", _CLAIM_ROW, (self.store.ledger, claim, self.base)
        )
        return None if not rows else (int(rows[0][0]), int(rows[0][1]))

    def _write(self, rows: list[tuple[str, int, int]], length: int) -> None:
        ledger = self.store.ledger
        with self._lock:
            conn, _ = self._link.get()
            try:
                with conn.transaction(), conn.cursor() as cur:
                    cur.executemany(_CLAIM_WRITE, [(ledger, c, a, r) for c, a, r in rows])
                    cur.execute(_CLAIMS_COVER, (ledger, length))
            except psycopg.Error as exc:
                if _lost(conn):
                    self._link.drop()
                raise StoreError(f"{self.where}: {_reason(exc)}") from None

    def _stored(self) -> Iterator[tuple[str, int, int]]:
        rows = self._query(
            "reading the claim index", _CLAIMS_STORED, (self.store.ledger, self.base)
        )
        for claim, a, r in rows:
            yield str(claim), int(a), int(r)

    def _count(self) -> int:
        rows = self._query("reading the claim index", _CLAIMS_COUNT, (self.store.ledger, self.base))
        return int(rows[0][0])

    def close(self) -> None:
        """Close its connection."""
        with self._lock:
            self._link.drop()
