"""Ledger stores: where the sealed entries live (DESIGN.md §6).

The file store is the default and needs nothing installed; the PostgreSQL store lets
several `pool serve` replicas share one ledger; the memory store serves simulations and
tests. Every store exports the same bytes: the entries as a CBOR sequence (DESIGN.md §4).
"""
