"""`Pool`: the tree, the steward's key and a ledger store, as one admission controller.

The stateful facade of DESIGN.md §5. It owns the one lock, the clock and the store; the
decisions it makes are the pure `decide()` of §4 against usage that the same fold as replay
keeps up to date, so a live pool and a replayed one cannot disagree (§6.1).

The commit path has two halves (DESIGN.md §5). `decide` decides a batch of operations in
order, each against the state its predecessors left, including earlier batches whose
appends are still under way, and seals their entries; `persist` appends a batch with one
fsync and only then gives its outcomes. So a batch is decided while the one before it
syncs. The failure rule: no outcome is given before its decision and every decision it rests
on are durable; an append that fails takes back its batch and every batch decided on top of
it, exactly (the fold's journal), refuses all of them with the error, and has the store read
again before the next decision. Readers wait for a state with nothing left to take back.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from joulepool.admission import Admit, Queue, QueueReason, Verdict, decide
from joulepool.claim import Claim
from joulepool.claim_id import check_admitted_id
from joulepool.errors import ClaimError, ClockFault, InvalidInput, PoolError, StoreError, utc_ms
from joulepool.estimate import Declined, Derived, Tally, decide_estimate
from joulepool.events import Admitted, Event, Released
from joulepool.grade import Energy
from joulepool.idle import IdlePolicy
from joulepool.ledger import SNAPSHOT_EVERY as SNAPSHOT_EVERY
from joulepool.ledger import SNAPSHOT_SECONDS as SNAPSHOT_SECONDS
from joulepool.ledger.configs import ConfigHistory
from joulepool.ledger.cose import GENESIS, open_envelope
from joulepool.ledger.entry import brief, event_of, seal_entry
from joulepool.ledger.fold import LedgerState, PeriodFigures, capture
from joulepool.ledger.keys import KeyPair
from joulepool.ledger.merkle import CompactRange
from joulepool.ledger.released import ReleasedClaims
from joulepool.ledger.replay import Replayer, replay
from joulepool.ledger.rollback import HighWater, Mark
from joulepool.ledger.rotation import KeySchedule
from joulepool.ledger.snapshot import (
    SnapshotRefused,
    Snapshots,
    decode_copy,
    decode_state,
    encode_state,
    open_snapshot,
    seal_snapshot,
)
from joulepool.live import (
    DEFAULT_SAMPLE_PERIOD_MS,
    Job,
    LiveBook,
    Progress,
    Projection,
    Reading,
    WaitReport,
    project,
    window_ms,
)
from joulepool.periods import NONE, Period, Schedule
from joulepool.stores.base import Store, head_at, refuse_rollback
from joulepool.tree import EntitlementUsage, Tree

log = logging.getLogger("joulepool.pool")


def wall_clock_ms() -> int:
    """Milliseconds since the Unix epoch (DESIGN.md §2: `at_ms`)."""
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    """Milliseconds on a clock no one can set (DESIGN.md §3: durations on real elapsed time)."""
    return time.monotonic_ns() // 1_000_000


CLOCK_STEP_MS = 5_000
"""The largest clock step absorbed (DESIGN.md §3): behind the last entry, an entry is dated
at the last entry's `at_ms`; against the monotonic clock, a step is let through. Beyond it,
a time fault is reported and nothing is appended."""

READING_AHEAD_MS = 60_000
"""How far ahead of this clock a meter reading may be dated (a node's clock may lead)."""

SLEW_DIVISOR = 2_000
"""A clock may drift from the monotonic one by 1 ms in this many (500 ppm, NTP's most) on
top of `CLOCK_STEP_MS` before the difference is a step."""

MAX_CLOCK_GAP_MS = 31 * 86_400_000
"""`max_clock_gap`'s default (DESIGN.md §3): a clock further ahead of the last entry than this
at start is a `clock_jump` until an operator accepts it."""


@dataclass(frozen=True, slots=True)
class ClockAcceptance:
    """An operator's `pool ledger accept-clock` (DESIGN.md §3): the clock read `at_ms` when
    the ledger stood at `length` entries with `head`, and was declared right."""

    at_ms: int
    length: int
    head: bytes


BUDGET_REASONS = frozenset(
    {
        QueueReason.guarantee_exhausted_may_not_borrow,
        QueueReason.limit_reached,
        QueueReason.surplus_insufficient,
    }
)
"""Queue reasons that the period's renewal ends without any release (DESIGN.md §3)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """A verdict, and for an admission the ledger index of its entry (API.md).

    `at_ms` is the instant it was decided at (an admission's entry carries it). A Queue the
    period's budget caused carries `period_end_ms`, when the period renews (DESIGN.md §3).
    """

    claim: str
    verdict: Verdict
    seq: int | None = None
    at_ms: int | None = None
    period_end_ms: int | None = None

    def to_json(self) -> dict[str, object]:
        """API.md's `POST /v1/claims` answer: the `decide` result, the claim, its entry."""
        out: dict[str, object] = {"claim": self.claim, **self.verdict.to_json()}
        if self.seq is not None:
            out["seq"] = self.seq
        if self.period_end_ms is not None:
            out["period_end_ms"] = self.period_end_ms
        return out


@dataclass(frozen=True, slots=True)
class Release:
    """A release recorded at `seq`, charging `charged` in place of the reservation (§6.2)."""

    claim: str
    seq: int
    charged: Energy


@dataclass(frozen=True, slots=True)
class ClaimState:
    """Where a claim stands: running with its reservation, or released with its actual."""

    claim: str
    admitted: Admitted
    admitted_seq: int
    released: Released | None = None
    released_seq: int | None = None

    @property
    def running(self) -> bool:
        """Still holding its reservation and devices (§6.2)."""
        return self.released is None


@dataclass(frozen=True, slots=True)
class ReleaseRequest:
    """A request to release `claim`, charging `actual` (§6.2), for `Pool.apply`."""

    claim: str
    actual: Energy


Outcome = Decision | Release | PoolError
"""What one operation of `Pool.apply` came to: its result, or the error that refused it."""


class Rules(Protocol):
    """What a deployment's configuration puts in force in a pool (§6.1; DESIGN.md §3): the
    deployment's `Config` is one, passed whole; `Pool` sits below the deployment shell, so
    it names only what it reads."""

    @property
    def tree(self) -> Tree:
        """The entitlement tree (§2.1)."""
        ...

    @property
    def period(self) -> Schedule:
        """The budget period schedule (DESIGN.md §3)."""
        ...

    @property
    def idle(self) -> IdlePolicy:
        """The idle policy (§2.7)."""
        ...

    @property
    def required_evidence(self) -> int:
        """Released claims a class needs before its estimate is earned (§2.6)."""
        ...


class Batch:
    """Operations decided together and the entries they sealed, waiting for the one append
    that makes them durable (DESIGN.md §5): what `Pool.decide` returns and `Pool.persist`
    takes. `start`, `head` and `merkle` are the ledger's length, head and Merkle tree
    (DESIGN.md §8) before its first entry; `decided` is False for one left to be decided
    inside the append's critical section."""

    __slots__ = ("decided", "head", "merkle", "ops", "outcomes", "raws", "settled", "start")

    def __init__(self, ops: Sequence[Claim | ReleaseRequest]) -> None:
        self.ops = ops
        self.outcomes: list[Outcome] = []
        self.raws: list[bytes] = []
        self.start = 0
        self.head = GENESIS
        self.merkle: tuple[int, tuple[bytes, ...]] = (0, ())
        self.decided = True
        self.settled = False

    def refuse(self, error: PoolError) -> None:
        """Nothing decided in the batch stands: every operation's outcome is `error`."""
        self.outcomes = [error] * len(self.ops)
        self.raws = []
        self.settled = True


def _store_error(exc: Exception) -> PoolError:
    return exc if isinstance(exc, PoolError) else StoreError(f"append failed: {exc!r}")


class Pool:
    """An admission controller over one ledger (standard §3, §4, §6)."""

    def __init__(
        self,
        tree: Tree,
        key: KeyPair,
        store: Store,
        *,
        idle_policy: IdlePolicy | None = None,
        required_evidence: int = 3,
        clock: Callable[[], int] = wall_clock_ms,
        period: Schedule = NONE,
        replay_workers: int = 1,
        progress: Callable[[int], None] | None = None,
        acknowledged: Sequence[Mark] = (),
        read_only: bool = False,
        keys: KeySchedule | None = None,
        snapshots: Snapshots | None = None,
        snapshot_every: int = SNAPSHOT_EVERY,
        snapshot_seconds: float = SNAPSHOT_SECONDS,
        claims: ReleasedClaims | None = None,
        monotonic: Callable[[], int] = monotonic_ms,
        max_clock_gap_ms: int | None = None,
        watch_clock_steps: bool = False,
        accepted_clock: Callable[[], ClockAcceptance | None] | None = None,
    ) -> None:
        # A reader (`pool usage` beside `pool serve`) seals nothing, so needs no secret.
        if key.seed is None and not read_only:
            raise PoolError("the steward's key must include its secret to seal entries")
        self.read_only = read_only
        self.key = key
        # Every configuration put in force, kept beside the ledger (docs/reliability.md §18);
        # the opener sets it, and a bare Pool has none, so reports name no configuration.
        self.configs: ConfigHistory | None = None
        self.store = store
        self.idle_policy = idle_policy if idle_policy is not None else IdlePolicy()
        self.required_evidence = required_evidence
        self._clock = clock
        self._monotonic = monotonic
        self._watch_steps = watch_clock_steps
        self._accepted_clock = accepted_clock
        # The last wall and monotonic readings that agreed: a step is measured from them.
        self._wall_seen, self._mono_seen = clock(), monotonic()
        self.started_mono = self._mono_seen
        # A clock_jump stands from its detection until an acceptance covers it.
        self._jump: ClockFault | None = None
        self._jump_at_start = False
        self._jump_length = 0
        # Claims admitted by this process: the monotonic instant of each admission, so a
        # duration is real elapsed time, not a difference of clamped `at_ms`.
        self._admitted_mono: dict[str, int] = {}
        # Running claims' readings and progress: soft state, never entries (DESIGN.md §7).
        self.live = LiveBook()
        self._running_cache: tuple[tuple[int, int], list[ClaimState]] | None = None
        self._live_lock = threading.Lock()
        # Decisions, appends and readers take it; readers wait for a settled state under it.
        self._commit_lock = threading.RLock()
        self._changed = threading.Condition(self._commit_lock)
        self._pending: deque[Batch] = deque()
        self._readers = 0
        self._reread = False
        self._snapshot_wanted = False
        self.appends = 0
        self._snapshots = snapshots
        self._snapshot_every = max(1, snapshot_every)
        self._snapshot_seconds = snapshot_seconds
        self._snapshot_thread: threading.Thread | None = None
        self.snapshot_warnings: list[str] = []
        self._claims = claims
        # The steward's keys over time (DESIGN.md §4, key rotation): each entry verifies
        # under the key in force at its index; the one sealing from here is the last.
        schedule = keys if keys is not None else KeySchedule(key.kid, key.public_key)
        # The newest snapshot that verifies and matches the ledger's head at its length; a
        # signed one longer than the ledger is evidence of a rollback, like a receipt.
        start, marks = self._verified_snapshot(store, key.kid, schedule, tree, period)
        # A restart never hands a tenant its spent guarantee back (§6.1): not by replaying a
        # damaged ledger, and not by replaying one shorter than what was acknowledged.
        refuse_rollback(store, [*acknowledged, *marks])
        self.started_from = start[0].length if start is not None else 0
        if (shared := store.shared) is not None and not read_only:
            shared.seal_with(key.public_key)
        index = claims
        if start is None and claims is not None:
            if read_only:
                index = None  # a reader replaying from 0 keeps its own set in memory
            else:
                claims.reset()  # rebuilt from the ledger as it replays
        if not read_only and key.public_key != schedule.current_key:
            raise PoolError(
                f"the steward key {key.public_key.hex()} is not the key in force "
                f"({schedule.current_key.hex()}) after {len(schedule.statements)} rotations"
            )
        self._replayer = replay(
            store.entries(self.started_from),
            key.kid,
            schedule,
            tree,
            schedule=period,
            workers=replay_workers,
            progress=progress,
            start=start,
            claims=index,
        )
        if not read_only:
            self.state.flush_claims()
        self._snapshot_due = self._replayer.length + self._snapshot_every
        self._snapshot_deadline = time.monotonic() + snapshot_seconds
        self._snapshot_length = self.started_from
        if max_clock_gap_ms is not None and not read_only:
            self._check_gap_at_start(max_clock_gap_ms)

    def _verified_snapshot(
        self, store: Store, steward: str, keys: KeySchedule, tree: Tree, period: Schedule
    ) -> tuple[tuple[LedgerState, bytes, CompactRange] | None, list[Mark]]:
        """The state and head of the newest snapshot that counts (DESIGN.md §4), and the
        marks of signed snapshots longer than the ledger. One that fails is logged and
        skipped, never used in part: it costs time, never a wrong usage."""
        if self._snapshots is None:
            return None, []
        marks: list[Mark] = []
        for length, raw in self._snapshots.newest_first():
            where = f"snapshot at {length} in {self._snapshots.where}"
            try:
                if isinstance(raw, SnapshotRefused):
                    raise raw
                snap = open_snapshot(raw, steward, keys)
                if snap.length != length:
                    raise SnapshotRefused(f"it holds length {snap.length}, not its name's")
                copy = decode_copy(snap)
                offsets = store.offsets
                if copy.bounds is not None and offsets is not None:
                    # A ledger file is read from where the snapshot ends, once the bytes
                    # there are the entry whose address is the snapshot's head.
                    offsets.resume(snap.length, *copy.bounds, snap.head)
                if snap.length > len(store):
                    marks.append(Mark(f"its {where}", HighWater(snap.length, snap.head)))
                    continue
                if head_at(store, snap.length) != snap.head:
                    raise SnapshotRefused("its head is not the ledger's head at its length")
                merkle = self._merkle_of(store, snap.length, copy.merkle, where)
                claims = self._claims
                reaches = claims is not None and claims.covers >= snap.length
                state = decode_state(snap, tree, period, claims if reaches else None, copy)
                if state.claims is not None:
                    state.claims.rebase(snap.length)  # rows past it are the tail's again
                return (state, snap.head, merkle), marks
            except SnapshotRefused as exc:
                warning = f"{where} ignored: {exc}"
                self.snapshot_warnings.append(warning)
                log.warning("%s", warning)
        return None, marks

    @staticmethod
    def _merkle_of(
        store: Store, length: int, kept: tuple[int, tuple[bytes, ...]] | None, where: str
    ) -> CompactRange:
        """The Merkle tree over the first `length` entries (DESIGN.md §8): the snapshot's,
        or, for a snapshot written before the tree was kept, rebuilt from the entries' bytes
        as stored (the tree's very definition; one hash an entry, no replay of the fold)."""
        if kept is not None:
            return CompactRange.from_state(*kept)
        log.info("%s keeps no Merkle tree (an earlier version's): rebuilt from the ledger", where)
        return CompactRange.from_leaves(itertools.islice(store.entries(0), length))

    # -- what the ledger says -------------------------------------------------------------

    @property
    def steward(self) -> str:
        """The steward's identifier: the kid of every entry."""
        return self.key.kid

    @property
    def keys(self) -> KeySchedule:
        """The steward's verified keys over time (DESIGN.md §4, key rotation)."""
        return self._replayer.keys

    def rotate_key(
        self, put_in_force: Callable[[int], KeyPair], incoming_key: bytes | None = None
    ) -> int:
        """Hand sealing to a new key from the next entry on (DESIGN.md §4, key rotation).

        `put_in_force(length)` writes the rotation statement for `from_seq = length` (adding
        it to `keys`) and returns the incoming key; it runs under the commit lock, so no
        entry is sealed between the statement and the switch. A store shared by replicas
        records `incoming_key` (its public key) first, so a replica that missed the rotation
        seals nothing after it; if the statement then fails, the record is taken back.
        Returns that `from_seq`.
        """
        if self.read_only:
            raise StoreError("a read-only pool seals nothing, so rotates no key")
        with self._settled():
            shared = self.store.shared
            if shared is not None:
                self.catch_up()  # the statement starts at the shared ledger's length
            length = self._replayer.length
            if shared is not None and incoming_key is not None:
                shared.record_rotation(incoming_key, length)
            try:
                incoming = put_in_force(length)
            except BaseException:
                if shared is not None and incoming_key is not None:
                    try:
                        shared.record_rotation(self.key.public_key, length)
                    except PoolError as exc:
                        # Every replica now refuses to seal: safe, and the next try of the
                        # same rotation finds its record already made.
                        log.error("the key rotation's record could not be taken back: %s", exc)
                raise
            if incoming.public_key != self.keys.key_at(length) or incoming.kid != self.steward:
                raise PoolError("the incoming key is not the one the rotation put in force")
            self.key = incoming
            return length

    @property
    def tree(self) -> Tree:
        """The entitlement tree in force."""
        return self._replayer.state.usage.tree

    @property
    def state(self) -> LedgerState:
        """The folded ledger: usage, running claims, history."""
        return self._replayer.state

    @property
    def length(self) -> int:
        """Entries in the ledger, all of them durable."""
        with self._settled():
            return self._replayer.length

    @property
    def head(self) -> bytes:
        """Content address of the last entry; the genesis sentinel when empty (DESIGN.md §4)."""
        with self._settled():
            return self._replayer.head

    @property
    def snapshots(self) -> Snapshots | None:
        """Where this pool keeps its state snapshots (DESIGN.md §4), or None: read by
        `/metrics` for the newest one's age."""
        return self._snapshots

    def snapshot(self) -> tuple[int, bytes]:
        """Length and head, read together."""
        with self._settled():
            return self._replayer.length, self._replayer.head

    def merkle_head(self) -> tuple[int, bytes]:
        """The Merkle tree's size and RFC 9162 root over the ledger's entries as stored,
        read together under the state a decision sees (DESIGN.md §8): what a checkpoint
        signs. The size is the ledger's length."""
        with self._settled():
            merkle = self._replayer.merkle
            return merkle.size, merkle.root()

    def catch_up(self) -> int:
        """Fold in what other replicas appended since this one last looked; the new length.

        A replica's reads are only as fresh as its last append (§6.1, DESIGN.md §6): a
        service that shares its store calls this before answering a read, so no replica
        answers from a view older than the request. A sole writer has nothing to read.
        """
        with self._settled():
            return self._catch_up()

    def _catch_up(self) -> int:
        for raw in self.store.entries(self._replayer.length):
            self._replayer.feed(raw)
        return self._replayer.length

    def head_at(self, length: int) -> bytes:
        """The ledger's head after its first `length` entries."""
        return head_at(self.store, length)

    @property
    def schedule(self) -> Schedule:
        """The budget period schedule in force (DESIGN.md §3)."""
        return self.state.schedule

    def now_ms(self) -> int:
        """The instant a decision made now would carry: the clock, never before the last
        entry's `at_ms`, so a clock stepping back cannot reopen a closed period (DESIGN.md §3)."""
        return max(self._clock(), self.state.last_at_ms)

    # -- time faults (DESIGN.md §3) --------------------------------------------------------

    def _check_gap_at_start(self, max_gap_ms: int) -> None:
        state = self.state
        if state.length == 0:
            return  # no entry dates the ledger yet: there is nothing to be ahead of
        wall, last = self._clock(), state.last_at_ms
        if wall - last <= max_gap_ms:
            return
        self._jump = ClockFault(
            "clock_jump",
            wall,
            last,
            f"the clock reads {utc_ms(wall)}, more than max_clock_gap ({max_gap_ms} ms) ahead "
            f"of the last entry at {utc_ms(last)}: nothing is appended until an operator "
            "runs `pool ledger accept-clock DIR` (or the clock is put right)",
        )
        self._jump_at_start = True
        self._jump_length = state.length
        self._accept_if_covered()

    def _accept_if_covered(self) -> bool:
        """Whether the standing `clock_jump` is covered by an operator's acceptance made on
        this ledger once the jump was seen (and, for a step while running, made after the
        step by the clock): then it is lifted."""
        fault = self._jump
        if fault is None or self._accepted_clock is None:
            return fault is None
        accepted = self._accepted_clock()
        if accepted is None:
            return False
        if not self._names_the_ledger(accepted):
            return False
        if not self._jump_at_start and accepted.at_ms < fault.clock_ms - CLOCK_STEP_MS:
            return False
        log.warning(
            "clock accepted by an operator at %s (ledger length %d): appending again",
            utc_ms(accepted.at_ms),
            accepted.length,
        )
        self._jump = None
        self._jump_at_start = False
        self._wall_seen, self._mono_seen = self._clock(), self._monotonic()
        return True

    def _names_the_ledger(self, accepted: ClockAcceptance) -> bool:
        """Whether `accepted` was made on this ledger no earlier than the standing jump was
        seen: a prefix of it, at least as long. Another replica may have appended since, so
        the acceptance is not spent by entries this writer has not read."""
        if accepted.length < self._jump_length:
            return False
        if accepted.length == self._replayer.length:
            return accepted.head == self._replayer.head
        try:
            return head_at(self.store, accepted.length) == accepted.head
        except (PoolError, IndexError, KeyError):
            return False  # not (yet) in the store this writer reads

    def clock_fault(self) -> ClockFault | None:
        """The time fault an append made now would meet, or None (DESIGN.md §3): what
        `/readyz` reports. A reader's clock dates nothing, so it has none."""
        if self.read_only:
            return None
        with self._commit_lock:
            try:
                self._append_instant()
            except ClockFault as exc:
                return exc
            return None

    def _append_instant(self) -> int:
        """The `at_ms` an entry sealed now carries, or the `ClockFault` that forbids sealing
        one (DESIGN.md §3): the clock, raised to the last entry's `at_ms` across a step of
        at most `CLOCK_STEP_MS` back; further behind is `clock_behind_ledger`; a standing
        jump not yet accepted is `clock_jump`."""
        wall = self._clock()
        if self._watch_steps and self._jump is None:
            mono = self._monotonic()
            expected = self._wall_seen + (mono - self._mono_seen)
            # NTP slews at most 500 ppm: over a long quiet spell that is no step.
            if abs(wall - expected) > CLOCK_STEP_MS + (mono - self._mono_seen) // SLEW_DIVISOR:
                self._jump = ClockFault(
                    "clock_jump",
                    wall,
                    self.state.last_at_ms,
                    f"the clock stepped from {utc_ms(expected)} to {utc_ms(wall)} against the "
                    "monotonic clock: nothing is appended until an operator runs "
                    "`pool ledger accept-clock DIR`",
                )
                self._jump_length = self._replayer.length
                log.error("%s: %s", self._jump.code, self._jump)
            else:
                # Measured from the last reading, so a slewing clock never adds up to a step.
                self._wall_seen, self._mono_seen = wall, mono
        if self._jump is not None and not self._accept_if_covered():
            fault = self._jump
            raise ClockFault(fault.code, fault.clock_ms, fault.ledger_ms, fault.detail)
        last = self.state.last_at_ms
        if wall < last - CLOCK_STEP_MS:
            raise ClockFault(
                "clock_behind_ledger",
                wall,
                last,
                f"the clock reads {utc_ms(wall)}, {last - wall} ms behind the last entry at "
                f"{utc_ms(last)}: nothing is appended until the clock is past "
                f"{utc_ms(last - CLOCK_STEP_MS)}",
            )
        return max(wall, last)

    def elapsed_since_admission_ms(self, claim_id: str, admitted: Admitted) -> int:
        """Real time since `claim_id` was admitted, never less than 0 (DESIGN.md §3:
        durations on real elapsed time, never on clamped `at_ms`).

        A claim this process admitted is timed on the monotonic clock. One admitted before it
        started has at least this process's own age behind it, and at least the wall clock's
        distance from its `at_ms` (the unclamped clock, never the instant an entry would
        carry now): the larger of the two.
        """
        mono = self._monotonic()
        with self._commit_lock:
            since = self._admitted_mono.get(claim_id)
        if since is not None:
            return max(0, mono - since)
        return max(0, mono - self.started_mono, self._clock() - admitted.at_ms)

    def period(self, index: int | None = None) -> Period:
        """The period of that index, or the current one (DESIGN.md §3)."""
        with self._settled():
            schedule = self.state.schedule
            return schedule.period_at(self.now_ms()) if index is None else schedule.period(index)

    def usage_of(self, entitlement: str, index: int | None = None) -> EntitlementUsage:
        """One entitlement's figures in a period (the current one by default): spent and
        reserved there, devices held and claims running now (DESIGN.md §3, API.md).

        The same figures a decision reads: every surface that reports usage comes here.
        """
        with self._settled():
            if index is None:
                return self.state.current(self.now_ms()).of(entitlement)
            return self.state.figures_in(entitlement, index)

    def report(
        self, entitlement: str, index: int | None = None, tree: Tree | None = None
    ) -> dict[str, Any]:
        """API.md's Entitlement with its `usage` in a period (the current one by default),
        the period named in it: the one usage answer of the CLI, HTTP and metrics. `tree` is
        the tree that judges the period (docs/reliability.md §18), the one in force if None."""
        with self._settled():
            ent = (self.tree if tree is None else tree)[entitlement]
            if index is None:
                index = self.state.schedule.index_at(self.now_ms())
            period = self.state.schedule.period(index)
            figures = self.usage_of(entitlement, index)
            return {**ent.to_json(), "usage": figures.to_json(ent.guarantee_uj, period.to_json())}

    def periods_of(self, entitlement: str) -> list[PeriodFigures]:
        """Each period in which `entitlement` had claims admitted, oldest first (DESIGN.md §3)."""
        with self._settled():
            return self.state.periods_of(entitlement)

    def claim_state(self, claim_id: str) -> ClaimState | None:
        """Where a claim stands, or None if the ledger never admitted it (§6.2)."""
        with self._settled():
            return self._claim_state(claim_id)

    def running_claims(self) -> list[ClaimState]:
        """Every running claim, in admission order (§6.2). Kept between calls while the
        ledger state is unchanged: a pass over thousands of claims builds none of them."""
        with self._settled():
            key = (id(self.state), self.state.length)
            cached = self._running_cache
            if cached is None or cached[0] != key:
                found = [
                    ClaimState(o.admitted.claim, o.admitted, o.seq) for o in self.state.running()
                ]
                cached = self._running_cache = (key, found)
            return list(cached[1])

    def _running(self, claim_id: str) -> ClaimState:
        found = self.claim_state(claim_id)
        if found is None:
            raise ClaimError("unknown_claim", f"no claim {claim_id!r} was admitted")
        if not found.running:
            raise ClaimError("already_released", f"claim {claim_id!r} is released")
        return found

    def record_reading(self, claim_id: str, reading: Reading, job: Job | None = None) -> None:
        """Keep a meter reading of a running claim (DESIGN.md §7): soft state, no entry.

        A reading dated further ahead of this clock than `READING_AHEAD_MS` is refused:
        it would stay fresh for as long as it is ahead."""
        state = self._running(claim_id)
        if reading.at_ms > self.now_ms() + READING_AHEAD_MS:
            raise InvalidInput("at_ms", f"{reading.at_ms} is ahead of this clock")
        with self._live_lock:
            self.live.reading(claim_id, reading, job, window_ms(self.idle_policy))
            self._project_now(state)

    def record_waiting(self, claim_id: str, waiting: WaitReport, job: Job | None = None) -> None:
        """Keep that a running claim's job waits for resources (DESIGN.md §7): soft state,
        what preemption decides for; a report dated ahead of this clock is refused."""
        self._running(claim_id)
        if waiting.at_ms > self.now_ms() + READING_AHEAD_MS:
            raise InvalidInput("at_ms", f"{waiting.at_ms} is ahead of this clock")
        with self._live_lock:
            self.live.waiting(claim_id, waiting, job)

    def record_progress(self, claim_id: str, progress: Progress) -> None:
        """Keep a running claim's completed units, cumulative (§5.1; API.md "Run time")."""
        state = self._running(claim_id)
        with self._live_lock:
            self.live.progress(claim_id, progress)
            self._project_now(state)

    def forget_live(self, claim_id: str) -> None:
        """Drop a released claim's soft state."""
        with self._live_lock:
            self.live.forget(claim_id)

    def projection(self, state: ClaimState, now_ms: int | None = None) -> Projection | None:
        """A running claim's live figures now (DESIGN.md §7), None for a released one."""
        at = self.now_ms() if now_ms is None else now_ms
        return self.projections([state], at)[0]

    def projections(self, states: Sequence[ClaimState], now_ms: int) -> list[Projection | None]:
        """`projection` of each of `states` at one instant, under one hold of the lock: what
        a pass over every running claim reads (DESIGN.md §7)."""
        with self._live_lock:
            return [self._project(s, now_ms) if s.running else None for s in states]

    def _project_now(self, state: ClaimState) -> None:
        """Project a claim as its evidence arrives (under the live lock), so a pass over
        every running claim finds each projection made (`ClaimLive.cached`)."""
        found = self.live.get(state.claim)
        if found is not None and found.latest is not None:
            self._project(state, found.latest.at_ms)

    def _project(self, state: ClaimState, now_ms: int) -> Projection:
        """`live.project` of one running claim under the policy in force (the live lock held)."""
        found = self.live.get(state.claim)
        return project(
            found,
            key=state.claim,
            policy=self.idle_policy,
            held_devices=state.admitted.devices,
            reserved_uj=state.admitted.reserved.uj,
            now_ms=now_ms,
            sample_period_ms=found.every_ms if found is not None else DEFAULT_SAMPLE_PERIOD_MS,
        )

    def _claim_state(self, claim_id: str) -> ClaimState | None:
        running = self.state.open_claim(claim_id)
        if running is not None:
            return ClaimState(claim_id, running.admitted, running.seq)
        closed = self.state.closed_claim(claim_id)
        if closed is None:
            return None
        admitted = self._event_at(closed.admitted_seq)
        released = self._event_at(closed.released_seq)
        assert isinstance(admitted, Admitted)
        assert isinstance(released, Released)
        return ClaimState(claim_id, admitted, closed.admitted_seq, released, closed.released_seq)

    def _event_at(self, seq: int) -> Event:
        return event_of(open_envelope(self.store.entry(seq)).core, self.steward)

    def estimate(
        self, class_: str | None, entitlement: str | None = None, required: int | None = None
    ) -> Derived | Declined:
        """An estimate earned from this ledger's own history of released claims (§2.6)."""
        need = self.required_evidence if required is None else required
        with self._settled():
            counted = (
                self.state.evidence(class_, entitlement)
                if isinstance(class_, str) and class_
                else Tally()
            )
        return decide_estimate(counted, class_, need)

    # -- what changes it ------------------------------------------------------------------

    def submit(self, claim: Claim) -> Decision:
        """Decide a claim against live usage; an Admit is on disk before it is returned (§3, §4).

        Raises `ClaimError("claim_exists")` for an id the ledger admitted before (§6.4).
        Queue and Deny write nothing.
        """
        decision = self._one(claim)
        assert isinstance(decision, Decision)
        return decision

    def release(self, claim_id: str, actual: Energy) -> Release:
        """Record that a claim ended, charging `actual` in place of its reservation (§6.2).

        Raises `ClaimError` with `unknown_claim` or `already_released`; nothing is appended.
        """
        done = self._one(ReleaseRequest(claim_id, actual))
        assert isinstance(done, Release)
        return done

    def _one(self, op: Claim | ReleaseRequest) -> Decision | Release:
        (outcome,) = self.apply([op])
        if isinstance(outcome, PoolError):
            raise outcome
        return outcome

    def apply(self, ops: Sequence[Claim | ReleaseRequest]) -> list[Outcome]:
        """Decide and record `ops` in order, as one group commit: one append, one fsync (§4, §6.2).

        `persist(decide(ops))`: see both. Nothing is returned before the append is durable.
        """
        return self.persist(self.decide(ops))

    def decide(self, ops: Sequence[Claim | ReleaseRequest]) -> Batch:
        """Decide `ops` in order and seal their entries, nothing yet durable (§4, §6.2; the
        decide half of DESIGN.md §5's commit path).

        Each operation sees the state its predecessors left, those of earlier batches still
        being written included, so this batch is decided while the one before it syncs. An
        outcome is a `Decision`, a `Release`, or the `PoolError` that refused that operation
        (a duplicate claim, say). None of them may be answered before `persist` returns it.
        """
        batch = Batch(ops)
        with self._commit_lock:
            # A reader waiting for a settled state goes first, or it could wait for ever.
            while self._readers:
                self._changed.wait()
            if self._snapshot_wanted:
                self._snapshot_when_settled()
            # After a failed append the store may hold what the failure hid (a PostgreSQL
            # COMMIT whose answer was lost): it is read before deciding. Where it cannot be
            # read now, the append's critical section finds those entries as unseen and
            # decides the batch again after them.
            self._reread_quietly()
            batch.start, batch.head = self._replayer.length, self._replayer.head
            batch.merkle = self._replayer.merkle.state()
            try:
                self._append_instant()
            except ClockFault as exc:
                batch.refuse(exc)
                return batch
            self.state.begin()
            try:
                self._decide_into(batch)
            except StoreError:
                # The store could not be read for a decision (the claim index on a server
                # that went away): the batch is decided in the append's critical section,
                # whose entry says what the store can do, and nothing is written before.
                self._undo(batch)
                batch.outcomes, batch.raws, batch.decided = [], [], False
            except Exception as exc:
                self._undo(batch)
                batch.refuse(_store_error(exc))
                return batch
            self._pending.append(batch)
        return batch

    def persist(self, batch: Batch) -> list[Outcome]:
        """Append `batch`'s entries with one fsync, then return its outcomes (§6.1; the
        persist half of DESIGN.md §5's commit path). Batches persist in the order decided:
        this waits for every earlier one.

        The failure rule: no outcome is returned before its decision and every decision it
        rests on are durable. When the append fails, this batch and every batch decided on
        top of it are taken back and refused with the error, none acknowledged, and the store
        is read again before the next decision. When another writer appended since the batch
        was decided (a store shared by replicas), every batch waiting is decided again on
        top of what it wrote, inside the append's critical section.
        """
        with self._commit_lock:
            while not batch.settled and self._pending[0] is not batch:
                self._changed.wait()
            if batch.settled:
                return batch.outcomes
        group = [batch]
        try:
            with self.store.writing() as writer:
                unseen = writer.unseen(batch.start)
                if unseen or not batch.decided:
                    group = self._decide_again(unseen)
                raws = [raw for b in group for raw in b.raws]
                if raws:
                    writer.append(raws)
                    self.appends += 1
        except Exception as exc:
            self._refuse_from(group[0], _store_error(exc))
        else:
            self._settle(group)
        return batch.outcomes

    def _decide_into(self, batch: Batch) -> None:
        for op in batch.ops:
            try:
                outcome, raw = self._decide_one(op)
            except (ClaimError, InvalidInput) as exc:
                # One operation that cannot be sealed (an id too long for an entry, a figure
                # past CBOR's range) fails alone: it changed nothing, and the others stand.
                batch.outcomes.append(exc)
                continue
            batch.outcomes.append(outcome)
            if raw is not None:
                batch.raws.append(raw)

    def _decide_again(self, unseen: list[bytes]) -> list[Batch]:
        """Every waiting batch, taken back, decided again after `unseen` and to be appended
        together (DESIGN.md §6): another replica's entries come first."""
        with self._commit_lock:
            group = list(self._pending)
            first = group[0]
            self._undo(first)
            for raw in unseen:
                self._replayer.feed(raw)
                # Durable already: a failure from here takes back nothing before it.
                first.start, first.head = self._replayer.length, self._replayer.head
                first.merkle = self._replayer.merkle.state()
            self.state.begin()
            for b in group:
                b.start, b.head = self._replayer.length, self._replayer.head
                b.merkle = self._replayer.merkle.state()
                b.outcomes, b.raws, b.decided = [], [], True
                self._decide_into(b)
            return group

    def _undo(self, batch: Batch) -> None:
        self.state.rollback(batch.start)
        self._replayer.head = batch.head
        self._replayer.merkle.rewind(batch.merkle)

    def _refuse_from(self, batch: Batch, error: PoolError) -> None:
        """The append of `batch` failed: it and every batch decided on top of it never
        happened, and none of their outcomes is given, only the error."""
        with self._commit_lock:
            try:
                self._undo(batch)
            finally:
                # Whatever happens, no client waits for ever on a batch nobody will persist.
                for b in self._pending:
                    b.refuse(error)
                self._pending.clear()
                self._reread = True
                self._changed.notify_all()

    def _settle(self, group: list[Batch]) -> None:
        with self._commit_lock:
            for b in group:
                assert self._pending[0] is b
                self._pending.popleft()
                b.settled = True
                for outcome in b.outcomes:
                    if isinstance(outcome, Release):
                        self._admitted_mono.pop(outcome.claim, None)
            end = self._pending[0].start if self._pending else self._replayer.length
            self.state.commit(end)
            if self._snapshots is not None and (
                end >= self._snapshot_due
                or (end > self._snapshot_length and time.monotonic() >= self._snapshot_deadline)
            ):
                # A snapshot holds durable state only: one batch may be decided on top.
                self._snapshot_wanted = True
                if not self._pending:
                    self._snapshot_when_settled()
            self._changed.notify_all()

    def _snapshot_when_settled(self) -> None:
        while self._pending:
            self._changed.wait()
        self._snapshot_wanted = False
        try:
            self._snapshot_in_background()
        except Exception as exc:
            # The entries are durable and decided: a snapshot that cannot start costs
            # restart time, never the verdicts already sealed.
            log.error("state snapshot not started: %s", exc)

    @contextmanager
    def _settled(self) -> Iterator[None]:
        """Hold the commit lock over a state with no decision still waiting for its append,
        so that what a reader answers rests on nothing that could be taken back (DESIGN.md
        §5). While one waits, no new batch is decided."""
        with self._commit_lock:
            if not self._pending:
                yield
                return
            self._readers += 1
            try:
                while self._pending:
                    self._changed.wait()
                yield
            finally:
                self._readers -= 1
                self._changed.notify_all()

    def _reread_quietly(self) -> None:
        # Only onto a settled state: entries read from the store follow the durable ones.
        if not self._reread or self._pending:
            return
        try:
            self._catch_up()
            self._reread = False
        except PoolError as exc:
            # What is folded is still a prefix of the durable ledger; the next decision
            # tries again, and its append finds what it could not read here.
            log.warning("the ledger could not be read again after a failed append: %s", exc)

    def _decide_one(self, op: Claim | ReleaseRequest) -> tuple[Decision | Release, bytes | None]:
        state = self.state
        # Non-decreasing along the ledger, across small steps only (DESIGN.md §3): the
        # decision and its entry share it.
        at_ms = self._append_instant()
        result: Decision | Release
        if isinstance(op, Claim):
            check_admitted_id(op.id, op.entitlement, self.tree)
            if state.knows(op.id):
                raise ClaimError("claim_exists", f"claim {brief(op.id)} was admitted before")
            verdict = decide(self.tree, state.current(at_ms), op)
            if not isinstance(verdict, Admit):
                renews = None
                if isinstance(verdict, Queue) and verdict.reason in BUDGET_REASONS:
                    renews = state.schedule.period_at(at_ms).end_ms
                return Decision(op.id, verdict, None, at_ms, renews), None
            event: Event = Admitted(
                claim=op.id,
                entitlement=op.entitlement,
                gang_size=op.gang_size,
                devices_per_member=op.devices_per_member,
                reserved=verdict.reserved,
                borrowed_uj=verdict.borrowed_uj,
                at_ms=at_ms,
                class_=op.class_,
            )
            result = Decision(op.id, verdict, state.length, at_ms)
            self._admitted_mono[op.id] = self._monotonic()
        else:
            if state.closed_claim(op.claim) is not None:
                raise ClaimError(
                    "already_released", f"claim {brief(op.claim)} was released already"
                )
            if state.open_claim(op.claim) is None:
                raise ClaimError(
                    "unknown_claim", f"the ledger never admitted claim {brief(op.claim)}"
                )
            event = Released(op.claim, op.actual, at_ms)
            result = Release(op.claim, state.length, op.actual)
        raw = seal_entry(
            event, state.length, self._replayer.head, self.steward, self.key.signing_key
        )
        self._replayer.extend(raw, event)
        return result, raw

    def rebuild(self, config: Rules) -> Replayer | None:
        """The ledger replayed under `config`'s period schedule, or None when the schedule
        in force is the same (DESIGN.md §3: a changed schedule regroups history, never what
        the ledger says). Runs outside the commit lock, on the caller's thread, while this
        pool goes on deciding under the configuration in force: a long ledger costs the
        reload time, never the service's answers. Hand the result to `reload`, which folds
        what was appended meanwhile and switches in one step."""
        if config.period == self.state.schedule:
            return None
        return replay(
            self.store.entries(),
            self.key.kid,
            self.keys,
            config.tree,
            schedule=config.period,
        )

    def reload(
        self,
        config: Rules,
        *,
        before: Callable[[], None] | None = None,
        rebuilt: Replayer | None = None,
    ) -> None:
        """Put a changed `pool.toml` in force: its tree, period schedule, idle policy and
        evidence count; the ledger is kept (§6.1). The steward is checked at the start only.

        A changed schedule regroups history, never what the ledger says (DESIGN.md §3): the
        ledger is replayed again under it, by `rebuild` beforehand (`rebuilt`, off the
        commit lock) or here, and the old state stays if that fails. Under the commit lock,
        with no decision waiting for its append, the rebuilt state folds what was appended
        since it read the ledger, and `before` runs next, so no decision falls between it
        and the switch, and none sees a state half built; if it raises, nothing changes.
        """
        tree, period = config.tree, config.period
        with self._settled():
            replayer = None
            if period != self.state.schedule:
                replayer = self._caught_up(rebuilt, config)
                index = self.state.claims
                if index is not None:
                    # Which claims were released does not depend on the schedule: the index
                    # goes on holding them, and the replay's own set in memory is dropped.
                    try:
                        replayer.state.keep_released_in(index)
                    except ValueError as exc:
                        raise StoreError(
                            f"the claim index cannot follow the reload: {exc}"
                        ) from None
            if before is not None:
                before()
            if replayer is None:
                self.state.rebind(tree)
            else:
                self._replayer = replayer
            self.idle_policy = config.idle
            self.required_evidence = config.required_evidence

    def _caught_up(self, rebuilt: Replayer | None, config: Rules) -> Replayer:
        """Under the commit lock, settled: `rebuilt` carried on to the store's end, or the
        ledger replayed here when there is none for this configuration. A rebuild whose
        entries are not this ledger's any more (an append it read was taken back since) is
        refused: the reload changes nothing, and the next one rebuilds afresh."""
        if rebuilt is None or rebuilt.state.schedule != config.period:
            return replay(
                self.store.entries(), self.key.kid, self.keys, config.tree, schedule=config.period
            )
        if self.store.shared is not None:
            self._catch_up()  # another replica's entries: the rebuild may have read them
        if rebuilt.length > self._replayer.length or (
            rebuilt.length > 0 and self.head_at(rebuilt.length) != rebuilt.head
        ):
            raise StoreError(
                f"the ledger changed under the reload's replay at {rebuilt.length} entries "
                "(an append it read was taken back): nothing was changed; reload again"
            )
        for raw in self.store.entries(rebuilt.length):
            rebuilt.feed(raw)
        return rebuilt

    def entries(self, start: int = 0) -> Iterator[bytes]:
        """The ledger's entries from `start`, as stored."""
        return self.store.entries(start)

    # -- state snapshots (DESIGN.md §4) ---------------------------------------------------

    def _snapshot_job(self) -> Callable[[], int]:
        # Under the commit lock: copies at C speed, so the lock is held for no encoding,
        # signing or writing; those run after, off the admission path.
        copy = capture(self.state)
        offsets = self.store.offsets
        if offsets is not None and copy.length > 0:
            copy = copy._replace(bounds=offsets.bounds(copy.length - 1))
        copy = copy._replace(merkle=self._replayer.merkle.state())
        head, key, at_ms = self._replayer.head, self.key, self.now_ms()
        schedule, folder = self.state.schedule, self._snapshots
        assert folder is not None
        self._snapshot_length = copy.length
        self._snapshot_due = copy.length + self._snapshot_every
        self._snapshot_deadline = time.monotonic() + self._snapshot_seconds

        def job() -> int:
            raw = seal_snapshot(key, copy.length, head, at_ms, schedule, encode_state(copy))
            folder.write(copy.length, raw)
            return copy.length

        return job

    def _snapshot_in_background(self) -> None:
        running = self._snapshot_thread
        if running is not None and running.is_alive():
            return  # the next commit tries again
        job = self._snapshot_job()

        def run() -> None:
            try:
                job()
            except Exception as exc:
                # A snapshot is a cache: failing to write one costs restart time, nothing else.
                log.error("state snapshot not written: %s", exc)

        self._snapshot_thread = threading.Thread(target=run, name="snapshot", daemon=True)
        self._snapshot_thread.start()

    def seal_snapshot(self) -> int:
        """Seal a state snapshot of the ledger as it stands now and wait for it to be on
        disk (DESIGN.md §4); its length. For operators and tests; the writer seals them on
        its own every `snapshot_every` entries."""
        if self._snapshots is None or self.read_only:
            raise StoreError("this pool keeps no snapshots")
        self.wait_for_snapshot()
        with self._settled():
            job = self._snapshot_job()
        return job()

    def wait_for_snapshot(self) -> None:
        """Wait until a snapshot being written in the background is on disk."""
        running = self._snapshot_thread
        if running is not None:
            running.join()

    def close(self) -> None:
        """Release the store, once a snapshot being written is done."""
        self.wait_for_snapshot()
        if self._claims is not None:
            self._claims.close()
        self.store.close()
