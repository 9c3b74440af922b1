"""The one fold from events to usage, shared by replay and by a live pool (§6.1, §6.2, §6.4).

Admitted reserves the estimate and holds the devices; Released replaces the reservation by
the actual figure (`spent += actual - reserved`) and frees the devices. A stream that admits
a claim id twice, or releases a claim never admitted or already released, is a history
that did not happen: it is refused at its index, never folded as a shorter one.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import NamedTuple

from joulepool.errors import LedgerRefused
from joulepool.estimate import Observation
from joulepool.events import Admitted, Event, Released
from joulepool.grade import Energy, Grade
from joulepool.ledger.entry import brief
from joulepool.tree import Tree, Usage

INCONSISTENT = "inconsistent_stream"


class OpenClaim(NamedTuple):
    """A running claim: its admission and the ledger index it was admitted at (§6.2)."""

    admitted: Admitted
    seq: int


class ClosedClaim(NamedTuple):
    """Where a released claim's two entries stand in the ledger."""

    admitted_seq: int
    released_seq: int


class LedgerState:
    """Usage, open claims and history, as folded from a ledger's events in order (§6.1)."""

    __slots__ = ("_closed", "_history", "_journal", "_length", "_open", "usage")

    def __init__(self, tree: Tree) -> None:
        self.usage = Usage(tree)
        # Plain tuples, named only on the way out: the fold stores one an entry, and a
        # named tuple's constructor costs ten times a tuple display.
        self._open: dict[str, tuple[Admitted, int]] = {}
        self._closed: dict[str, tuple[int, int]] = {}
        # class -> [(entitlement, actual uj, actual grade)], kept as plain tuples to stay small.
        self._history: dict[str, list[tuple[str, int, Grade]]] = {}
        self._length = 0
        self._journal: list[tuple[Event, tuple[Admitted, int] | None]] | None = None

    @property
    def length(self) -> int:
        """How many events have been folded: the next entry's index."""
        return self._length

    def refusal(self, event: Event) -> str | None:
        """Why `event` would be inconsistent after what was folded, or None (§6.4)."""
        if isinstance(event, Admitted):
            if event.claim in self._open:
                return f"claim {brief(event.claim)} is already admitted and running"
            if event.claim in self._closed:
                return f"claim {brief(event.claim)} was admitted and released before"
            return None
        if event.claim in self._closed:
            return f"claim {brief(event.claim)} was released already"
        if event.claim not in self._open:
            return f"claim {brief(event.claim)} was never admitted"
        return None

    def apply(self, event: Event) -> None:
        """Fold one event at index `length`, refusing an inconsistent one there (§6.2, §6.4)."""
        seq = self._length
        claim = event.claim
        running = None
        if isinstance(event, Admitted):
            if claim in self._open or claim in self._closed:
                raise LedgerRefused(seq, INCONSISTENT, self.refusal(event) or "")
            self._open[claim] = (event, seq)
            # A running claim's reservation counts as spent, reserved and held (API.md).
            self._hold(event, spent_uj=event.reserved.uj, sign=+1)
        else:
            running = self._open.pop(claim, None)
            if running is None:
                raise LedgerRefused(seq, INCONSISTENT, self.refusal(event) or "")
            self._release(running, event, seq)
        if self._journal is not None:
            self._journal.append((event, running))
        self._length = seq + 1

    def _release(self, running: tuple[Admitted, int], event: Released, seq: int) -> None:
        adm, admitted_seq = running
        # The actual figure replaces the reservation; it is not added to it (§6.2).
        self._hold(adm, spent_uj=event.actual.uj - adm.reserved.uj, sign=-1)
        self._closed[event.claim] = (admitted_seq, seq)
        if adm.class_ is not None:
            self._history.setdefault(adm.class_, []).append(
                (adm.entitlement, event.actual.uj, event.actual.grade)
            )

    def _hold(self, adm: Admitted, *, spent_uj: int, sign: int) -> None:
        """Hold (sign +1) or lift (-1) a claim's reservation and devices, and move spent."""
        self.usage.move(
            adm.entitlement,
            spent_uj=spent_uj,
            reserved_uj=sign * adm.reserved.uj,
            held_devices=sign * adm.devices,
            running_claims=sign,
        )

    def begin(self) -> None:
        """Start a batch whose events can all be taken back, for an append that may fail."""
        self._journal = []

    def commit(self) -> None:
        """The batch is durable: forget how to take it back."""
        self._journal = None

    def rollback(self) -> None:
        """Take back every event folded since `begin()`, newest first: a failed append
        never happened, so the state must be exactly what it was before."""
        journal, self._journal = self._journal or [], None
        for event, running in reversed(journal):
            self._length -= 1
            if isinstance(event, Admitted):
                del self._open[event.claim]
                self._hold(event, spent_uj=-event.reserved.uj, sign=-1)
                continue
            assert running is not None
            adm = running[0]
            del self._closed[event.claim]
            self._open[event.claim] = running
            self._hold(adm, spent_uj=adm.reserved.uj - event.actual.uj, sign=+1)
            if adm.class_ is not None:
                self._history[adm.class_].pop()

    def open_claim(self, claim_id: str) -> OpenClaim | None:
        """The running claim of that id, or None."""
        running = self._open.get(claim_id)
        return None if running is None else OpenClaim(*running)

    def closed_claim(self, claim_id: str) -> ClosedClaim | None:
        """The released claim of that id, or None."""
        closed = self._closed.get(claim_id)
        return None if closed is None else ClosedClaim(*closed)

    def knows(self, claim_id: str) -> bool:
        """Whether the ledger ever admitted this claim id (§6.4: ids are never reused)."""
        return claim_id in self._open or claim_id in self._closed

    def open_claims(self) -> list[str]:
        """Ids of claims still running, sorted: they keep their reservations (§6.2)."""
        return sorted(self._open)

    def running(self) -> Iterator[OpenClaim]:
        """Every running claim, in admission order."""
        return itertools.starmap(OpenClaim, self._open.values())

    def history(self, class_: str) -> Iterator[Observation]:
        """The released claims that declared exactly `class_`, in ledger order (§2.6)."""
        for entitlement, uj, grade in self._history.get(class_, ()):
            yield Observation(class_, entitlement, Energy(uj, grade))

    def rebind(self, tree: Tree) -> None:
        """Group the same figures by a reloaded tree; the ledger is unchanged (§6.1)."""
        self.usage = self.usage.rebind(tree)
