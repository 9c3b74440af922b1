"""`PostgresStore`: one ledger in PostgreSQL, shared by several `pool serve` replicas
(DESIGN.md §6). The package's docstring says how it keeps them linearizable and bounded."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, LiteralString

import psycopg
from psycopg import conninfo

from joulepool.errors import StoreError
from joulepool.ledger.rollback import HighWater
from joulepool.stores import PG_IDLE_IN_TRANSACTION_S, PG_LOCK_TIMEOUT_S, PG_STATEMENT_TIMEOUT_S
from joulepool.stores.base import EntryOffsets, SharedLedger
from joulepool.stores.postgres.errors import (
    ConfigMismatch,
    LedgerLockTimeout,
    PostgresUnavailable,
    StatementTimeout,
    StewardRotated,
)
from joulepool.stores.postgres.link import DSN_DEFAULTS, Conn, Link, describe, reason
from joulepool.stores.postgres.records import Probe, RecordedConfig
from joulepool.stores.postgres.sql import (
    BATCH_BYTES,
    BEGIN,
    CLAIMS_SCHEMA,
    CONFIG,
    CONFIG_SCHEMA,
    HAS_ALL_TABLES,
    HAS_SCHEMA,
    HAS_TABLE,
    HAS_TABLES,
    HIGH_WATER,
    HIGH_WATER_SCHEMA,
    LENGTH,
    LENGTH_AND_CONFIG,
    LENGTH_AND_HIGH_WATER,
    LOCK,
    LOCK_NOT_AVAILABLE,
    MAX_BATCH_ROWS,
    MIN_BATCH_ROWS,
    ONE,
    PAGE,
    QUERY_CANCELED,
    RECORD_CONFIG,
    SCHEMA,
    SCHEMA_LOCK_KEY,
    SESSION,
    SNAPSHOT_SCHEMA,
    STEWARD_FIRST,
    STEWARD_READ,
    STEWARD_ROTATE,
    STEWARD_SCHEMA,
    TABLE,
    lock_key,
)
from joulepool.stores.postgres.writer import PostgresWriter, consecutive

LOCK_TIMEOUT_S = PG_LOCK_TIMEOUT_S
STATEMENT_TIMEOUT_S = PG_STATEMENT_TIMEOUT_S
IDLE_IN_TRANSACTION_S = PG_IDLE_IN_TRANSACTION_S
PROBE_TIMEOUT_S = 2.0
"""How long `/readyz`'s round trip to PostgreSQL may take before it counts as unavailable."""


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
            extra = {k: v for k, v in DSN_DEFAULTS.items() if k not in given}
            self._conninfo = conninfo.make_conninfo(
                dsn, connect_timeout=max(1, connect_timeout_s), **extra
            )
        except psycopg.Error:
            # libpq's parse error quotes the DSN, which may hold a password.
            raise StoreError(
                "the PostgreSQL connection string is malformed; libpq could not parse it"
            ) from None
        self.where = describe(given)
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
        self._reader = self.link()
        self._writer = self.link()
        self._prober = self.link()
        self._read_lock = threading.Lock()
        self._probe_lock = threading.Lock()
        self._probe_since: float | None = None
        # Advisory locks are re-entrant within one session, so two threads sharing this
        # store's connection would both "hold" the lock: serialise sections here as well.
        self._write_lock = threading.Lock()
        try:
            if create_schema:
                self.ensure_schema()
            elif not self._read_rows("checking the schema", HAS_TABLE, (), binary=False)[0][0]:
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

    def _connect(self) -> Conn:
        if self._closed:
            raise StoreError(f"the store for ledger {self.ledger!r} at {self.where} is closed")
        try:
            conn: Conn = psycopg.connect(self._conninfo, autocommit=True)
        except psycopg.Error as exc:
            raise PostgresUnavailable(f"cannot connect to {self.where}: {reason(exc)}") from None
        try:
            # Forced on whatever the server, role or database default says: a commit that
            # returns must have flushed the WAL, or a verdict could outlive its entry.
            conn.execute(SESSION, self._session)
        except psycopg.Error as exc:
            conn.close()
            raise PostgresUnavailable(
                f"{self.where}: setting up the session failed: {reason(exc)}"
            ) from None
        self._connections += 1
        return conn

    def link(self) -> Link:
        """A connection of its own to this store's server, opened when first used and
        retried once when stale (DESIGN.md §6); for a part beside the store (the claim
        index) whose reads must not queue behind the store's own."""
        return Link(self._connect, self._refusal, self.where)

    def _refusal(self, doing: str, exc: psycopg.Error, written: str) -> StoreError:
        """The error for a statement the server refused (the connection still usable)."""
        if exc.sqlstate == LOCK_NOT_AVAILABLE:
            return LedgerLockTimeout(
                f"{self.where}: another replica held the lock of ledger {self.ledger!r} for "
                f"more than {self.lock_timeout_s:g} s while {doing}; {written}"
            )
        if exc.sqlstate == QUERY_CANCELED:
            return StatementTimeout(
                f"{self.where}: {doing} took longer than {self.statement_timeout_s:g} s and "
                f"was cancelled ({reason(exc)}); {written}"
            )
        return StoreError(f"{self.where}: {doing} failed ({reason(exc)}); {written}")

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
        """One read on the reader connection (`Link.run`: a stale one is replaced once)."""

        def read(conn: Conn) -> list[tuple[Any, ...]]:
            with conn.cursor(binary=binary) as cur:
                return cur.execute(query, params).fetchall()

        with self._read_lock:
            return self._reader.run(doing, read, written="nothing was changed")

    def _length_on(self, conn: Conn) -> int:
        row = conn.execute(LENGTH, (self.ledger,)).fetchone()
        return int(row[0]) if row else 0

    def _locked_length(self, conn: Conn) -> int:
        """Under the lock: the ledger's length, once the recorded configuration is checked.

        With no `config_digest` nothing is checked. With one, a ledger with no record gets
        this replica's (in this transaction), and a different record is `ConfigMismatch`.
        """
        if self.steward_key is not None:
            self._check_steward(conn, self.steward_key)
        mine = self.config_digest
        if mine is None:
            return self._length_on(conn)
        row = conn.execute(LENGTH_AND_CONFIG, (self.ledger, self.ledger)).fetchone()
        assert row is not None
        length = int(row[0])
        if row[1] is None:
            conn.execute(RECORD_CONFIG, (self.ledger, mine, self.recorded_by))
            return length
        recorded = RecordedConfig(bytes(row[1]), str(row[2]), row[3])
        if recorded.digest != mine:
            raise self.mismatch(recorded)
        return length

    def _check_steward(self, conn: Conn, mine: bytes) -> None:
        """Under the lock: refuse to seal with `mine` when the ledger records another key in
        force; a ledger with no record takes this replica's (its first key)."""
        row = conn.execute(STEWARD_READ, (self.ledger,)).fetchone()
        if row is None:
            conn.execute(STEWARD_FIRST, (self.ledger, mine, self.recorded_by))
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
                row = conn.execute(STEWARD_READ, (self.ledger,)).fetchone()
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
                conn.execute(STEWARD_ROTATE, (self.ledger, new, from_seq, self.recorded_by))
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

        def create(conn: Conn) -> None:
            row = conn.execute(HAS_SCHEMA).fetchone()
            if row and row[0]:
                return
            # Two replicas creating the tables at once would collide in the catalog; the
            # lock makes the second find them made.
            with conn.transaction():
                conn.execute(LOCK, (SCHEMA_LOCK_KEY,))
                for schema in (
                    SCHEMA,
                    HIGH_WATER_SCHEMA,
                    CONFIG_SCHEMA,
                    SNAPSHOT_SCHEMA,
                    CLAIMS_SCHEMA,
                    STEWARD_SCHEMA,
                ):
                    conn.execute(schema)

        with self._read_lock:
            self._reader.run(f"creating table {TABLE}", create, written="nothing was changed")

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
        rows = self._read_rows("reading the ledger's length", LENGTH, (self.ledger,), binary=False)
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
            rows = self._read_rows("reading entries", PAGE, (self.ledger, nxt, limit))
            batch = consecutive(rows, nxt, self, None)
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

    @property
    def shared(self) -> SharedLedger:
        """This store itself: replicas share it, so it checks their key and configuration
        under the ledger's lock (DESIGN.md §6)."""
        return self

    @property
    def offsets(self) -> EntryOffsets | None:
        """None: entries are rows, read by index, not bytes at offsets (DESIGN.md §4)."""
        return None

    @property
    def writer_pid(self) -> int | None:
        """None: a reader sees only committed entries, never a writer's append in flight
        (DESIGN.md §6)."""
        return None

    def ready(self) -> int:
        """The committed length, once a bounded round trip showed PostgreSQL answers and
        records this replica's configuration, for a readiness probe (DESIGN.md §6); else
        the `StoreError` the next append would meet."""
        seen = self.probe()
        mine = self.config_digest
        if mine is not None and seen.recorded is not None and seen.recorded.digest != mine:
            raise self.mismatch(seen.recorded)
        return seen.length

    def high_water(self) -> HighWater | None:
        """The longest (length, head) this ledger acknowledged, or None if it has no record.

        A database whose schema predates the record has none either.
        """
        has = self._read_rows("checking the schema", HAS_TABLES, (), binary=False)
        if not has[0][0]:
            return None
        rows = self._read_rows("reading the high-water record", HIGH_WATER, (self.ledger,))
        return HighWater(int(rows[0][0]), bytes(rows[0][1])) if rows else None

    def length_and_high_water(self) -> tuple[int, HighWater | None]:
        """The committed length and the high-water record in one statement, so one
        snapshot (standard §6.1, docs/reliability.md §16): an append another replica commits
        while a start checks the ledger is in both or in neither."""
        has = self._read_rows("checking the schema", HAS_TABLES, (), binary=False)
        if not has[0][0]:
            return len(self), None
        rows = self._read_rows(
            "reading the ledger's length and high-water record",
            LENGTH_AND_HIGH_WATER,
            (self.ledger, self.ledger),
        )
        length, high, head = rows[0]
        return int(length), (None if high is None else HighWater(int(high), bytes(head)))

    def acknowledge(self, point: HighWater) -> None:
        """Set the high-water record to `point`, under the ledger's lock (an operator
        accepting the ledger as it is); appends raise it from then on."""
        self.ensure_schema()
        with self.writing() as writer:
            writer.record_high_water(point)

    def entry(self, index: int) -> bytes:
        """One committed entry, as stored."""
        if index >= 0:
            rows = self._read_rows(f"reading entry {index}", ONE, (self.ledger, index))
            if rows:
                return bytes(rows[0][0])
        raise StoreError(
            f"{self.where}: ledger {self.ledger!r} has no entry {index}; it has {len(self)}"
        )

    # -- one configuration across replicas ------------------------------------------------

    def recorded_config(self) -> RecordedConfig | None:
        """The configuration digest recorded for this ledger, or None if none is."""
        has = self._read_rows("checking the schema", HAS_ALL_TABLES, (), binary=False)
        if not has[0][0]:
            return None
        rows = self._read_rows("reading the configuration digest", CONFIG, (self.ledger,))
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
        def ask(conn: Conn) -> Probe:
            has = conn.execute(HAS_ALL_TABLES).fetchone()
            if not (has and has[0]):
                return Probe(self._length_on(conn), None)
            row = conn.execute(LENGTH_AND_CONFIG, (self.ledger, self.ledger)).fetchone()
            assert row is not None
            recorded = RecordedConfig(bytes(row[1]), str(row[2]), row[3]) if row[1] else None
            return Probe(int(row[0]), recorded)

        return self._prober.run("answering a readiness probe", ask, written="nothing was changed")

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

    def _begin(self, *, check_config: bool = True) -> tuple[Conn, int]:
        """BEGIN, the ledger's lock, and its length (checked against the recorded
        configuration and key unless `check_config` is off), on the writer connection."""

        def lock(conn: Conn) -> tuple[Conn, int]:
            conn.execute(BEGIN, prepare=False)
            conn.execute(LOCK, (self.lock_key,))
            return conn, (self._locked_length(conn) if check_config else self._length_on(conn))

        try:
            return self._writer.run(
                f"locking ledger {self.ledger!r}", lock, written="nothing was written"
            )
        except StoreError:
            # A refused statement, a mismatch or a rotation left the transaction open; a
            # lost connection left nothing to roll back.
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
