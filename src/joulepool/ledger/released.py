"""Released claims kept off the heap: what the fold asks of a claim index (§6.4).

The fold keeps open claims in memory; a released claim moves to a `ReleasedClaims`, whose
rows wait in memory until the group commit that released them is durable and are then
written with the ledger length they cover. Where the rows live is a store's business
(`stores.claim_index` for a ledger file, the PostgreSQL store for a shared ledger); this
module is the part the ledger's fold, replay and snapshots rely on, and does no I/O itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping

from joulepool.errors import PoolError, StoreError
from joulepool.ledger.cose import GENESIS

log = logging.getLogger("joulepool.claim_index")

FLUSH_EVERY = 50_000
"""Buffered rows after which a replay writes them out, so the buffer stays small."""

Binding = tuple[str, int, bytes]
"""What an index says it covers: the steward, the ledger length and the head at it."""

HeadAt = Callable[[int], bytes | None]
"""The ledger's head after its first n entries; None where it has fewer."""


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
        self.steward = ""
        self._head_at: HeadAt | None = None
        self._seen: Binding | None = None
        self._checked = True
        self._usable = True

    def bind(self, steward: str, head_at: HeadAt) -> None:
        """Name the ledger this index caches (DESIGN.md §4, every other cache beside the
        ledger): its steward and a way to read its head at a length. The binding the index
        records is read now, before the ledger is, so that a reader beside a writer checks
        one the ledger it then reads already reaches; it is checked at first use."""
        self.steward = steward
        self._head_at = head_at
        self._seen = self._binding()
        self._checked = False

    def _check(self) -> None:
        """Use the rows only where the index covers this steward's ledger at a length where
        the ledger has the head it recorded (DESIGN.md §4); else discard them, with a
        warning, and let the ledger rebuild them. Never a refusal to start."""
        self._checked = True
        problem = self._mismatch(self._seen)
        if problem is None:
            return
        log.warning(
            "%s: %s; the claim index is discarded and rebuilt from the ledger", self.where, problem
        )
        if self.read_only:
            self._usable = False  # a reader may not write it: it keeps its own set instead
        else:
            self._discard()

    def _mismatch(self, seen: Binding | None) -> str | None:
        if seen is None:
            return "it records no ledger it covers"
        steward, length, head = seen
        if length == 0:
            return None  # covers nothing, so trusts nothing
        if steward != self.steward:
            return f"it covers steward {steward!r}'s ledger, not {self.steward!r}'s"
        assert self._head_at is not None
        try:
            actual = self._head_at(length)
        except PoolError:
            actual = None
        if actual is None:
            return f"it covers {length} entries and the ledger has fewer"
        if actual != head:
            return f"the ledger's head at {length} is not the head it covers"
        return None

    def _ensure_checked(self) -> None:
        if not self._checked:
            self._check()

    def head(self, length: int) -> bytes:
        """The bound ledger's head at `length`, to record with the rows that cover it."""
        if length == 0 or self._head_at is None:
            # An index bound to no ledger (a verifier's private one) records none: no
            # bound index ever trusts it, since it names no steward.
            return GENESIS
        found = self._head_at(length)
        if found is None:
            raise StoreError(f"{self.where}: the ledger has no head at {length} to record")
        return found

    @property
    def covers(self) -> int:
        """The ledger length the stored rows were written through (0 for a new index, or
        one that does not cover this ledger: DESIGN.md §4)."""
        self._ensure_checked()
        return self._covers() if self._usable else 0

    def rebase(self, length: int) -> bool:
        """Trust the rows below `length` only, the length the fold starts from. False
        (nothing changed) when the index does not reach `length` (DESIGN.md §4)."""
        if self.covers < length:
            return False
        self._rebase(length)
        self.base = length
        return True

    def take_over(self, closed: Mapping[str, tuple[int, int]], length: int) -> None:
        """Hold the released claims of a fold that reached `length` with `closed` in memory:
        a replay of the same ledger under another period schedule, whose released claims
        are the same (§6.4; DESIGN.md §3, budget periods). The stored rows are facts about
        the ledger whoever wrote them, and on a store shared by replicas another replica may
        have written past this one's fold, or this fold may have read past the rows: they
        are trusted to the shorter of the two lengths, and the fold's rows after it wait for
        the next flush. Raises `ValueError` when the stored rows are not
        the fold's."""
        reach, before = min(self.covers, length), self.base
        if not self.rebase(reach):
            raise ValueError(f"the claim index does not reach {reach}")
        stored = self._count()
        earlier = sum(1 for seqs in closed.values() if seqs[1] < reach)
        if stored != earlier:
            self.base = before
            raise ValueError(
                f"the claim index holds {stored} released claims below {reach}, the fold {earlier}"
            )
        self._pending = {c: seqs for c, seqs in closed.items() if seqs[1] >= reach}
        self._batch = bool(self._pending)

    def reset(self) -> None:
        """Start again from nothing, for a replay from entry 0 (DESIGN.md §4)."""
        self._ensure_checked()
        self._reset()
        self._pending.clear()
        self.base = 0
        self._usable = True

    def recorded(self) -> Binding | None:
        """The steward, length and head the stored rows say they cover, as recorded and not
        yet checked against any ledger (DESIGN.md §4); None where nothing is recorded."""
        return self._binding()

    def _binding(self) -> Binding | None:
        """The steward, length and head the stored rows cover, as recorded."""
        raise NotImplementedError

    def _covers(self) -> int:
        raise NotImplementedError

    def _rebase(self, length: int) -> None:
        raise NotImplementedError

    def _reset(self) -> None:
        raise NotImplementedError

    def _discard(self) -> None:
        """Drop every stored row and the binding: they are not this ledger's."""
        self.reset()

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
        """Write the buffered rows released below `length` and the length they cover, in one
        transaction. Rows at `length` or later belong to a batch whose append is still under
        way: they stay buffered, since that batch may yet be taken back."""
        later = {c: s for c, s in self._pending.items() if s[1] >= length}
        self._batch = bool(later)
        if self.read_only:
            return  # a reader keeps its tail's rows in memory
        rows = [(c, a, r) for c, (a, r) in self._pending.items() if r < length]
        try:
            self._write(rows, length)
        except StoreError as exc:
            # The ledger's entries are durable already: the rows stay buffered and go with
            # the next commit. A restart finds the index behind and rebuilds it (a cache).
            log.error("%s: the claim index could not be written: %s", self.where, exc)
            return
        self._pending = later
        self.base = length

    def items(self) -> Iterator[tuple[str, tuple[int, int]]]:
        """Every released claim the index trusts, stored and buffered."""
        for claim, a, r in self._stored():
            yield claim, (a, r)
        yield from self._pending.items()

    def __len__(self) -> int:
        return self._count() + len(self._pending)
