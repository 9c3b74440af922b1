"""Released claims kept off the heap: what the fold asks of a claim index (§6.4).

The fold keeps open claims in memory; a released claim moves to a `ReleasedClaims`, whose
rows wait in memory until the group commit that released them is durable and are then
written with the ledger length they cover. Where the rows live is a store's business
(`stores.claim_index` for a ledger file, the PostgreSQL store for a shared ledger); this
module is the part the ledger's fold, replay and snapshots rely on, and does no I/O itself.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from joulepool.errors import StoreError

log = logging.getLogger("joulepool.claim_index")

FLUSH_EVERY = 50_000
"""Buffered rows after which a replay writes them out, so the buffer stays small."""


class ReleasedClaims:
    """Released claims (claim id -> admitted seq, released seq) off the heap (§6.4): rows
    buffered in memory until `flush` writes them with the length they cover, and only rows
    released below `base` (the length the fold stands on) trusted. Subclasses keep them."""

    read_only: bool
    where: str

    def __init__(self) -> None:
        self._pending: dict[str, tuple[int, int]] = {}
        self.base = 0
        self._batch = False

    @property
    def covers(self) -> int:
        """The ledger length the stored rows were written through (0 for a new index)."""
        raise NotImplementedError

    def rebase(self, length: int) -> bool:
        """Trust the rows below `length` only, the length the fold starts from. False
        (nothing changed) when the index does not reach `length`."""
        raise NotImplementedError

    def reset(self) -> None:
        """Start again from nothing, for a replay from entry 0."""
        raise NotImplementedError

    def _row(self, claim: str) -> tuple[int, int] | None:
        raise NotImplementedError

    def _write(self, rows: list[tuple[str, int, int]], length: int) -> None:
        """Store `rows` and the length they cover in one transaction, or raise."""
        raise NotImplementedError

    def _stored(self) -> Iterator[tuple[str, int, int]]:
        raise NotImplementedError

    def _count(self) -> int:
        raise NotImplementedError

    def close(self) -> None:
        """Let go of what holds the rows."""
        raise NotImplementedError

    def __contains__(self, claim: object) -> bool:
        if claim in self._pending:
            return True
        return isinstance(claim, str) and self._row(claim) is not None

    def get(self, claim: str) -> tuple[int, int] | None:
        """A released claim's (admitted seq, released seq), or None."""
        found = self._pending.get(claim)
        return found if found is not None else self._row(claim)

    def __setitem__(self, claim: str, seqs: tuple[int, int]) -> None:
        self._pending[claim] = seqs
        if not self._batch and len(self._pending) >= FLUSH_EVERY and not self.read_only:
            self.flush(seqs[1] + 1)

    def __delitem__(self, claim: str) -> None:
        # Only a batch being taken back deletes, and its rows were never written.
        del self._pending[claim]

    def begin(self) -> None:
        """A group commit starts: its rows wait for `flush` or are dropped by `__delitem__`."""
        self._batch = True

    def flush(self, length: int) -> None:
        """Write the buffered rows and the length they cover, in one transaction."""
        self._batch = False
        if self.read_only:
            return  # a reader keeps its tail's rows in memory
        rows = [(c, a, r) for c, (a, r) in self._pending.items()]
        try:
            self._write(rows, length)
        except StoreError as exc:
            # The ledger's entries are durable already: the rows stay buffered and go with
            # the next commit. A restart finds the index behind and rebuilds it (a cache).
            log.error("%s: the claim index could not be written: %s", self.where, exc)
            return
        self._pending.clear()
        self.base = length

    def items(self) -> Iterator[tuple[str, tuple[int, int]]]:
        """Every released claim the index trusts, stored and buffered."""
        for claim, a, r in self._stored():
            yield claim, (a, r)
        yield from self._pending.items()

    def __len__(self) -> int:
        return self._count() + len(self._pending)
