"""`Pool`: the tree, the steward's key and a ledger store, as one admission controller.

The stateful facade of DESIGN.md §5. It owns the one lock, the clock and the store; the
decisions it makes are the pure `decide()` of §4 against usage that the same fold as replay
keeps up to date, so a live pool and a replayed one cannot disagree (§6.1).

Durability: an admission's entry is sealed and appended (fsynced) before its verdict is
returned. Concurrent submissions share one append and one fsync (group commit): whoever
holds the commit lock decides every request queued so far, in arrival order, each against
the state its predecessors left, appends them all at once, and only then answers them. An
append that fails is rolled back exactly, and every request in it gets the error.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from joulepool.admission import Admit, Queue, QueueReason, Verdict, decide
from joulepool.claim import Claim
from joulepool.claim_id import check_admitted_id
from joulepool.errors import ClaimError, InvalidInput, PoolError, StoreError
from joulepool.estimate import Declined, Derived, Tally, decide_estimate
from joulepool.events import Admitted, Event, Released
from joulepool.grade import Energy
from joulepool.idle import IdlePolicy
from joulepool.ledger import SNAPSHOT_EVERY as SNAPSHOT_EVERY
from joulepool.ledger import SNAPSHOT_SECONDS as SNAPSHOT_SECONDS
from joulepool.ledger.cose import open_envelope
from joulepool.ledger.entry import brief, event_of, seal_entry
from joulepool.ledger.fold import LedgerState, PeriodFigures, capture
from joulepool.ledger.keys import KeyPair
from joulepool.ledger.released import ReleasedClaims
from joulepool.ledger.replay import replay
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
from joulepool.periods import NONE, Period, Schedule
from joulepool.stores.base import Store, head_at, refuse_rollback
from joulepool.tree import EntitlementUsage, Tree

log = logging.getLogger("joulepool.pool")


def wall_clock_ms() -> int:
    """Milliseconds since the Unix epoch (DESIGN.md §2: `at_ms`)."""
    return time.time_ns() // 1_000_000


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


class _Request:
    __slots__ = ("actual", "claim", "claim_id", "done", "error", "result")

    def __init__(self, claim: Claim | None, claim_id: str, actual: Energy | None) -> None:
        self.claim = claim
        self.claim_id = claim_id
        self.actual = actual
        self.done = False
        self.result: Decision | Release | None = None
        self.error: PoolError | None = None


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
    ) -> None:
        # A reader (`pool usage` beside `pool serve`) seals nothing, so needs no secret.
        if key.seed is None and not read_only:
            raise PoolError("the steward's key must include its secret to seal entries")
        self.read_only = read_only
        self.key = key
        self.store = store
        self.idle_policy = idle_policy if idle_policy is not None else IdlePolicy()
        self.required_evidence = required_evidence
        self._clock = clock
        self._queue: list[_Request] = []
        self._queue_lock = threading.Lock()
        # Readers take it too, so nobody sees an entry that is decided but not yet durable.
        self._commit_lock = threading.RLock()
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

    def _verified_snapshot(
        self, store: Store, steward: str, keys: KeySchedule, tree: Tree, period: Schedule
    ) -> tuple[tuple[LedgerState, bytes] | None, list[Mark]]:
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
                claims = self._claims
                reaches = claims is not None and claims.covers >= snap.length
                state = decode_state(snap, tree, period, claims if reaches else None, copy)
                if state.claims is not None:
                    state.claims.rebase(snap.length)  # rows past it are the tail's again
                return (state, snap.head), marks
            except SnapshotRefused as exc:
                warning = f"{where} ignored: {exc}"
                self.snapshot_warnings.append(warning)
                log.warning("%s", warning)
        return None, marks

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
        with self._commit_lock:
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
        with self._commit_lock:
            return self._replayer.length

    @property
    def head(self) -> bytes:
        """Content address of the last entry; the genesis sentinel when empty (DESIGN.md §4)."""
        with self._commit_lock:
            return self._replayer.head

    @property
    def snapshots(self) -> Snapshots | None:
        """Where this pool keeps its state snapshots (DESIGN.md §4), or None: read by
        `/metrics` for the newest one's age."""
        return self._snapshots

    def snapshot(self) -> tuple[int, bytes]:
        """Length and head, read together."""
        with self._commit_lock:
            return self._replayer.length, self._replayer.head

    def catch_up(self) -> int:
        """Fold in what other replicas appended since this one last looked; the new length.

        A replica's reads are only as fresh as its last append (§6.1, DESIGN.md §6): a
        service that shares its store calls this before answering a read, so no replica
        answers from a view older than the request. A sole writer has nothing to read.
        """
        with self._commit_lock:
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

    def period(self, index: int | None = None) -> Period:
        """The period of that index, or the current one (DESIGN.md §3)."""
        with self._commit_lock:
            schedule = self.state.schedule
            return schedule.period_at(self.now_ms()) if index is None else schedule.period(index)

    def usage_of(self, entitlement: str, index: int | None = None) -> EntitlementUsage:
        """One entitlement's figures in a period (the current one by default): spent and
        reserved there, devices held and claims running now (DESIGN.md §3, API.md).

        The same figures a decision reads: every surface that reports usage comes here.
        """
        with self._commit_lock:
            if index is None:
                return self.state.current(self.now_ms()).of(entitlement)
            return self.state.figures_in(entitlement, index)

    def report(self, entitlement: str, index: int | None = None) -> dict[str, Any]:
        """API.md's Entitlement with its `usage` in a period (the current one by default),
        the period named in it: the one usage answer of the CLI, HTTP and metrics."""
        with self._commit_lock:
            ent = self.tree[entitlement]
            if index is None:
                index = self.state.schedule.index_at(self.now_ms())
            period = self.state.schedule.period(index)
            figures = self.usage_of(entitlement, index)
            return {**ent.to_json(), "usage": figures.to_json(ent.guarantee_uj, period.to_json())}

    def history(self, entitlement: str) -> dict[str, Any]:
        """Each period's charged energy against the guarantee, oldest first (DESIGN.md §3):
        what `pool usage --history` and `GET /v1/entitlements/{id}/periods` show."""
        with self._commit_lock:
            ent = self.tree.get(entitlement)
            if ent is None:
                raise InvalidInput("entitlement", f"no entitlement {entitlement!r} in the tree")
            schedule = self.state.schedule
            rows = [
                {
                    "label": schedule.label(fig.period.index),
                    "period": fig.period.to_json(),
                    "claims": fig.claims,
                    "charged_uj": fig.charged_uj,
                    "reserved_uj": fig.reserved_uj,
                    "committed_uj": fig.committed_uj,
                    "guarantee_uj": ent.guarantee_uj,
                    "remaining_uj": max(0, ent.guarantee_uj - fig.committed_uj),
                    "borrowed_uj": max(0, fig.committed_uj - ent.guarantee_uj),
                }
                for fig in self.state.periods_of(entitlement)
            ]
            return {"id": entitlement, "period": schedule.to_json(), "periods": rows}

    def periods_of(self, entitlement: str) -> list[PeriodFigures]:
        """Each period in which `entitlement` had claims admitted, oldest first (DESIGN.md §3)."""
        with self._commit_lock:
            return self.state.periods_of(entitlement)

    def claim_state(self, claim_id: str) -> ClaimState | None:
        """Where a claim stands, or None if the ledger never admitted it (§6.2)."""
        with self._commit_lock:
            return self._claim_state(claim_id)

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
        with self._commit_lock:
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
        return self._run(_Request(claim, claim.id, None))  # type: ignore[return-value]

    def release(self, claim_id: str, actual: Energy) -> Release:
        """Record that a claim ended, charging `actual` in place of its reservation (§6.2).

        Raises `ClaimError` with `unknown_claim` or `already_released`; nothing is appended.
        """
        return self._run(_Request(None, claim_id, actual))  # type: ignore[return-value]

    def apply(self, ops: Sequence[Claim | ReleaseRequest]) -> list[Outcome]:
        """Decide and record `ops` in order, as one group commit: one append, one fsync (§4, §6.2).

        Each operation sees the state its predecessors left. An outcome is a `Decision`, a
        `Release`, or the `PoolError` that refused that operation (a duplicate claim, say);
        when the append itself fails, every operation's outcome is that error and nothing
        decided in the batch stands. Nothing is returned before the append is durable.
        """
        batch = [
            _Request(op, op.id, None)
            if isinstance(op, Claim)
            else _Request(None, op.claim, op.actual)
            for op in ops
        ]
        with self._commit_lock:
            self._commit(batch)
        out: list[Outcome] = []
        for req in batch:
            if req.error is not None:
                out.append(req.error)
            else:
                assert req.result is not None
                out.append(req.result)
        return out

    def _run(self, request: _Request) -> Decision | Release:
        with self._queue_lock:
            self._queue.append(request)
        with self._commit_lock:
            if not request.done:
                with self._queue_lock:
                    batch, self._queue = self._queue, []
                self._commit(batch)
        if request.error is not None:
            raise request.error
        assert request.result is not None
        return request.result

    def _commit(self, batch: list[_Request]) -> None:
        state = self.state
        try:
            with self.store.writing() as writer:
                # Another replica may have appended since this one last looked (DESIGN.md §6).
                for raw in writer.unseen(self.length):
                    self._replayer.feed(raw)
                head_before = self._replayer.head
                raws: list[bytes] = []
                state.begin()
                try:
                    for req in batch:
                        try:
                            sealed = self._decide_one(req)
                        except (ClaimError, InvalidInput) as exc:
                            # One request that cannot be sealed (an id too long for an
                            # entry, a figure past CBOR's range) fails alone: it changed
                            # nothing, and the others in its group commit still stand.
                            req.error, req.result = exc, None
                            continue
                        if sealed is not None:
                            raws.append(sealed)
                    if raws:
                        writer.append(raws)
                        self.appends += 1
                except BaseException:
                    # The append did not happen, so nothing decided against it stands.
                    state.rollback()
                    self._replayer.head = head_before
                    raise
                state.commit()
                if self._snapshots is not None and (
                    state.length >= self._snapshot_due
                    or (
                        state.length > self._snapshot_length
                        and time.monotonic() >= self._snapshot_deadline
                    )
                ):
                    try:
                        self._snapshot_in_background()
                    except Exception as exc:
                        # The batch is durable and decided: a snapshot that cannot start
                        # costs restart time, never the verdicts already sealed.
                        log.error("state snapshot not started: %s", exc)
        except Exception as exc:
            error = exc if isinstance(exc, PoolError) else StoreError(f"append failed: {exc!r}")
            for req in batch:
                req.error, req.result = error, None
        finally:
            for req in batch:
                req.done = True

    def _decide_one(self, req: _Request) -> bytes | None:
        state = self.state
        # Non-decreasing along the ledger (DESIGN.md §3): the decision and its entry share it.
        at_ms = self.now_ms()
        if req.claim is not None:
            claim = req.claim
            check_admitted_id(claim.id, claim.entitlement, self.tree)
            if state.knows(claim.id):
                raise ClaimError("claim_exists", f"claim {brief(claim.id)} was admitted before")
            verdict = decide(self.tree, state.current(at_ms), claim)
            if not isinstance(verdict, Admit):
                renews = None
                if isinstance(verdict, Queue) and verdict.reason in BUDGET_REASONS:
                    renews = state.schedule.period_at(at_ms).end_ms
                req.result = Decision(claim.id, verdict, None, at_ms, renews)
                return None
            event: Event = Admitted(
                claim=claim.id,
                entitlement=claim.entitlement,
                gang_size=claim.gang_size,
                devices_per_member=claim.devices_per_member,
                reserved=verdict.reserved,
                borrowed_uj=verdict.borrowed_uj,
                at_ms=at_ms,
                class_=claim.class_,
            )
            req.result = Decision(claim.id, verdict, state.length, at_ms)
        else:
            assert req.actual is not None
            if state.closed_claim(req.claim_id) is not None:
                raise ClaimError(
                    "already_released", f"claim {brief(req.claim_id)} was released already"
                )
            if state.open_claim(req.claim_id) is None:
                raise ClaimError(
                    "unknown_claim", f"the ledger never admitted claim {brief(req.claim_id)}"
                )
            event = Released(req.claim_id, req.actual, at_ms)
            req.result = Release(req.claim_id, state.length, req.actual)
        raw = seal_entry(
            event, state.length, self._replayer.head, self.steward, self.key.signing_key
        )
        self._replayer.extend(raw, event)
        return raw

    def reload(
        self,
        tree: Tree,
        period: Schedule | None = None,
        *,
        idle_policy: IdlePolicy | None = None,
        required_evidence: int | None = None,
        before: Callable[[], None] | None = None,
    ) -> None:
        """Put a changed tree, period schedule, idle policy and evidence count in force; the
        ledger is kept (§6.1).

        A changed schedule regroups history, never what the ledger says (DESIGN.md §3): the
        ledger is replayed again under it, and the old state stays if that fails. `before`
        runs next, under the commit lock, so no decision falls between it and the change;
        if it raises, nothing changes.
        """
        with self._commit_lock:
            replayer = None
            if period is not None and period != self.state.schedule:
                replayer = replay(
                    self.store.entries(),
                    self.key.kid,
                    self.keys,
                    tree,
                    schedule=period,
                )
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
            if idle_policy is not None:
                self.idle_policy = idle_policy
            if required_evidence is not None:
                self.required_evidence = required_evidence

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
        with self._commit_lock:
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
