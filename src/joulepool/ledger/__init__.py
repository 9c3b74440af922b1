"""The signed ledger (standard §6): det-CBOR, pool/1 JCR-1 sealed entries, keys, replay.

Nothing outside this package and the stores touches ledger bytes (DESIGN.md §5).
"""

# Here rather than beside `Pool`, which seals them, so that `pool serve --help` shows them
# without importing the ledger's machinery: every `pool` command builds that parser.
SNAPSHOT_EVERY = 10_000
"""Entries between state snapshots by default (DESIGN.md §4): a restart replays at most
about this many entries after the newest snapshot."""
SNAPSHOT_SECONDS = 300.0
"""Seconds after which a commit seals a snapshot anyway, if any entry came since the last."""
