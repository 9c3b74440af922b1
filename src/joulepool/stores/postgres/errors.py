"""What can go wrong with a ledger in PostgreSQL, one class per cause (DESIGN.md §6).

Each is a `StoreError`, so a caller that only needs "the store failed" catches that; each
says whether anything was written, since a replica's next step depends on it.
"""

from __future__ import annotations

from joulepool.errors import StoreError
from joulepool.stores.postgres.records import RecordedConfig


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
