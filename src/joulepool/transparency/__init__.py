"""The tenant's and the log's clients of the ledger as a C2SP transparency log (DESIGN.md §8,
docs/transparency.md): checking a saved proof bundle offline, following the log's
checkpoints for a fork or a rollback, and collecting C2SP witnesses' cosignatures.

Every byte read here comes from a server or a file nobody here controls: each reader is
bounded in size and count before any work is done, and every refusal is a `PoolError`
naming what failed.
"""
