"""The one fold from events to usage, shared by replay and by a live pool (§6.1, §6.2, §6.4).

Admitted reserves the estimate and holds the devices; Released replaces the reservation by
the actual figure (`spent += actual - reserved`) and frees the devices. A stream that admits
a claim id twice, or releases a claim never admitted or already released, is a history
that did not happen: it is refused at its index, never folded as a shorter one.

Budget periods (DESIGN.md §3): a claim belongs for good to the period holding its
`Admitted` entry's `at_ms`. Beside the all-time usage the fold keeps, per period and per
entitlement, three sums (charged actuals, running reservations, claims admitted): bounded
by periods x entitlements, never a list of entries. A decision reads `current(at_ms)`, the
period's spending with every open claim's devices, kept up to date by the same moves.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

from joulepool.errors import LedgerRefused
from joulepool.estimate import Tally
from joulepool.events import Admitted, Event, Released
from joulepool.ledger.entry import brief
from joulepool.periods import NONE, Period, Schedule
from joulepool.tree import EntitlementUsage, Tree, Usage

if TYPE_CHECKING:
    from joulepool.ledger.released import ReleasedClaims

INCONSISTENT = "inconsistent_stream"


Journal = tuple[Event, tuple[Admitted, int] | None, int, Tally | None]


class OpenClaim(NamedTuple):
    """A running claim: its admission and the ledger index it was admitted at (§6.2)."""

    admitted: Admitted
    seq: int


class ClosedClaim(NamedTuple):
    """Where a released claim's two entries stand in the ledger."""

    admitted_seq: int
    released_seq: int


class PeriodFigures(NamedTuple):
    """One entitlement's sums in one period (DESIGN.md §3, "budget periods")."""

    period: Period
    charged_uj: int
    reserved_uj: int
    claims: int

    @property
    def committed_uj(self) -> int:
        """What admission compares with the guarantee: charged plus reserved."""
        return self.charged_uj + self.reserved_uj


class LedgerState:
    """Usage, open claims and history, as folded from a ledger's events in order (§6.1)."""

    __slots__ = (
        "_closed",
        "_evidence",
        "_journal",
        "_length",
        "_open",
        "_periods",
        "_view",
        "last_at_ms",
        "schedule",
        "usage",
    )

    def __init__(
        self, tree: Tree, schedule: Schedule = NONE, claims: ReleasedClaims | None = None
    ) -> None:
        self.schedule = schedule
        # All time: what `replay` reports, and the devices and running claims of every period.
        self.usage = Usage(tree)
        # period index -> entitlement -> [charged uj, reserved uj, claims admitted].
        self._periods: dict[int, dict[str, list[int]]] = {}
        # The period decisions read, kept moving with the fold once built (see `current`).
        self._view: tuple[int, Usage] | None = None
        # The writer keeps at_ms non-decreasing from here (DESIGN.md §3).
        self.last_at_ms = 0
        # Plain tuples, named only on the way out: the fold stores one an entry, and a
        # named tuple's constructor costs ten times a tuple display.
        self._open: dict[str, tuple[Admitted, int]] = {}
        # Released claims: what grows with history, so on disk where a store gives an
        # index (`stores.claim_index`), in memory otherwise (§6.4).
        self._closed: dict[str, tuple[int, int]] | ReleasedClaims = (
            claims if claims is not None else {}
        )
        # class -> entitlement -> what §2.6 derives from: counts and extremes, bounded by
        # classes x entitlements however many claims are released.
        self._evidence: dict[str, dict[str, Tally]] = {}
        self._length = 0
        # Per event folded in a batch: the event, the claim it released, the clock before
        # it, and the tally its release changed as it was before (None: there was none).
        self._journal: list[Journal] | None = None

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
        running = before = None
        if isinstance(event, Admitted):
            if claim in self._open or claim in self._closed:
                raise LedgerRefused(seq, INCONSISTENT, self.refusal(event) or "")
            self._open[claim] = (event, seq)
            # A running claim's reservation counts as spent, reserved and held (API.md).
            self._hold(event, charged_uj=0, reserved_uj=event.reserved.uj, sign=+1, admitted=1)
        else:
            running = self._open.pop(claim, None)
            if running is None:
                raise LedgerRefused(seq, INCONSISTENT, self.refusal(event) or "")
            before = self._release(running, event, seq)
        if self._journal is not None:
            self._journal.append((event, running, self.last_at_ms, before))
        self.last_at_ms = max(self.last_at_ms, event.at_ms)
        self._length = seq + 1

    def _release(self, running: tuple[Admitted, int], event: Released, seq: int) -> Tally | None:
        adm, admitted_seq = running
        # The actual figure replaces the reservation; it is not added to it (§6.2), and it
        # counts in the period of the admission, not of the release (DESIGN.md §3).
        self._hold(adm, charged_uj=event.actual.uj, reserved_uj=-adm.reserved.uj, sign=-1)
        self._closed[event.claim] = (admitted_seq, seq)
        if adm.class_ is None:
            return None
        tallies = self._evidence.setdefault(adm.class_, {})
        counted = tallies.get(adm.entitlement)
        # Extremes cannot be subtracted back out: a batch that may fail keeps the old tally.
        before = None if counted is None or self._journal is None else counted.copy()
        if counted is None:
            counted = tallies[adm.entitlement] = Tally()
        counted.add(event.actual)
        return before

    def _hold(
        self, adm: Admitted, *, charged_uj: int, reserved_uj: int, sign: int, admitted: int = 0
    ) -> None:
        """Hold (sign +1) or lift (-1) a claim's devices; move its charged and reserved energy
        in all-time usage, in its own period's sums and in the decisions' view (DESIGN.md §3).

        A claim counts in the period of its admission; its devices are held now, in every
        period's view.
        """
        ent = adm.entitlement
        spent = charged_uj + reserved_uj
        self.usage.move(
            ent,
            spent_uj=spent,
            reserved_uj=reserved_uj,
            held_devices=sign * adm.devices,
            running_claims=sign,
        )
        index = self.schedule.index_at(adm.at_ms)
        sums = self._periods.setdefault(index, {}).get(ent)
        if sums is None:
            sums = self._periods[index][ent] = [0, 0, 0]
        sums[0] += charged_uj
        sums[1] += reserved_uj
        sums[2] += admitted
        view = self._view
        if view is not None and view[1] is not self.usage:
            own = view[0] == index
            view[1].move(
                ent,
                spent_uj=spent if own else 0,
                reserved_uj=reserved_uj if own else 0,
                held_devices=sign * adm.devices,
                running_claims=sign,
            )

    def begin(self) -> None:
        """Start a batch whose events can all be taken back, for an append that may fail.
        Events of earlier batches whose appends are still under way stay journaled: a batch
        decided while an earlier one is written rests on it (DESIGN.md §5)."""
        if self._journal is None:
            self._journal = []
        if not isinstance(self._closed, dict):
            self._closed.begin()

    def commit(self, length: int | None = None) -> None:
        """The events below `length` (all of them by default) are durable: forget how to take
        them back, and write their released claims to the claim index in the same group
        commit. Later events stay journaled, so a failing later append can still be undone."""
        end = self._length if length is None else length
        journal = self._journal
        if journal is not None:
            del journal[: len(journal) - (self._length - end)]
            if not journal:
                self._journal = None
        if not isinstance(self._closed, dict):
            self._closed.flush(end)

    def flush_claims(self) -> None:
        """Write buffered released claims to the claim index, covering this length."""
        if not isinstance(self._closed, dict):
            self._closed.flush(self._length)

    def keep_released_in(self, claims: ReleasedClaims) -> None:
        """Hold the released claims in `claims` instead of the heap: an index holding these
        (a replay of the same ledger under another period schedule, whose released claims
        are the same; §6.4), to where it reaches (`ReleasedClaims.take_over`). Raises
        `ValueError` when it does not."""
        if not isinstance(self._closed, dict):
            raise ValueError("the released claims are already in an index")
        claims.take_over(self._closed, self._length)
        self._closed = claims

    @property
    def claims(self) -> ReleasedClaims | None:
        """The on-disk index of released claims, where the fold keeps them there."""
        return None if isinstance(self._closed, dict) else self._closed

    def rollback(self, length: int | None = None) -> None:
        """Take back every event journaled at index `length` or later (every journaled one by
        default), newest first: a failed append never happened, so the state must be exactly
        what it was before it, and so must be every decision resting on it."""
        journal = self._journal or []
        end = self._length - len(journal) if length is None else length
        if end < self._length - len(journal):
            raise ValueError(f"events below {self._length - len(journal)} are durable already")
        while self._length > end:
            self._undo(journal.pop())
        if not journal:
            self._journal = None

    def _undo(self, journaled: Journal) -> None:
        event, running, last_at_ms, before = journaled
        self._length -= 1
        self.last_at_ms = last_at_ms
        if isinstance(event, Admitted):
            del self._open[event.claim]
            self._hold(event, charged_uj=0, reserved_uj=-event.reserved.uj, sign=-1, admitted=-1)
            return
        assert running is not None
        adm = running[0]
        del self._closed[event.claim]
        self._open[event.claim] = running
        self._hold(adm, charged_uj=-event.actual.uj, reserved_uj=adm.reserved.uj, sign=+1)
        if adm.class_ is not None:
            tallies = self._evidence[adm.class_]
            if before is None:
                del tallies[adm.entitlement]
                if not tallies:
                    del self._evidence[adm.class_]
            else:
                tallies[adm.entitlement] = before

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

    def evidence(self, class_: str, entitlement: str | None = None) -> Tally:
        """What the released claims that declared exactly `class_` (of `entitlement`, or of
        any) give §2.6 to derive from: a fresh tally the caller may keep."""
        tallies = self._evidence.get(class_, {})
        if entitlement is not None:
            counted = tallies.get(entitlement)
            return Tally() if counted is None else counted.copy()
        out = Tally()
        for counted in tallies.values():
            out.merge(counted)
        return out

    def classes(self) -> dict[str, dict[str, Tally]]:
        """Every class with released claims, per entitlement: copies (§2.6)."""
        return {c: {e: t.copy() for e, t in ts.items()} for c, ts in self._evidence.items()}

    def rebind(self, tree: Tree) -> None:
        """Group the same figures by a reloaded tree; the ledger is unchanged (§6.1)."""
        self.usage = self.usage.rebind(tree)
        self._view = None

    # -- budget periods (DESIGN.md §3) ---------------------------------------------------

    def current(self, at_ms: int) -> Usage:
        """The usage a decision at `at_ms` reads: `spent_uj` of the period holding `at_ms`
        and `held_devices` of every open claim, whatever its period (DESIGN.md §3).

        Kept moving with the fold until the clock enters another period; only then is it
        rebuilt, once, from the period's sums.
        """
        index = self.schedule.index_at(at_ms)
        view = self._view
        if view is None or view[0] != index:
            view = self._view = (index, self.usage_in(index))
        return view[1]

    def usage_in(self, index: int) -> Usage:
        """The usage of the period `index` (see `current`): the one answer every surface gives."""
        if self.schedule.kind == "none":
            return self.usage  # one period for all time: the all-time figures themselves
        view = self._view
        if view is not None and view[0] == index:
            return view[1]
        usage = Usage(self.usage.tree)
        sums = self._periods.get(index, {})
        # Every entitlement the ledger names is listed, spent or not (CONFORMANCE.md).
        for ent in self.usage.ids():
            now = self.usage.of(ent)
            charged, reserved, _ = sums.get(ent, (0, 0, 0))
            usage.move(
                ent,
                spent_uj=charged + reserved,
                reserved_uj=reserved,
                held_devices=now.held_devices,
                running_claims=now.running_claims,
            )
        return usage

    def figures_in(self, entitlement: str, index: int) -> EntitlementUsage:
        """One entitlement's figures in period `index` (DESIGN.md §3, API.md usage)."""
        return self.usage_in(index).of(entitlement)

    def periods_of(self, entitlement: str) -> list[PeriodFigures]:
        """Every period in which `entitlement` had a claim admitted, oldest first."""
        out = []
        for index in sorted(self._periods):
            sums = self._periods[index].get(entitlement)
            if sums is not None and sums[2] > 0:
                out.append(PeriodFigures(self.schedule.period(index), *sums))
        return out


class StateCopy(NamedTuple):
    """A consistent copy of a `LedgerState`, taken under the writer's lock in C-speed dict and
    list copies, so that encoding it (a state snapshot, DESIGN.md §4) can run outside it."""

    length: int
    last_at_ms: int
    usage: dict[str, tuple[int, int, int, int]]
    open: dict[str, tuple[Admitted, int]]
    closed: dict[str, tuple[int, int]] | None
    """None where the released claims are in the claim index, not in the snapshot."""
    evidence: dict[str, dict[str, Tally]]
    periods: dict[int, dict[str, list[int]]]
    bounds: tuple[int, int] | None = None
    """Where the entry before `length` lies in a ledger file (its first byte, the byte after
    its last), so a start reads only what follows; None for other stores (DESIGN.md §4)."""
    merkle: tuple[int, tuple[bytes, ...]] | None = None
    """The Merkle tree over the first `length` entries as `CompactRange.state()` (DESIGN.md
    §8); None in a snapshot written before the tree was kept."""


def capture(state: LedgerState) -> StateCopy:
    """Copy what a state snapshot holds; the caller holds the lock the fold runs under."""
    usage = {
        i: (f.spent_uj, f.reserved_uj, f.held_devices, f.running_claims)
        for i in state.usage.ids()
        for f in (state.usage.of(i),)
    }
    return StateCopy(
        state.length,
        state.last_at_ms,
        usage,
        state._open.copy(),
        state._closed.copy() if isinstance(state._closed, dict) else None,
        state.classes(),
        {p: {e: s.copy() for e, s in ents.items()} for p, ents in state._periods.items()},
    )


def restore(
    tree: Tree, schedule: Schedule, copy: StateCopy, claims: ReleasedClaims | None = None
) -> LedgerState:
    """A `LedgerState` holding exactly `copy`, to fold a ledger's tail onto (DESIGN.md §4).

    Raises `ValueError` (or `InvalidInput`, a figure below zero) on figures that cannot be a
    fold's; the caller then ignores the snapshot as a whole.
    """
    if copy.closed is None and claims is None:
        raise ValueError("its released claims are in a claim index, and none reaches it")
    state = LedgerState(tree, schedule, claims)
    for ent, (spent, reserved, held, running) in copy.usage.items():
        state.usage.move(
            ent, spent_uj=spent, reserved_uj=reserved, held_devices=held, running_claims=running
        )
    closed = copy.closed if copy.closed is not None else {}
    for claim, (_, seq) in copy.open.items():
        if claim in closed or not 0 <= seq < copy.length:
            raise ValueError(f"open claim {brief(claim)} at {seq} cannot be")
    for claim, (a, r) in closed.items():
        if not 0 <= a < r < copy.length:
            raise ValueError(f"closed claim {brief(claim)} at {a}, {r} cannot be")
    state._open = copy.open
    if copy.closed is not None:
        state._closed = copy.closed
    state._evidence = copy.evidence
    state._periods = copy.periods
    state.last_at_ms = copy.last_at_ms
    state._length = copy.length
    return state
