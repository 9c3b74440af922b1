"""The event loop: a trace replayed under one policy, deciding nothing itself.

Every decision is the policy's: for pool/1, the device quota and the grade-blind quota it is
`Pool.submit` (the §4 `decide()` behind the facade, sealing an entry on Admit) and every job
end is `Pool.release`, charging the measured actual (§6.2); for the GPU-hour quota it is
`GpuTimeQuota` (gpu_hours.py). The loop keeps the clock, the queue of claims that got Queue,
and when to submit them again.

Order of events at one instant `t`, fixed so a replay is deterministic:

1. releases due at `t`, earliest admission first; each frees its devices (§6.2) and, when
   it charges less than it reserved, energy;
2. queued claims of the teams something may have changed for, teams in id order, each
   team's claims in arrival order: each is submitted again and leaves the queue on Admit;
3. arrivals at `t`, in trace order (arrival time, team, line), each submitted at once.

A budget period's start (periods.py) is an event too: it renews every guarantee.

When a queued claim is submitted again: only when something its last Queue rested on
(§4.5) has changed since. Admission only raises spent energy and held devices, so:
`devices_held` waits for a release in its own team (devices never borrow, DESIGN.md §3);
a claim queued because its own guarantee is spent (a guess may not borrow, or the GPU-time
budget) waits for its own team's spending to fall (a release charging less than its
reservation), a new period, or its class's earned estimate to change; one queued for
`surplus_insufficient` waits for any team's spending to fall, a new period, or its estimate.
`eager_retry=True` submits every queued claim at every release and period start instead;
the tests check that both give the same replay, ledger byte for byte.

After `horizon_us` nothing is admitted: running jobs finish and are released, and a claim
still waiting is censored there (summary.py). Every policy is measured over the same span.
"""

from __future__ import annotations

import hashlib
import heapq
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import Protocol

from joulepool.acts import RuntimePolicy
from joulepool.admission import Admit, Deny, Queue, QueueReason
from joulepool.claim import Claim
from joulepool.estimate import Derived
from joulepool.grade import Energy, Grade
from joulepool.ledger.keys import KeyPair
from joulepool.periods import NONE, Schedule
from joulepool.pool import Pool
from joulepool.stores.memory import MemoryStore
from joulepool.tree import Tree
from joulepool_sim.errors import SimulationConfigError
from joulepool_sim.estimates import SimJob
from joulepool_sim.gpu_hours import DEVICES_HELD, GpuTimeQuota
from joulepool_sim.preempt import Preemption, Slurm
from joulepool_sim.runtime import DEFAULT_CHECKPOINT_US, Plan, plan

STEWARD = "pool-simulate"
GUESS = "guess"
EARNED = "earned"
_GUESS_REFUSED = {QueueReason.guarantee_exhausted_may_not_borrow.value, "unobserved_cannot_borrow"}


def simulation_key() -> KeyPair:
    """A fixed steward key: a simulated ledger is reproducible byte for byte, not secret."""
    return KeyPair.from_seed(STEWARD, hashlib.sha256(b"joulepool simulate").digest())


@dataclass(frozen=True, slots=True)
class Step:
    """One decision on one claim: `admit`, `queue` or `deny`, and on admit what was held."""

    verdict: str
    reason: str = ""
    reserved_uj: int = 0
    borrowed_uj: int = 0
    source: str = GUESS
    estimate: int = 0
    first: int = 0
    run_us: int | None = None
    act: str | None = None


class Admission(Protocol):
    """What a policy answers the loop: decisions, releases and its budget periods."""

    schedule: Schedule

    def submit(self, index: int, now_us: int) -> Step:
        """Decide job `index` now; on Admit it is running."""
        ...

    def release(self, index: int, now_us: int) -> bool:
        """Job `index` ended now; charge what it drew. Whether that was less than it held."""
        ...

    def changed(self, classes: set[str]) -> set[str]:
        """Re-read the earned estimates of `classes`; every class whose estimate changed
        since the last call (§2.6)."""
        ...

    def class_version(self, class_: str) -> int:
        """A count that moves whenever the class's earned estimate changes."""
        ...

    def room(self, tenant: str, now_us: int) -> tuple[int, int]:
        """What is left of the team's own budget now, and the most it could borrow."""
        ...


class PoolAdmission:
    """A policy decided by the real `Pool` over `tree`, with budget periods (§3, §4, §6).

    `mode` says which estimate a claim carries (§2.3, §2.6, §4.4):
    - `guess`: the user's guess as it is, an `Estimator` figure (pool/1 without earned
      estimates, and the device quota, where energy never binds);
    - `earned`: pool/1 as specified: the user's guess first (a tenant may spend its own
      guarantee on a guess, §4.3); when that is refused because a guess may not borrow and
      the claim's class has earned an estimate from the ledger's measured releases (§2.6,
      `Pool.estimate`, the pool's whole history of the class), the claim is decided again on
      that `ModelBased` estimate, which may borrow;
    - `blind`: a quota blind to grades: the user's guess presented as observed, so §4.4's
      first rule never fires and a guess borrows like a measurement.

    `runtime`, where given, is the service's `[runtime]` policy held over every admitted
    run (runtime.py): the act `acts.due_act` makes due when the run passes its reservation
    and margin ends it (`cancel`) or restarts it from its last checkpoint (`requeue`), and
    its release charges what it drew. None: no run is ever looked at (today's replay).
    """

    def __init__(
        self,
        jobs: Sequence[SimJob],
        tree: Tree,
        mode: str,
        schedule: Schedule = NONE,
        key: KeyPair | None = None,
        runtime: RuntimePolicy | None = None,
        checkpoint_us: int = DEFAULT_CHECKPOINT_US,
    ) -> None:
        if mode not in (GUESS, EARNED, "blind"):
            raise SimulationConfigError(f"unknown estimate mode {mode!r}")
        self.jobs = jobs
        self.runtime = runtime
        self.checkpoint_us = checkpoint_us
        self.plans: dict[int, Plan] = {}
        self.extra_uj: dict[int, int] = {}
        """Energy drawn again by a job preempted and resumed from a checkpoint (preempt.py)."""
        self.mode = mode
        self.schedule = schedule
        self.now_us = 0
        self.pool = Pool(
            tree,
            key if key is not None else simulation_key(),
            MemoryStore(),
            clock=lambda: self.now_us // 1000,
            period=schedule,
        )
        self._earned: dict[str, Derived | None] = {}
        self._stale: set[str] = set()
        self._versions: Counter[str] = Counter()
        self._changed: set[str] = set()
        self.reserved: dict[int, int] = {}

    def _decide(self, index: int, estimate: Energy, source: str) -> Step:
        j = self.jobs[index]
        claim = Claim(
            id=j.job.id,
            entitlement=j.job.tenant,
            gang_size=j.devices,
            devices_per_member=1,
            estimate=estimate,
            class_=j.class_,
        )
        verdict = self.pool.submit(claim).verdict
        if isinstance(verdict, Admit):
            return Step("admit", "", verdict.reserved.uj, verdict.borrowed_uj, source, estimate.uj)
        figure = estimate.uj
        if isinstance(verdict, Queue):
            return Step("queue", verdict.reason.value, source=source, estimate=figure, first=figure)
        assert isinstance(verdict, Deny)
        return Step("deny", verdict.reason.value, source=source, estimate=figure, first=figure)

    def earned(self, class_: str) -> Derived | None:
        """The class's earned estimate, re-read from the pool when a release made it stale."""
        if class_ in self._stale or class_ not in self._earned:
            self._stale.discard(class_)
            before = self._earned.get(class_)
            derived = self.pool.estimate(class_)
            after = derived if isinstance(derived, Derived) else None
            self._earned[class_] = after
            if (before.estimate if before else None) != (after.estimate if after else None):
                self._versions[class_] += 1
                self._changed.add(class_)
        return self._earned[class_]

    def submit(self, index: int, now_us: int) -> Step:
        """Decide job `index` through `Pool.submit`, on the estimate `mode` says."""
        self.now_us = now_us
        guess = self.jobs[index].guess
        if self.mode == "blind" and not guess.grade.observed:
            guess = Energy(guess.uj, Grade.ModelBased)
        step = self._decide(index, guess, GUESS)
        if self.mode == EARNED and step.reason in _GUESS_REFUSED:
            derived = self.earned(self.jobs[index].class_)
            if derived is not None:
                step = replace(self._decide(index, derived.estimate, EARNED), first=guess.uj)
        if step.verdict == "admit":
            self.reserved[index] = step.reserved_uj
            if self.runtime is not None:
                p = plan(
                    self.runtime, self.jobs[index], step.reserved_uj, now_us, self.checkpoint_us
                )
                self.plans[index] = p
                step = replace(step, run_us=p.run_us, act=p.act)
        return step

    def release(self, index: int, now_us: int) -> bool:
        """`Pool.release`, charging the measured actual (§6.2): what the job drew, or under a
        runtime policy what its run (or runs) drew until it ended."""
        self.now_us = now_us
        j = self.jobs[index]
        p = self.plans.get(index)
        actual = j.actual if p is None else Energy(p.charged_uj, j.actual.grade)
        if index in self.extra_uj:
            actual = Energy(actual.uj + self.extra_uj[index], actual.grade)
        self.pool.release(j.job.id, actual)
        held = self._earned.get(j.class_)
        # §2.6 derives the largest measured figure: a measured release at or below the
        # class's earned estimate cannot change it, so the pool is not asked again.
        if held is None or not actual.grade.observed or actual.uj > held.max_uj:
            self._stale.add(j.class_)
        return actual.uj < self.reserved.pop(index)

    def changed(self, classes: set[str]) -> set[str]:
        """Re-read the earned estimates of `classes` (just released, claims waiting); every
        class whose estimate changed since the last call, by these reads or any other."""
        if self.mode == EARNED:
            for class_ in sorted(classes):
                self.earned(class_)
        out, self._changed = self._changed, set()
        return out

    def class_version(self, class_: str) -> int:
        """Moves when the class's earned estimate changes."""
        return self._versions[class_]

    def room(self, tenant: str, now_us: int) -> tuple[int, int]:
        """The guarantee left in this period, and the most a claim could borrow now: its
        weighted share of the siblings' unspent guarantees (§2.2), less what is lent."""
        self.now_us = now_us
        usage = self.pool.state.current(self.pool.now_ms())
        tree = self.pool.tree
        ent = tree[tenant]
        left = ent.guarantee_uj - usage.spent_uj(tenant)
        lendable = usage.lendable_uj(tenant)
        group = tree.group_weight(tenant)
        share = lendable * ent.over_quota_weight // group if group else 0
        # The siblings' loans outstanding bound it too (§4.4: the group within what is lendable).
        unlent = lendable - usage.group_borrowed_uj(tenant) + max(0, -left)
        return left, max(0, min(share, unlent))


class GpuTimeAdmission:
    """The GPU-hour baseline (gpu_hours.py): the user's requested run time, no energy."""

    def __init__(self, jobs: Sequence[SimJob], quota: GpuTimeQuota, schedule: Schedule) -> None:
        self.jobs = jobs
        self.quota = quota
        self.schedule = schedule

    def submit(self, index: int, now_us: int) -> Step:
        """Decide by `GpuTimeQuota.start`."""
        j = self.jobs[index]
        period = self.schedule.index_at(now_us // 1000)
        d = self.quota.start(j.job.id, j.job.tenant, j.devices, j.requested_us, period)
        request = j.devices * j.requested_us
        return Step(d.verdict, d.reason, estimate=request, first=request)

    def release(self, index: int, now_us: int) -> bool:
        """Charge the GPU-time the job ran."""
        del now_us  # the job's own run time is what is charged, whenever it ends
        j = self.jobs[index]
        self.quota.finish(j.job.id, j.duration_us)
        return j.duration_us < j.requested_us

    def changed(self, classes: set[str]) -> set[str]:
        """No estimate is ever earned here."""
        del classes
        return set()

    def class_version(self, class_: str) -> int:
        """Never moves."""
        del class_
        return 0

    def room(self, tenant: str, now_us: int) -> tuple[int, int]:
        """GPU-time left of the team's budget this period; nothing to borrow."""
        period = self.schedule.index_at(now_us // 1000)
        return self.quota.budget_gpu_us[tenant] - self.quota.used_gpu_us(tenant, period), 0


@dataclass(slots=True)
class JobOutcome:
    """What happened to one job under one policy."""

    job: SimJob
    first: str = ""
    start_us: int | None = None
    end_us: int | None = None
    reserved_uj: int = 0
    borrowed_uj: int = 0
    source: str = GUESS
    deny_reason: str | None = None
    last_queue_reason: str | None = None
    queue_reasons: set[str] = field(default_factory=set)
    at_renewal: bool = False
    estimate: int = 0
    first_estimate: int = 0
    act: str | None = None
    preempted: int = 0
    """How many times its run was preempted (preempt.py)."""

    @property
    def started(self) -> bool:
        """Admitted at some point."""
        return self.start_us is not None

    @property
    def completed(self) -> bool:
        """Admitted and run to its end: not cancelled."""
        return self.start_us is not None and self.act != "cancel"

    @property
    def wait_us(self) -> int | None:
        """Queueing delay, arrival to admission; None (unknown) for a job never admitted."""
        if self.start_us is None:
            return None
        return self.start_us - self.job.job.arrival_us

    @property
    def guess_refused_borrowing(self) -> bool:
        """A claim refused surplus at least once because its estimate was a guess (§4.4)."""
        return bool(_GUESS_REFUSED & (self.queue_reasons | {self.deny_reason or ""}))


@dataclass(slots=True)
class Run:
    """One policy's replay: every job's outcome, GPU occupancy over time, the span."""

    admission: Admission
    outcomes: list[JobOutcome]
    busy: list[tuple[int, int]]
    horizon_us: int
    submissions: int = 0
    slurm: Slurm | None = None


_SURPLUS = QueueReason.surplus_insufficient.value


def _category(reason: str) -> str:
    if reason == DEVICES_HELD:
        return "devices"
    if reason == _SURPLUS:
        return "surplus"
    return "own"


def replay_trace(
    jobs: Sequence[SimJob],
    admission: Admission,
    device_limits: dict[str, int],
    *,
    horizon_us: int | None = None,
    eager_retry: bool = False,
    preemption: Preemption | None = None,
) -> Run:
    """Replay `jobs` (in arrival order) under `admission` until `horizon_us` (§3, §4, §6.2)."""
    arrivals = [m.job.arrival_us for m in jobs]
    if any(a > b for a, b in pairwise(arrivals)):
        raise SimulationConfigError("the jobs to replay must be in arrival order")
    horizon = horizon_us if horizon_us is not None else (arrivals[-1] + 1 if arrivals else 1)
    if arrivals and arrivals[-1] >= horizon:
        raise SimulationConfigError("the horizon must come after the last arrival")
    schedule = admission.schedule
    outcomes = [JobOutcome(job) for job in jobs]
    queues: dict[str, list[int]] = {}
    stamps: dict[int, tuple[int, ...]] = {}
    surplus_waiting: Counter[str] = Counter()
    class_waiting: Counter[tuple[str, str]] = Counter()
    held: Counter[str] = Counter()
    released: Counter[str] = Counter()
    fell: Counter[str] = Counter()
    fell_any = 0
    ends: list[tuple[int, int, int]] = []  # (end_us, admission order, job index)
    admitted = 0
    busy = 0
    series: list[tuple[int, int]] = [(0, 0)]
    run = Run(admission, outcomes, series, horizon)
    period = schedule.index_at(0)
    devices = [j.devices for j in jobs]
    # Each queued claim's category, kept as its last Queue reason changes (profiled: the
    # queue scans below read it millions of times on the whole trace).
    categories = [""] * len(jobs)
    slurm = None if preemption is None else Slurm(preemption, jobs)
    run.slurm = slurm
    if slurm is not None and isinstance(admission, PoolAdmission):
        admission.extra_uj = slurm.wasted_uj

    def started(pairs: list[tuple[int, int]]) -> None:
        """Runs Slurm started: their end events, and each job's first start."""
        nonlocal admitted
        for index, end in pairs:
            out = outcomes[index]
            if out.start_us is None:
                out.start_us = slurm.first_start_us[index] if slurm is not None else None
            heapq.heappush(ends, (end, admitted, index))
            admitted += 1

    def stamp(index: int) -> tuple[int, ...]:
        out = outcomes[index]
        tenant = out.job.job.tenant
        category = categories[index]
        if category == "devices":
            return (released[tenant],)
        version = admission.class_version(out.job.class_)
        if category == "surplus":
            return (period, fell_any, version)
        return (period, fell[tenant], version)

    def enqueue(index: int) -> None:
        tenant = outcomes[index].job.job.tenant
        queues.setdefault(tenant, []).append(index)
        stamps[index] = stamp(index)
        surplus_waiting[tenant] += categories[index] == "surplus"
        class_waiting[(tenant, outcomes[index].job.class_)] += 1

    def dequeue(index: int) -> None:
        tenant = outcomes[index].job.job.tenant
        surplus_waiting[tenant] -= categories[index] == "surplus"
        class_waiting[(tenant, outcomes[index].job.class_)] -= 1

    def submit(index: int, now_us: int, renewal: bool) -> bool:
        """Decide one claim; whether it left the queue (admitted or denied)."""
        nonlocal admitted, busy
        run.submissions += 1
        step = admission.submit(index, now_us)
        out = outcomes[index]
        if not out.first:
            out.first = step.verdict
        if step.verdict == "admit":
            out.start_us = now_us if slurm is None else None
            out.reserved_uj = step.reserved_uj
            out.borrowed_uj = step.borrowed_uj
            out.source = step.source
            out.at_renewal = renewal and categories[index] != "devices"
            out.act = step.act
            held[out.job.job.tenant] += out.job.devices
            if slurm is not None:
                started(slurm.admitted(index, now_us))
                busy = slurm.busy
                return True
            busy += out.job.devices
            run_us = out.job.duration_us if step.run_us is None else step.run_us
            heapq.heappush(ends, (now_us + run_us, admitted, index))
            admitted += 1
            return True
        if step.verdict == "queue":
            out.estimate = step.estimate
            out.first_estimate = step.first
            out.last_queue_reason = step.reason
            categories[index] = _category(step.reason)
            out.queue_reasons.add(step.reason)
            return False
        out.deny_reason = step.reason
        return True

    def cannot_fit(index: int, left: int, share: int) -> bool:
        """Sure to Queue again on the same estimate: past the guarantee left, and (when it
        may borrow) past its weighted share of the siblings' unspent guarantees."""
        out = outcomes[index]
        category = categories[index]
        # The first estimate tried (the guess, in pool/1) is admitted whenever it fits.
        if category == "devices" or out.first_estimate <= left:
            return False
        if stamps[index][-1] != admission.class_version(out.job.class_):
            return False
        return category == "own" or out.estimate - left > share

    def retry(tenant: str, now_us: int, renewal: bool) -> None:
        waiting = queues.get(tenant)
        if not waiting:
            return
        free = device_limits[tenant] - held[tenant]
        left, share = admission.room(tenant, now_us)
        keep: list[int] = []
        for position, index in enumerate(waiting):
            if not eager_retry:
                if free <= 0:
                    # Every claim needs a device: none can start, whatever else changed.
                    keep.extend(waiting[position:])
                    break
                if (
                    devices[index] > free
                    or cannot_fit(index, left, share)
                    or stamps[index] == stamp(index)
                ):
                    keep.append(index)
                    continue
            dequeue(index)
            if submit(index, now_us, renewal):
                free = device_limits[tenant] - held[tenant]
                left, share = admission.room(tenant, now_us)
                continue
            keep.append(index)
            out = outcomes[index]
            stamps[index] = stamp(index)
            surplus_waiting[tenant] += categories[index] == "surplus"
            class_waiting[(tenant, out.job.class_)] += 1
        queues[tenant] = keep

    next_arrival = 0
    while True:
        waiting = any(queues.values())
        times = []
        if next_arrival < len(jobs):
            times.append(jobs[next_arrival].job.arrival_us)
        if ends:
            times.append(ends[0][0])
        if waiting:
            end_ms = schedule.period(period).end_ms
            if end_ms is not None and end_ms * 1000 < horizon:
                times.append(end_ms * 1000)
        if slurm is not None and (check := slurm.next_check()) is not None and check < horizon:
            times.append(check)
        if not times:
            break
        now_us = min(times)
        woken: set[str] = set()
        classes: set[str] = set()
        fell_before = fell_any
        while ends and ends[0][0] == now_us:
            _, _, index = heapq.heappop(ends)
            if slurm is not None and not slurm.ended(index, now_us):
                continue  # the end of a run that was preempted
            out = outcomes[index]
            tenant = out.job.job.tenant
            freed = admission.release(index, now_us)
            out.end_us = now_us
            busy -= out.job.devices
            held[tenant] -= out.job.devices
            released[tenant] += 1
            woken.add(tenant)
            classes.add(out.job.class_)
            if freed:
                fell[tenant] += 1
                fell_any += 1
        if slurm is not None:
            started(slurm.dispatch(now_us))
            if now_us < horizon:
                started(slurm.check(now_us))
            busy = slurm.busy
        if busy != series[-1][1]:
            if series[-1][0] == now_us:
                series[-1] = (now_us, busy)
            else:
                series.append((now_us, busy))
        if now_us >= horizon:
            continue
        now_period = schedule.index_at(now_us // 1000)
        renewal = now_period != period
        period = now_period
        if woken or renewal:
            asked = {c for c in classes if any(class_waiting[(t, c)] for t in queues)}
            for class_ in admission.changed(asked):
                woken.update(t for t in queues if class_waiting[(t, class_)])
        if fell_any != fell_before:
            woken.update(t for t, n in surplus_waiting.items() if n)
        if renewal or (eager_retry and woken):
            woken.update(queues)
        for tenant in sorted(woken):
            retry(tenant, now_us, renewal)
        while next_arrival < len(jobs) and jobs[next_arrival].job.arrival_us == now_us:
            index = next_arrival
            next_arrival += 1
            if not submit(index, now_us, False):
                enqueue(index)
        if slurm is not None:
            busy = slurm.busy
        if busy != series[-1][1]:
            if series[-1][0] == now_us:
                series[-1] = (now_us, busy)
            else:
                series.append((now_us, busy))
    if slurm is not None:
        for index, times_preempted in slurm.preempted.items():
            outcomes[index].preempted = times_preempted
    return run
