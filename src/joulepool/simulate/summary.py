"""What one policy's replay amounts to, per VC, with energy read back from its ledger (§6.1).

Energy spent and borrowed are not the simulator's own sums: the ledger is replayed (every
signature and link verified) and its usage is what the report states. The simulator's
per-job records give the rest: verdicts, reasons, queueing delays.

Queueing delay is known only for a job that started; a job still waiting when the replay
ends has no delay to report (unknown is not a value), so it is counted, by the reason its
last verdict gave, and left out of the median and p95 rather than given a made-up one.
Percentiles are nearest-rank over whole microseconds.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from joulepool.grade import Grade
from joulepool.ledger.replay import replay
from joulepool.simulate.engine import Run
from joulepool.tree import Usage


def nearest_rank(values: Sequence[int], percent: int) -> int | None:
    """The nearest-rank percentile of `values`; None for no values (nothing to rank)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(1, math.ceil(percent * len(ordered) / 100)) - 1]


@dataclass(frozen=True, slots=True)
class TenantSummary:
    """One VC's outcome under one policy."""

    vc: str
    guarantee_uj: int
    guarantee_devices: int
    weight: int
    jobs: int
    model_based_jobs: int
    demand_uj: int
    spent_uj: int
    borrowed_uj: int
    admitted_at_once: int
    admitted_after_queue: int
    still_queued: dict[str, int]
    denied: dict[str, int]
    wait_median_us: int | None
    wait_p95_us: int | None
    guesses_refused_borrowing: int

    @property
    def started(self) -> int:
        """Jobs admitted at some point."""
        return self.admitted_at_once + self.admitted_after_queue


@dataclass(frozen=True, slots=True)
class PolicySummary:
    """One policy's replay, per VC and for the cluster."""

    key: str
    title: str
    tenants: list[TenantSummary]
    ledger_entries: int
    ledger_head: str
    busy: list[tuple[int, int]]
    gpus: int
    submissions: int
    borrowed_uj_by_grade: dict[str, int]

    def tenant(self, vc: str) -> TenantSummary:
        """The summary of one VC."""
        return next(t for t in self.tenants if t.vc == vc)

    def mean_utilisation(self, until_us: int) -> Fraction | None:
        """Busy GPU-time over cluster GPU-time from 0 to `until_us`; None for an empty span."""
        if until_us <= 0:
            return None
        area = 0
        for (t, level), (t_next, _) in zip(self.busy, [*self.busy[1:], (until_us, 0)], strict=True):
            area += level * (min(t_next, until_us) - min(t, until_us))
        return Fraction(area, self.gpus * until_us)

    @property
    def last_event_us(self) -> int:
        """When the last GPU was freed."""
        return self.busy[-1][0]


def summarise(run: Run) -> PolicySummary:
    """Summarise a replay; energy comes from replaying its ledger, verified (§6.1, §6.4)."""
    pool = run.pool
    replayed = replay(pool.entries(), pool.key.kid, pool.key.public_key, run.policy.tree)
    usage: Usage = replayed.state.usage
    tree = run.policy.tree
    tenants = []
    for vc in run.policy.vcs():
        ent = tree[vc]
        mine = [o for o in run.outcomes if o.job.job.tenant == vc]
        waits = [w for o in mine if (w := o.wait_us) is not None]
        spent = usage.spent_uj(vc)
        tenants.append(
            TenantSummary(
                vc=vc,
                guarantee_uj=ent.guarantee_uj,
                guarantee_devices=ent.guarantee_devices,
                weight=ent.over_quota_weight,
                jobs=len(mine),
                model_based_jobs=sum(o.job.energy.grade is Grade.ModelBased for o in mine),
                demand_uj=sum(o.job.energy.uj for o in mine),
                spent_uj=spent,
                borrowed_uj=usage.of(vc).borrowed_uj(ent.guarantee_uj),
                admitted_at_once=sum(o.first == "admit" for o in mine),
                admitted_after_queue=sum(o.started and o.first == "queue" for o in mine),
                still_queued=dict(
                    Counter(
                        o.last_queue_reason.value
                        for o in mine
                        if not o.started and o.deny_reason is None and o.last_queue_reason
                    )
                ),
                denied=dict(Counter(o.deny_reason.value for o in mine if o.deny_reason)),
                wait_median_us=nearest_rank(waits, 50),
                wait_p95_us=nearest_rank(waits, 95),
                guesses_refused_borrowing=sum(o.guess_refused_borrowing for o in mine),
            )
        )
    return PolicySummary(
        key=run.policy.key,
        title=run.policy.title,
        tenants=tenants,
        ledger_entries=replayed.length,
        ledger_head=replayed.head.hex(),
        busy=list(run.busy),
        # Devices never borrow, so the device guarantees together are the cluster.
        gpus=sum(tree[vc].guarantee_devices for vc in run.policy.vcs()),
        submissions=run.submissions,
        borrowed_uj_by_grade={
            grade.value: sum(
                o.borrowed_uj for o in run.outcomes if o.started and o.job.energy.grade is grade
            )
            for grade in Grade
        },
    )
