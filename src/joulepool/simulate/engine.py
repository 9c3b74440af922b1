"""The event loop: a trace replayed through the real `Pool`, one policy at a time.

Every decision is `Pool.submit` (the §4 `decide()` behind the facade, sealing an entry on
Admit) and every job end is `Pool.release`; the simulator decides nothing itself. It only
keeps the clock, the queue of claims that got Queue, and when to submit them again.

Order of events at one instant `t`, fixed so a replay is deterministic:

1. releases due at `t`, earliest admission first; each frees its devices (§6.2);
2. queued claims of every VC that released something, VCs in id order, each VC's claims in
   arrival order: each is submitted again and leaves the queue on Admit;
3. arrivals at `t`, in trace order (arrival time, VC id, line): each is submitted at once,
   so a small claim may start ahead of a larger one its VC queued earlier (pool/1 decides
   each claim against live usage; it keeps no queue of its own).

When a queued claim is submitted again: when something its verdict rests on may have
changed, going by the reason of its last Queue (§4.5). Admission only raises spent energy
and held devices, and a release that charges exactly its reservation (as here: the actual
is the estimate, see energy.py) only frees its own VC's devices. So on a release in its VC,
a claim last queued for `devices_held` is submitted again unless it needs more GPUs than
its VC has free (devices never borrow, DESIGN.md §3, so that verdict cannot change); a
claim queued for an energy reason waits, because no energy came back. A release charging
less than it reserved does give energy back, and then every VC's queue is retried. When no
event is left, every queued claim is submitted once more against the final usage, so the
reason reported for it is current and a claim this rule passed over would still start.
`eager_retry=True` submits every queued claim after every release instead; the tests
check that both give the same replay, ledger byte for byte.

Each claim is one gang: `gang_size` = the job's GPUs, one device per member, its class the
Gavel job type (recorded in the ledger for §2.6 history). The ledger's `at_ms` is
simulated time, so a replay with the same key gives the same bytes.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from joulepool.admission import Admit, Deny, DenyReason, Queue, QueueReason
from joulepool.claim import Claim
from joulepool.grade import Grade
from joulepool.ledger.keys import KeyPair
from joulepool.pool import Pool
from joulepool.simulate.energy import ModelledJob
from joulepool.simulate.errors import SimulationConfigError
from joulepool.simulate.policy import Policy
from joulepool.stores.base import Store
from joulepool.stores.memory import MemoryStore

STEWARD = "pool-simulate"


def simulation_key() -> KeyPair:
    """A fixed steward key: a simulated ledger is reproducible byte for byte, not secret."""
    return KeyPair.from_seed(STEWARD, hashlib.sha256(b"joulepool simulate").digest())


@dataclass(slots=True)
class JobOutcome:
    """What happened to one job under one policy."""

    job: ModelledJob
    first: str = ""
    start_us: int | None = None
    end_us: int | None = None
    borrowed_uj: int = 0
    deny_reason: DenyReason | None = None
    last_queue_reason: QueueReason | None = None
    queue_reasons: set[QueueReason] = field(default_factory=set)

    @property
    def started(self) -> bool:
        """Admitted at some point."""
        return self.start_us is not None

    @property
    def wait_us(self) -> int | None:
        """Queueing delay, arrival to admission; None (unknown) for a job never admitted."""
        if self.start_us is None:
            return None
        return self.start_us - self.job.job.arrival_us

    @property
    def guess_refused_borrowing(self) -> bool:
        """An Estimator claim that was refused surplus at least once (§4.4)."""
        if self.job.energy.grade is not Grade.Estimator:
            return False
        return (
            self.deny_reason is DenyReason.unobserved_cannot_borrow
            or QueueReason.guarantee_exhausted_may_not_borrow in self.queue_reasons
        )


@dataclass(slots=True)
class Run:
    """One policy's replay: every job's outcome, GPU occupancy over time, and the pool."""

    policy: Policy
    outcomes: list[JobOutcome]
    busy: list[tuple[int, int]]
    pool: Pool
    submissions: int = 0


def replay_trace(
    jobs: Sequence[ModelledJob],
    policy: Policy,
    *,
    store: Store | None = None,
    key: KeyPair | None = None,
    eager_retry: bool = False,
) -> Run:
    """Replay `jobs` (in arrival order) through a `Pool` over `policy.tree` (§3, §4, §6.2)."""
    arrivals = [m.job.arrival_us for m in jobs]
    if any(a > b for a, b in pairwise(arrivals)):
        raise SimulationConfigError("the jobs to replay must be in arrival order")
    now_us = 0
    pool = Pool(
        policy.tree,
        key if key is not None else simulation_key(),
        store if store is not None else MemoryStore(),
        clock=lambda: now_us // 1000,
    )
    outcomes = [JobOutcome(job) for job in jobs]
    claims = [
        Claim(
            id=m.job.id,
            entitlement=m.job.tenant,
            gang_size=m.job.gpus,
            devices_per_member=1,
            estimate=m.energy,
            class_=m.job.job_type,
        )
        for m in jobs
    ]
    queues: dict[str, list[int]] = {}
    ends: list[tuple[int, int, int]] = []  # (end_us, admission order, job index)
    admitted = 0
    busy = 0
    series: list[tuple[int, int]] = [(0, 0)]
    run = Run(policy, outcomes, series, pool)

    def submit(index: int) -> bool:
        nonlocal admitted, busy
        run.submissions += 1
        verdict = pool.submit(claims[index]).verdict
        out = outcomes[index]
        if not out.first:
            out.first = verdict.verdict
        if isinstance(verdict, Admit):
            out.start_us = now_us
            out.borrowed_uj = verdict.borrowed_uj
            busy += verdict.devices
            heapq.heappush(ends, (now_us + jobs[index].duration_us, admitted, index))
            admitted += 1
            return True
        if isinstance(verdict, Queue):
            out.last_queue_reason = verdict.reason
            out.queue_reasons.add(verdict.reason)
            return False
        assert isinstance(verdict, Deny)
        out.deny_reason = verdict.reason
        return True

    def retry(tenant: str, *, energy_freed: bool, everything: bool) -> None:
        waiting = queues.get(tenant)
        if not waiting:
            return
        limit = policy.tree[tenant].guarantee_devices
        keep: list[int] = []
        for index in waiting:
            free = limit - pool.state.usage.held_devices(tenant)
            # Devices never borrow, so a claim needing more than its VC has free would
            # Queue `devices_held` again; one queued on energy waits for energy to free.
            skip = claims[index].devices > free or (
                not energy_freed
                and outcomes[index].last_queue_reason is not QueueReason.devices_held
            )
            if (everything or not skip) and submit(index):
                continue
            keep.append(index)
        queues[tenant] = keep

    next_arrival = 0
    while True:
        if next_arrival == len(jobs) and not ends:
            # Nothing left to happen: every queued claim is decided once more against the
            # final usage, so the reason it is still waiting is today's, and a claim the
            # lazy retry rule passed over would start here rather than be lost.
            for tenant in sorted(queues):
                retry(tenant, energy_freed=True, everything=True)
            if not ends:
                break
        arrival_at = jobs[next_arrival].job.arrival_us if next_arrival < len(jobs) else None
        now_us = min(t for t in (arrival_at, ends[0][0] if ends else None) if t is not None)
        woken: set[str] = set()
        energy_freed = False
        while ends and ends[0][0] == now_us:
            _, _, index = heapq.heappop(ends)
            charged = jobs[index].energy
            pool.release(claims[index].id, charged)
            outcomes[index].end_us = now_us
            busy -= claims[index].devices
            woken.add(claims[index].entitlement)
            energy_freed |= charged.uj < claims[index].estimate.uj
        if woken and (eager_retry or energy_freed):
            woken.update(queues)
        for tenant in sorted(woken):
            retry(tenant, energy_freed=energy_freed, everything=eager_retry)
        while next_arrival < len(jobs) and jobs[next_arrival].job.arrival_us == now_us:
            index = next_arrival
            next_arrival += 1
            if not submit(index):
                queues.setdefault(claims[index].entitlement, []).append(index)
        if busy != series[-1][1]:
            if series[-1][0] == now_us:
                series[-1] = (now_us, busy)
            else:
                series.append((now_us, busy))
    return run
