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

Bounded waits: every session sets `lock_timeout`, `statement_timeout` and
`idle_in_transaction_session_timeout`. A replica frozen inside its transaction (SIGSTOP, a
stalled VM, a GC pause) holds the advisory lock only until PostgreSQL ends its idle session,
`idle_in_transaction_s` (5 s) after its last statement; the others wait for the lock at most
`lock_timeout_s` (8 s, longer on purpose, so they get it rather than an error) and then
append. The frozen replica is fenced: its transaction was rolled back by the server, so when
it wakes its next statement or its COMMIT fails with SQLSTATE 25P03 (`LedgerFenced`, "nothing
was written"), and its next section reconnects and catches up through `unseen()`.

One configuration: with `config_digest` set, every section checks, under the lock and in its
own transaction, that the digest recorded for the ledger in `pool_ledger_config` is this
replica's (recording it when there is none), and refuses with `ConfigMismatch` otherwise.
Every commit is therefore made under the recorded configuration. `adopt_config()` replaces
the record, under the same lock: an operator's explicit reload.

Durability and the one guarantee that matters: a caller gets an error or a verdict whose
entry is committed, never a verdict whose entry is not, and no entry is written twice.
`append()` commits before it returns (the Writer contract: "on return they are committed"),
with `synchronous_commit` forced on for the session, so PostgreSQL has flushed its WAL.
A failure before COMMIT was sent means nothing was written, and says so. A COMMIT whose
answer never came (the connection died) has an unknown outcome: it is never retried, and
`CommitOutcomeUnknown` says so; the next `writing()` reconnects and its `unseen()` shows
whether the entries landed, so the caller learns the truth from the ledger, not a guess.

The modules, each deciding one thing: `sql` (the tables and every statement), `errors` (one
class per cause), `records` (what is read back beside the entries), `link` (a connection,
and the one retry of a stale one), `writer` (one locked section), `store` (`PostgresStore`),
`snapshots` (state snapshots in a table) and `claim_index` (released claims in a table).
"""

from joulepool.stores.postgres.claim_index import PostgresClaimIndex
from joulepool.stores.postgres.errors import (
    CommitOutcomeUnknown,
    ConfigMismatch,
    LedgerFenced,
    LedgerLockTimeout,
    LedgerMoved,
    LedgerTruncated,
    PostgresUnavailable,
    StatementTimeout,
    StewardRotated,
)
from joulepool.stores.postgres.records import Probe, RecordedConfig
from joulepool.stores.postgres.snapshots import PostgresSnapshots
from joulepool.stores.postgres.sql import lock_key
from joulepool.stores.postgres.store import (
    IDLE_IN_TRANSACTION_S,
    LOCK_TIMEOUT_S,
    PROBE_TIMEOUT_S,
    STATEMENT_TIMEOUT_S,
    PostgresStore,
)
from joulepool.stores.postgres.writer import PostgresWriter

__all__ = [
    "IDLE_IN_TRANSACTION_S",
    "LOCK_TIMEOUT_S",
    "PROBE_TIMEOUT_S",
    "STATEMENT_TIMEOUT_S",
    "CommitOutcomeUnknown",
    "ConfigMismatch",
    "LedgerFenced",
    "LedgerLockTimeout",
    "LedgerMoved",
    "LedgerTruncated",
    "PostgresClaimIndex",
    "PostgresSnapshots",
    "PostgresStore",
    "PostgresUnavailable",
    "PostgresWriter",
    "Probe",
    "RecordedConfig",
    "StatementTimeout",
    "StewardRotated",
    "lock_key",
]
