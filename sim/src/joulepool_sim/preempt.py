"""Preemption by realised cost (standard §5.2, DESIGN.md §7) against Slurm's own victim choice.

Pool admits a claim within its team's device guarantee; Slurm then starts it when the
partition has the GPUs. Where the guarantees add up to more than the partition holds, an
admitted job can wait for GPUs: that is when preemption acts. Here the cluster is one
partition of `gpus` GPUs; each team has a priority (two tiers). Slurm starts pending jobs
highest priority first, then longest pending, each one that fits (a job needing more GPUs
than are free waits while smaller ones start: backfill without reservations).

A pending job of the high tier that has waited `after_s` may take GPUs from running jobs of
a strictly lower priority. Which jobs yield:

- `realised_cost`: `joulepool.reclaim.victims`, the service's own decision (§5.2 order:
  spent µJ per completed unit, most expensive first; a job with no completed unit after,
  lowest priority first). A running job's completed units are Gavel's training steps done
  so far (`total_steps × progress / duration`), its spent energy all its claim has drawn
  (every run, at its modelled power);
- `youngest`: Slurm's own choice (`PreemptMode=REQUEUE` by partition or QOS priority): the
  most recently started jobs of the lower tier first, taken until the waiter's GPUs are
  covered, none if they cannot be.

Each victim is made due through `reclaim.preemption_due` (with `notice_s = 0`: told, then
requeued at once) and requeued as the service does it: it keeps its claim, its run stops,
it resumes from its last checkpoint when Slurm starts it again, and the work since that
checkpoint is lost (its energy, drawn again, is charged at the job's release: wasted).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from joulepool.reclaim import PreemptionPolicy, RuleState, Running, Waiting, preemption_due, victims
from joulepool_sim.errors import SimulationConfigError
from joulepool_sim.estimates import SimJob
from joulepool_sim.runtime import DEFAULT_CHECKPOINT_US, energy_at

PARTITION = "gpu"
ORDERS = ("none", "realised_cost", "youngest")
REQUEUE_AFTER_10_MIN = PreemptionPolicy("requeue", 600, 0, 3600)
"""`[preemption]` as replayed: requeue after 10 minutes' wait, told and requeued at once (the
notice changes nothing for a job here), no victim again within an hour."""


@dataclass(frozen=True, slots=True)
class Preemption:
    """The partition, the teams' priorities, and who yields (`ORDERS`)."""

    gpus: int
    priority: Mapping[str, int]
    order: str
    policy: PreemptionPolicy = REQUEUE_AFTER_10_MIN
    checkpoint_us: int = DEFAULT_CHECKPOINT_US

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise SimulationConfigError(f"unknown preemption order {self.order!r}")


@dataclass(slots=True)
class Slurm:
    """The partition's GPUs and the admitted jobs waiting for them (module docstring)."""

    setup: Preemption
    jobs: Sequence[SimJob]
    free: int = 0
    pending: dict[int, int] = field(default_factory=dict)
    """Index -> since when (µs) it is pending."""
    running: dict[int, int] = field(default_factory=dict)
    """Index -> when (µs) its current run started."""
    progress_us: dict[int, int] = field(default_factory=dict)
    """Index -> run time already checkpointed (µs of its modelled duration)."""
    end_us: dict[int, int] = field(default_factory=dict)
    first_start_us: dict[int, int] = field(default_factory=dict)
    requeued_at_us: dict[int, int] = field(default_factory=dict)
    wasted_uj: dict[int, int] = field(default_factory=dict)
    lost_gpu_us: dict[int, int] = field(default_factory=dict)
    preempted: dict[int, int] = field(default_factory=dict)
    checks: list[int] = field(default_factory=list)
    busy: int = 0

    def __post_init__(self) -> None:
        self.free = self.setup.gpus

    def _priority(self, index: int) -> int:
        return self.setup.priority[self.jobs[index].job.tenant]

    def _start(self, index: int, now_us: int) -> tuple[int, int]:
        job = self.jobs[index]
        del self.pending[index]
        self.free -= job.devices
        self.busy += job.devices
        self.running[index] = now_us
        self.first_start_us.setdefault(index, now_us)
        end = now_us + job.duration_us - self.progress_us.get(index, 0)
        self.end_us[index] = end
        return index, end

    def admitted(self, index: int, now_us: int) -> list[tuple[int, int]]:
        """Pool admitted the job: it is pending; the runs that start now, with their ends."""
        if self.jobs[index].devices > self.setup.gpus:
            raise SimulationConfigError(f"job {self.jobs[index].job.id} needs more GPUs than exist")
        self.pending[index] = now_us
        heapq.heappush(self.checks, now_us + self.setup.policy.after_s * 1_000_000)
        return self.dispatch(now_us)

    def ended(self, index: int, end_us: int) -> bool:
        """Whether an end event is the job's current one (a preempted run's is not); frees
        its GPUs when it is."""
        if self.end_us.get(index) != end_us:
            return False
        del self.end_us[index]
        del self.running[index]
        self.free += self.jobs[index].devices
        self.busy -= self.jobs[index].devices
        return True

    def dispatch(self, now_us: int) -> list[tuple[int, int]]:
        """Start pending jobs: highest priority first, then longest pending, each that fits."""
        order = sorted(self.pending, key=lambda i: (-self._priority(i), self.pending[i], i))
        started = []
        for index in order:
            if self.free <= 0:
                break
            if self.jobs[index].devices <= self.free:
                started.append(self._start(index, now_us))
        return started

    def next_check(self) -> int | None:
        """When a pending job next reaches `after_s`."""
        while self.checks and not self.pending:
            self.checks.clear()
        return self.checks[0] if self.checks else None

    def _done_us(self, index: int, now_us: int) -> int:
        return self.progress_us.get(index, 0) + now_us - self.running[index]

    def _drawn_uj(self, index: int, now_us: int) -> int:
        job = self.jobs[index]
        done = energy_at(job.actual.uj, job.duration_us, self._done_us(index, now_us))
        return done + self.wasted_uj.get(index, 0)

    def _waiting(self) -> list[Waiting]:
        return [
            Waiting(
                self.jobs[i].job.id,
                self.jobs[i].job.tenant,
                self._priority(i),
                PARTITION,
                self.jobs[i].devices,
                since // 1000,
                None if (r := self.requeued_at_us.get(i)) is None else r // 1000,
            )
            for i, since in self.pending.items()
        ]

    def _youngest(self, now_us: int) -> list[tuple[int, str]]:
        """Slurm's own choice: for each waiter that may preempt (reclaim's waiter order),
        the youngest runs of a lower priority until its GPUs are covered."""
        policy = self.setup.policy
        cooldown = policy.cooldown_s * 1_000_000
        waiters = sorted(
            (
                i
                for i, since in self.pending.items()
                if now_us - since >= policy.after_s * 1_000_000
                and not ((r := self.requeued_at_us.get(i)) is not None and now_us - r < cooldown)
            ),
            key=lambda i: (-self._priority(i), self.pending[i], self.jobs[i].job.id),
        )
        taken: set[int] = set()
        out: list[tuple[int, str]] = []
        for w in waiters:
            need = self.jobs[w].devices
            candidates = sorted(
                (
                    i
                    for i in self.running
                    if i not in taken
                    and self._priority(i) < self._priority(w)
                    and not (
                        (r := self.requeued_at_us.get(i)) is not None and now_us - r < cooldown
                    )
                ),
                key=lambda i: (-self.running[i], self.jobs[i].job.id),
            )
            chosen: list[int] = []
            got = 0
            for i in candidates:
                if got >= need:
                    break
                chosen.append(i)
                got += self.jobs[i].devices
            if got >= need:
                taken.update(chosen)
                out.extend((i, self.jobs[w].job.id) for i in chosen)
        return out

    def check(self, now_us: int) -> list[tuple[int, int]]:
        """Preempt for the pending jobs that have waited `after_s`; the runs that start."""
        while self.checks and self.checks[0] <= now_us:
            heapq.heappop(self.checks)
        if self.setup.order == "none" or not self.pending:
            return []
        # Nothing can be taken unless a waiter owed something (pending `after_s`) outranks a
        # running job (victims are of strictly lower priority): then nobody is asked.
        after = self.setup.policy.after_s * 1_000_000
        lowest = min((self._priority(i) for i in self.running), default=None)
        if lowest is None or all(
            now_us - since < after or self._priority(i) <= lowest
            for i, since in self.pending.items()
        ):
            return []
        by_id = {self.jobs[i].job.id: i for i in self.running}
        if self.setup.order == "youngest":
            chosen = self._youngest(now_us)
        else:
            running = [
                Running(
                    self.jobs[i].job.id,
                    self.jobs[i].job.tenant,
                    self._priority(i),
                    PARTITION,
                    self.jobs[i].devices,
                    self._drawn_uj(i, now_us),
                    self.jobs[i].job.total_steps
                    * self._done_us(i, now_us)
                    // self.jobs[i].duration_us,
                    True,
                    None if (r := self.requeued_at_us.get(i)) is None else r // 1000,
                )
                for i in self.running
            ]
            picked, _ = victims(self.setup.policy, self._waiting(), running, now_us // 1000)
            chosen = [(by_id[v.claim], v.for_claim) for v in picked]
        for index, for_claim in chosen:
            self._requeue(index, for_claim, now_us)
        return self.dispatch(now_us) if chosen else []

    def _requeue(self, index: int, for_claim: str, now_us: int) -> None:
        """The act, through `reclaim.preemption_due`: told, then (notice_s 0) requeued."""
        policy = self.setup.policy
        now_ms = now_us // 1000
        told = preemption_due(policy, True, for_claim, RuleState(), now_ms)
        due = preemption_due(policy, True, for_claim, RuleState(notice_at_ms=now_ms), now_ms)
        if (told.kind, due.kind) != ("notice", "requeue"):
            raise SimulationConfigError(f"preemption_due says {told.kind}, then {due.kind}")
        job = self.jobs[index]
        done = self._done_us(index, now_us)
        kept = done // self.setup.checkpoint_us * self.setup.checkpoint_us
        a, d = job.actual.uj, job.duration_us
        self.wasted_uj[index] = (
            self.wasted_uj.get(index, 0) + energy_at(a, d, done) - energy_at(a, d, kept)
        )
        self.lost_gpu_us[index] = self.lost_gpu_us.get(index, 0) + (done - kept) * job.devices
        self.preempted[index] = self.preempted.get(index, 0) + 1
        self.progress_us[index] = kept
        del self.end_us[index]
        del self.running[index]
        self.free += job.devices
        self.busy -= job.devices
        self.pending[index] = now_us
        self.requeued_at_us[index] = now_us
        heapq.heappush(self.checks, now_us + policy.after_s * 1_000_000)


def tiers(sizes: Mapping[str, int], high_share: tuple[int, int] = (1, 4)) -> dict[str, int]:
    """Two priority tiers: the smallest VCs, smallest first (ties by id), while together they
    hold at most `high_share` of the nodes, get priority 1; the rest 0."""
    total = sum(sizes.values())
    num, den = high_share
    out = dict.fromkeys(sizes, 0)
    held = 0
    for vc in sorted(sizes, key=lambda v: (sizes[v], v)):
        if (held + sizes[vc]) * den > total * num:
            break
        held += sizes[vc]
        out[vc] = 1
    return out
