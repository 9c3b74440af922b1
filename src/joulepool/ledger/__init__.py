"""The signed ledger (standard §6): det-CBOR, pool/1 JCR-1 sealed entries, keys, replay.

Nothing outside this package and the stores touches ledger bytes (DESIGN.md §5).
"""
