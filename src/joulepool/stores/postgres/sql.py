"""The PostgreSQL store's tables and every statement it sends (DESIGN.md §6).

One place for the SQL, so that a reader checking what the store asks of the server (which
table, which lock, which isolation level) reads one file. Each ledger is one `ledger` value
in every table, so several ledgers may share a database.
"""

from __future__ import annotations

import hashlib
from typing import LiteralString

TABLE = "pool_ledger_entries"
HIGH_WATER_TABLE = "pool_ledger_high_water"
CONFIG_TABLE = "pool_ledger_config"

BATCH_BYTES = 4 << 20
"""About this many bytes of entries per query when streaming a ledger."""
MIN_BATCH_ROWS = 64
MAX_BATCH_ROWS = 16_384

SCHEMA_LOCK_KEY = int.from_bytes(
    hashlib.sha256(b"joulepool schema " + TABLE.encode()).digest()[:8], "big", signed=True
)

SCHEMA: LiteralString = """
CREATE TABLE IF NOT EXISTS pool_ledger_entries (
    ledger text NOT NULL,
    seq bigint NOT NULL CHECK (seq >= 0),
    entry bytea NOT NULL,
    PRIMARY KEY (ledger, seq)
)
"""
HIGH_WATER_SCHEMA: LiteralString = """
CREATE TABLE IF NOT EXISTS pool_ledger_high_water (
    ledger text PRIMARY KEY,
    length bigint NOT NULL CHECK (length >= 0),
    head bytea NOT NULL CHECK (octet_length(head) = 32)
)
"""
HAS_TABLE: LiteralString = "SELECT to_regclass('pool_ledger_entries') IS NOT NULL"
HAS_TABLES: LiteralString = (
    "SELECT to_regclass('pool_ledger_entries') IS NOT NULL"
    " AND to_regclass('pool_ledger_high_water') IS NOT NULL"
)
HAS_ALL_TABLES: LiteralString = (
    "SELECT to_regclass('pool_ledger_entries') IS NOT NULL"
    " AND to_regclass('pool_ledger_high_water') IS NOT NULL"
    " AND to_regclass('pool_ledger_config') IS NOT NULL"
    " AND to_regclass('pool_ledger_snapshots') IS NOT NULL"
    " AND to_regclass('pool_ledger_claims') IS NOT NULL"
    " AND to_regclass('pool_ledger_steward') IS NOT NULL"
)
HAS_SCHEMA: LiteralString = (
    HAS_ALL_TABLES
    + " AND to_regclass('pool_ledger_claims_released') IS NOT NULL"
    + " AND to_regclass('pool_ledger_claims_bound') IS NOT NULL"
)
# The steward key that seals the ledger's next entry (DESIGN.md §4, key rotation), checked
# under the ledger's lock in every section: a replica that missed a rotation seals nothing.
STEWARD_SCHEMA: LiteralString = """
CREATE TABLE IF NOT EXISTS pool_ledger_steward (
    ledger text PRIMARY KEY,
    public_key bytea NOT NULL CHECK (octet_length(public_key) = 32),
    from_seq bigint NOT NULL CHECK (from_seq >= 0),
    recorded_by text NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
)
"""
STEWARD_READ: LiteralString = (
    "SELECT public_key, from_seq, recorded_by FROM pool_ledger_steward WHERE ledger = %s"
)
STEWARD_FIRST: LiteralString = (
    "INSERT INTO pool_ledger_steward (ledger, public_key, from_seq, recorded_by)"
    " VALUES (%s, %s, 0, %s) ON CONFLICT (ledger) DO NOTHING"
)
STEWARD_ROTATE: LiteralString = (
    "INSERT INTO pool_ledger_steward (ledger, public_key, from_seq, recorded_by)"
    " VALUES (%s, %s, %s, %s) ON CONFLICT (ledger) DO UPDATE SET public_key ="
    " excluded.public_key, from_seq = excluded.from_seq, recorded_by = excluded.recorded_by,"
    " recorded_at = now()"
)
# Released claims (§6.4's duplicate check), off every replica's heap: one row per
# claim id, unique per ledger. `pool_ledger_claims_bound` records the steward, the longest
# length any replica wrote them through and the head at it (DESIGN.md §4): the rows count
# only while the ledger has that head at that length. Each start checks it and deletes the
# rows past the ledger's end in one transaction under the ledger's lock (CLAIMS_CHECK), by
# the index on `released` that reads those rows, not every claim the ledger ever released.
CLAIMS_SCHEMA: LiteralString = """
CREATE TABLE IF NOT EXISTS pool_ledger_claims (
    ledger text NOT NULL,
    claim text NOT NULL,
    admitted bigint NOT NULL CHECK (admitted >= 0),
    released bigint NOT NULL CHECK (released > admitted),
    PRIMARY KEY (ledger, claim)
);
CREATE INDEX IF NOT EXISTS pool_ledger_claims_released ON pool_ledger_claims (ledger, released);
CREATE TABLE IF NOT EXISTS pool_ledger_claims_bound (
    ledger text PRIMARY KEY,
    steward text NOT NULL,
    length bigint NOT NULL CHECK (length >= 0),
    head bytea NOT NULL CHECK (octet_length(head) = 32)
)
"""
CLAIM_ROW: LiteralString = (
    "SELECT admitted, released FROM pool_ledger_claims"
    " WHERE ledger = %s AND claim = %s AND released < %s"
)
CLAIM_WRITE: LiteralString = (
    "INSERT INTO pool_ledger_claims (ledger, claim, admitted, released) VALUES (%s, %s, %s, %s)"
    " ON CONFLICT (ledger, claim) DO UPDATE"
    " SET admitted = excluded.admitted, released = excluded.released"
)
# The head is the entry's content address (SHA-256 of its bytes), read in the same
# statement: no round trip per group commit. Raised, never lowered.
CLAIMS_COVER: LiteralString = (
    "INSERT INTO pool_ledger_claims_bound AS b (ledger, steward, length, head)"
    " SELECT %s, %s, %s::bigint, sha256(entry) FROM pool_ledger_entries"
    " WHERE ledger = %s AND seq = %s::bigint - 1"
    " ON CONFLICT (ledger) DO UPDATE"
    " SET steward = excluded.steward, length = excluded.length, head = excluded.head"
    " WHERE b.length < excluded.length"
)
CLAIMS_COVERS: LiteralString = "SELECT length FROM pool_ledger_claims_bound WHERE ledger = %s"
# Under the ledger's lock: the binding, the ledger's head at its length and the ledger's
# length, all read in one snapshot that no append can change.
CLAIMS_BINDING: LiteralString = (
    "SELECT b.steward, b.length, b.head,"
    " (SELECT sha256(e.entry) FROM pool_ledger_entries AS e"
    "  WHERE e.ledger = %s AND e.seq = b.length - 1),"
    " (SELECT coalesce(max(seq) + 1, 0) FROM pool_ledger_entries WHERE ledger = %s),"
    " (SELECT count(*) FROM pool_ledger_claims WHERE ledger = %s)"
    " FROM (SELECT 1) AS one LEFT JOIN pool_ledger_claims_bound AS b ON b.ledger = %s"
)
CLAIMS_PAST: LiteralString = "DELETE FROM pool_ledger_claims WHERE ledger = %s AND released >= %s"
CLAIMS_DROP: LiteralString = "DELETE FROM pool_ledger_claims WHERE ledger = %s"
CLAIMS_UNBIND: LiteralString = "DELETE FROM pool_ledger_claims_bound WHERE ledger = %s"
CLAIMS_STORED: LiteralString = (
    "SELECT claim, admitted, released FROM pool_ledger_claims"
    " WHERE ledger = %s AND released < %s ORDER BY claim"
)
CLAIMS_COUNT: LiteralString = (
    "SELECT count(*) FROM pool_ledger_claims WHERE ledger = %s AND released < %s"
)
# State snapshots (DESIGN.md §4): a cache of the fold, signed like a ledger entry, so any
# replica may write one and every replica checks one before it starts from it.
SNAPSHOT_SCHEMA: LiteralString = """
CREATE TABLE IF NOT EXISTS pool_ledger_snapshots (
    ledger text NOT NULL,
    length bigint NOT NULL CHECK (length >= 0),
    snapshot bytea NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (ledger, length)
)
"""
SNAPSHOT_LENGTHS: LiteralString = (
    "SELECT length FROM pool_ledger_snapshots WHERE ledger = %s ORDER BY length DESC"
)
SNAPSHOT_NEWEST: LiteralString = (
    "SELECT length, extract(epoch FROM written_at)::float8 FROM pool_ledger_snapshots"
    " WHERE ledger = %s ORDER BY length DESC LIMIT 1"
)
SNAPSHOT_READ: LiteralString = (
    "SELECT snapshot FROM pool_ledger_snapshots WHERE ledger = %s AND length = %s"
)
SNAPSHOT_WRITE: LiteralString = (
    "INSERT INTO pool_ledger_snapshots (ledger, length, snapshot) VALUES (%s, %s, %s)"
    " ON CONFLICT (ledger, length) DO NOTHING"
)
SNAPSHOT_PRUNE: LiteralString = (
    "DELETE FROM pool_ledger_snapshots WHERE ledger = %s AND length NOT IN"
    " (SELECT length FROM pool_ledger_snapshots WHERE ledger = %s"
    " ORDER BY length DESC LIMIT %s)"
)
CONFIG_SCHEMA: LiteralString = """
CREATE TABLE IF NOT EXISTS pool_ledger_config (
    ledger text PRIMARY KEY,
    digest bytea NOT NULL CHECK (octet_length(digest) = 32),
    recorded_by text NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
)
"""
# The length and the recorded configuration in one round trip, under the lock.
LENGTH_AND_CONFIG: LiteralString = (
    "SELECT (SELECT coalesce(max(seq) + 1, 0) FROM pool_ledger_entries WHERE ledger = %s),"
    " c.digest, c.recorded_by, c.recorded_at"
    " FROM (SELECT 1) AS one LEFT JOIN pool_ledger_config AS c ON c.ledger = %s"
)
CONFIG: LiteralString = (
    "SELECT digest, recorded_by, recorded_at FROM pool_ledger_config WHERE ledger = %s"
)
RECORD_CONFIG: LiteralString = (
    "INSERT INTO pool_ledger_config AS c (ledger, digest, recorded_by) VALUES (%s, %s, %s)"
    " ON CONFLICT (ledger) DO UPDATE SET digest = EXCLUDED.digest,"
    " recorded_by = EXCLUDED.recorded_by, recorded_at = now()"
)
# Raised, never lowered, by an append: in the append's own transaction.
RAISE_HIGH_WATER: LiteralString = (
    "INSERT INTO pool_ledger_high_water AS h (ledger, length, head) VALUES (%s, %s, %s)"
    " ON CONFLICT (ledger) DO UPDATE SET length = EXCLUDED.length, head = EXCLUDED.head"
    " WHERE h.length < EXCLUDED.length"
)
# Set as given, by an operator accepting the ledger as it is (`pool ledger acknowledge`).
SET_HIGH_WATER: LiteralString = (
    "INSERT INTO pool_ledger_high_water (ledger, length, head) VALUES (%s, %s, %s)"
    " ON CONFLICT (ledger) DO UPDATE SET length = EXCLUDED.length, head = EXCLUDED.head"
)
HIGH_WATER: LiteralString = "SELECT length, head FROM pool_ledger_high_water WHERE ledger = %s"
# The length and the record in one statement, so in one snapshot: read apart, another
# replica's append between them made a whole ledger look shorter than what it acknowledged.
LENGTH_AND_HIGH_WATER: LiteralString = (
    "SELECT (SELECT coalesce(max(seq) + 1, 0) FROM pool_ledger_entries WHERE ledger = %s),"
    " h.length, h.head"
    " FROM (SELECT 1) AS one LEFT JOIN pool_ledger_high_water AS h ON h.ledger = %s"
)
SESSION: LiteralString = (
    "SELECT set_config('synchronous_commit', 'on', false),"
    " set_config('lock_timeout', %s, false),"
    " set_config('statement_timeout', %s, false),"
    " set_config('idle_in_transaction_session_timeout', %s, false)"
)
# The index (ledger, seq) answers this with one backward probe, not a count of the ledger.
LENGTH: LiteralString = (
    "SELECT coalesce(max(seq) + 1, 0) FROM pool_ledger_entries WHERE ledger = %s"
)
PAGE: LiteralString = (
    "SELECT seq, entry FROM pool_ledger_entries"
    " WHERE ledger = %s AND seq >= %s ORDER BY seq LIMIT %s"
)
RANGE: LiteralString = (
    "SELECT seq, entry FROM pool_ledger_entries"
    " WHERE ledger = %s AND seq >= %s AND seq < %s ORDER BY seq LIMIT %s"
)
ONE: LiteralString = "SELECT entry FROM pool_ledger_entries WHERE ledger = %s AND seq = %s"
INSERT: LiteralString = (
    "INSERT INTO pool_ledger_entries (ledger, seq, entry)"
    " SELECT %s, %s::bigint + u.ord - 1, u.entry"
    " FROM unnest(%s::bytea[]) WITH ORDINALITY AS u(entry, ord)"
)
# READ COMMITTED is named, not inherited: under REPEATABLE READ the snapshot would be taken
# by the lock statement before the lock was granted, and miss the previous holder's entries.
BEGIN: LiteralString = "BEGIN ISOLATION LEVEL READ COMMITTED"
LOCK: LiteralString = "SELECT pg_advisory_xact_lock(%s)"

# The SQLSTATEs the store tells apart: each is an error of its own, with its own advice.
LOCK_NOT_AVAILABLE = "55P03"
UNIQUE_VIOLATION = "23505"
QUERY_CANCELED = "57014"
IDLE_IN_TRANSACTION_TIMEOUT = "25P03"


def lock_key(ledger: str) -> int:
    """The advisory lock key of a ledger: the first 8 bytes of a SHA-256, signed (DESIGN.md §6).

    Stable across processes, hosts and Python versions (unlike `hash()`), so every replica
    of one ledger takes the same lock, and different ledgers almost surely different ones.
    """
    digest = hashlib.sha256(b"joulepool ledger " + ledger.encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)
