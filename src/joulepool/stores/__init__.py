"""Ledger stores: where the sealed entries live (DESIGN.md §6).

The file store is the default and needs nothing installed; the PostgreSQL store lets
several `pool serve` replicas share one ledger; the memory store serves simulations and
tests. Every store exports the same bytes: the entries as a CBOR sequence (DESIGN.md §4).
"""

# The PostgreSQL store's bounded waits, in seconds (`stores.postgres`, docs/reliability.md):
# here, so `pool serve --help` can show them without importing psycopg.
PG_LOCK_TIMEOUT_S = 8.0
"""How long a section waits for another replica's lock before `LedgerLockTimeout`."""
PG_STATEMENT_TIMEOUT_S = 5.0
"""How long one statement may run before PostgreSQL cancels it."""
PG_IDLE_IN_TRANSACTION_S = 5.0
"""How long a session may sit idle inside its transaction (a frozen replica holding the
ledger's lock) before PostgreSQL ends it, rolling it back and releasing the lock. Shorter
than the lock timeout, so a replica waiting on a frozen one gets the lock, not an error."""
