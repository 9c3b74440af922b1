"""What one policy's replay amounts to, read back from its verified ledger (§6.1).

For every policy run through `Pool` (pool/1, the device quota, the grade-blind quota), the
energy figures are not the simulator's own sums: the ledger is replayed entry by entry
(every signature and link verified) and each claim's reservation, loan, period and actual
charge are read from its `Admitted` and `Released` entries. The GPU-hour quota keeps no
ledger (it is not pool/1); its energy is the measured actual of the jobs it started.

Figures per budget period `p` and team `T`, with `g` its energy guarantee per period:
- spent `s(T,p)`: what its claims admitted in `p` were charged (DESIGN.md §3);
- beyond its own guarantee: `max(0, s − g)`, energy other teams' guarantees paid for;
- overrun: `max(0, s − g − share)`, where `share = floor(L × w / W)` is its weighted share
  (§2.2) of the other teams' guarantees left unspent at the period's end (`L`): energy
  beyond what pool/1 would ever have let it borrow;
- beyond the budget: over the cluster, `max(0, Σ s(·,p) − budget)`.

Queueing delay is over every job. A job never started by the horizon is censored there
(its wait is at least `horizon − arrival`), a job refused (Deny) likewise: both are counted
at that lower bound, never dropped. A percentile is then a lower bound, and is marked so
(`at_least`) when any censored wait is at or below it. Percentiles are nearest-rank over
whole microseconds; ratios are exact fractions (DESIGN.md §2).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from joulepool.events import Admitted, Released
from joulepool.grade import Grade
from joulepool.ledger.replay import Replayer
from joulepool_sim.engine import EARNED, GUESS, JobOutcome, PoolAdmission, Run


@dataclass(frozen=True, slots=True)
class Percentile:
    """A nearest-rank percentile; `at_least` where censored waits make it a lower bound."""

    us: int
    at_least: bool


def censored_percentile(waits: Sequence[tuple[int, bool]], percent: int) -> Percentile | None:
    """The percentile of (wait, censored) pairs; None for no jobs."""
    if not waits:
        return None
    ordered = sorted(waits)
    value = ordered[max(1, math.ceil(percent * len(ordered) / 100)) - 1][0]
    return Percentile(value, any(c and w <= value for w, c in ordered))


def jain(values: Sequence[Fraction]) -> Fraction | None:
    """Jain's fairness index `(Σx)² / (n Σx²)`: 1 when all are equal; None with nothing."""
    squares = sum(x * x for x in values)
    if not values or squares == 0:
        return None
    return sum(values, Fraction(0)) ** 2 / (len(values) * squares)


@dataclass(slots=True)
class Ledgered:
    """A claim as its ledger entries state it."""

    tenant: str
    class_: str | None
    reserved_uj: int
    reserved_grade: Grade
    borrowed_uj: int
    at_ms: int
    actual_uj: int | None = None
    released_ms: int | None = None


@dataclass(frozen=True, slots=True)
class PeriodRow:
    """One budget period over the cluster (question 1)."""

    index: int
    budget_uj: int
    spent_uj: int
    within_uj: int
    borrowed_uj: int
    beyond_uj: int
    overrun_uj: int


@dataclass(frozen=True, slots=True)
class Reservation:
    """Claims admitted on one kind of estimate: how far the reservation missed the actual."""

    claims: int
    actual_uj: int
    over_uj: int
    under_uj: int
    guess_over_uj: int
    guess_under_uj: int


@dataclass(slots=True)
class Summary:
    """One policy's replay, for the cluster and per team."""

    key: str
    title: str
    jobs: int
    started: int
    denied: int
    censored: int
    spent_uj: int
    budget_uj: int
    periods: list[PeriodRow]
    spent_by_team: dict[str, int]
    guarantee_by_team: dict[str, int]
    borrowed_uj: int
    borrowed_on_guess_uj: int
    borrowed_on_earned_uj: int
    wait_all_median: Percentile | None
    wait_all_p95: Percentile | None
    wait_started_median: int | None
    utilisation: Fraction | None
    busy: list[tuple[int, int]]
    gpus: int
    fairness: Fraction | None
    renewal_admits: int
    renewal_wait_median_us: int | None
    overrun_by_team: dict[str, int] = field(default_factory=dict)
    reservations: dict[str, Reservation] = field(default_factory=dict)
    class_earned_days: list[int] = field(default_factory=list)
    classes: int = 0
    submitted_earned: int = 0
    ledger_entries: int | None = None
    ledger_head: str | None = None
    completed: int = 0
    acts: dict[str, int] = field(default_factory=dict)
    wasted_uj: int = 0
    earned_claims: int = 0
    earned_under: int = 0
    earned_ratio_median: Fraction | None = None
    earned_ratio_p90: Fraction | None = None

    @property
    def beyond_budget_uj(self) -> int:
        """Σ over periods of the cluster's spending beyond that period's budget."""
        return sum(max(0, p.spent_uj - p.budget_uj) for p in self.periods)

    @property
    def beyond_guarantee_uj(self) -> int:
        """Σ over periods and teams of spending beyond the team's own guarantee."""
        return sum(p.beyond_uj for p in self.periods)

    @property
    def overrun_uj(self) -> int:
        """Σ over periods and teams of spending beyond guarantee plus weighted share."""
        return sum(p.overrun_uj for p in self.periods)

    @property
    def per_completed_uj(self) -> int | None:
        """Energy per completed job, rounded up; None when none completed."""
        return -(-self.spent_uj // self.started) if self.started else None


def read_ledger(adm: PoolAdmission) -> tuple[dict[str, Ledgered], Replayer]:
    """Every claim as the pool's ledger states it, every entry verified (§6.1, §6.4)."""
    pool = adm.pool
    replayer = Replayer(pool.key.kid, pool.key.public_key, pool.tree, adm.schedule)
    claims: dict[str, Ledgered] = {}
    for raw in pool.entries():
        event = replayer.feed(raw)
        if isinstance(event, Admitted):
            claims[event.claim] = Ledgered(
                event.entitlement,
                event.class_,
                event.reserved.uj,
                event.reserved.grade,
                event.borrowed_uj,
                event.at_ms,
            )
        elif isinstance(event, Released):
            claim = claims[event.claim]
            claim.actual_uj = event.actual.uj
            claim.released_ms = event.at_ms
    return claims, replayer


def _weighted_share(
    spent: Mapping[str, int], g: Mapping[str, int], w: Mapping[str, int], team: str
) -> int:
    lendable = sum(max(0, g[t] - spent.get(t, 0)) for t in g if t != team)
    return lendable * w[team] // sum(w.values())


def summarise(
    run: Run,
    key: str,
    title: str,
    guarantees: Mapping[str, int],
    weights: Mapping[str, int],
    budget_uj: int,
    gpus: int,
    required_evidence: int = 3,
) -> Summary:
    """Summarise a replay; for a `Pool` policy every energy figure comes from its ledger."""
    adm = run.admission
    schedule = adm.schedule
    outcomes = run.outcomes
    by_id = {o.job.job.id: o for o in outcomes}
    periods = sorted({schedule.index_at(t // 1000) for t in (0, run.horizon_us - 1)})
    first, last = periods[0], periods[-1]
    spent: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    borrowed: dict[int, int] = defaultdict(int)
    on_guess = on_earned = 0
    entries = head = None
    released_by_class: dict[str, list[int]] = defaultdict(list)
    claims: dict[str, Ledgered] = {}
    if isinstance(adm, PoolAdmission):
        claims, replayer = read_ledger(adm)
        entries, head = replayer.length, replayer.head.hex()
        for team in guarantees:
            for fig in replayer.state.periods_of(team):
                spent[fig.period.index][team] += fig.committed_uj
        for claim_id, c in claims.items():
            borrowed[schedule.index_at(c.at_ms)] += c.borrowed_uj
            if by_id[claim_id].source == EARNED:
                on_earned += c.borrowed_uj
            else:
                on_guess += c.borrowed_uj
            if c.class_ is not None and c.released_ms is not None:
                released_by_class[c.class_].append(c.released_ms)
    else:
        for o in outcomes:
            if o.start_us is not None:
                p = schedule.index_at(o.start_us // 1000)
                spent[p][o.job.job.tenant] += o.job.actual.uj
    rows = []
    overrun_by_team: dict[str, int] = dict.fromkeys(guarantees, 0)
    for p in range(first, last + 1):
        s = spent.get(p, {})
        beyond = sum(max(0, s.get(t, 0) - g) for t, g in guarantees.items())
        overruns = {
            t: max(0, s.get(t, 0) - g - _weighted_share(s, guarantees, weights, t))
            for t, g in guarantees.items()
        }
        for t, uj in overruns.items():
            overrun_by_team[t] += uj
        overrun = sum(overruns.values())
        rows.append(
            PeriodRow(
                p,
                budget_uj,
                sum(s.values()),
                sum(min(s.get(t, 0), g) for t, g in guarantees.items()),
                borrowed.get(p, 0),
                beyond,
                overrun,
            )
        )
    by_team: dict[str, int] = defaultdict(int)
    for s in spent.values():
        for t, uj in s.items():
            by_team[t] += uj
    horizon = run.horizon_us
    waits = [
        (o.wait_us, False) if o.wait_us is not None else (horizon - o.job.job.arrival_us, True)
        for o in outcomes
    ]
    started_waits = sorted(w for w, c in waits if not c)
    renewal = sorted(w for o in outcomes if o.at_renewal and (w := o.wait_us) is not None)
    area = 0
    for (at, level), (after, _) in zip(run.busy, [*run.busy[1:], (horizon, 0)], strict=True):
        area += level * max(0, min(after, horizon) - min(at, horizon))
    n_periods = last - first + 1
    shares = [Fraction(by_team.get(t, 0), g * n_periods) for t, g in sorted(guarantees.items())]
    summary = Summary(
        key=key,
        title=title,
        jobs=len(outcomes),
        started=sum(o.started for o in outcomes),
        denied=sum(o.deny_reason is not None for o in outcomes),
        censored=sum(not o.started and o.deny_reason is None for o in outcomes),
        spent_uj=sum(by_team.values()),
        budget_uj=budget_uj * n_periods,
        periods=rows,
        spent_by_team=dict(by_team),
        guarantee_by_team=dict(guarantees),
        borrowed_uj=sum(borrowed.values()),
        borrowed_on_guess_uj=on_guess,
        borrowed_on_earned_uj=on_earned,
        wait_all_median=censored_percentile(waits, 50),
        wait_all_p95=censored_percentile(waits, 95),
        wait_started_median=started_waits[(len(started_waits) - 1) // 2] if started_waits else None,
        utilisation=Fraction(area, gpus * horizon) if horizon > 0 else None,
        busy=list(run.busy),
        gpus=gpus,
        fairness=jain(shares),
        renewal_admits=len(renewal),
        renewal_wait_median_us=renewal[(len(renewal) - 1) // 2] if renewal else None,
        ledger_entries=entries,
        ledger_head=head,
        overrun_by_team=overrun_by_team,
    )
    summary.completed = sum(o.completed for o in outcomes)
    for o in outcomes:
        if o.act is not None:
            summary.acts[o.act] = summary.acts.get(o.act, 0) + 1
    if claims:
        _runtime(summary, claims, by_id)
        summary.reservations = _reservations(claims, by_id)
        summary.submitted_earned = sum(o.source == EARNED for o in outcomes if o.started)
        summary.classes = len({o.job.class_ for o in outcomes})
        summary.class_earned_days = _earned_days(released_by_class, required_evidence)
    return summary


def nearest_rank(values: Sequence[Fraction], percent: int) -> Fraction | None:
    """The nearest-rank percentile of exact ratios; None for none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(1, math.ceil(percent * len(ordered) / 100)) - 1]


def _runtime(
    summary: Summary, claims: Mapping[str, Ledgered], by_id: Mapping[str, JobOutcome]
) -> None:
    """Wasted energy and the tightness of earned estimates, read from the ledger: a
    cancelled claim's charged actual is all wasted; a requeued (or preempted) one's charge past what the
    job draws in one uninterrupted run (the simulation's truth) is the work it redid.
    Tightness: each claim admitted on an earned estimate, its ledgered reservation over
    what the job draws."""
    ratios: list[Fraction] = []
    for claim_id, c in claims.items():
        o = by_id[claim_id]
        draws = o.job.actual.uj
        if c.actual_uj is not None and o.act == "cancel":
            summary.wasted_uj += c.actual_uj
        elif c.actual_uj is not None and (o.act == "requeue" or o.preempted):
            summary.wasted_uj += c.actual_uj - draws
        if o.source == EARNED:
            ratios.append(Fraction(c.reserved_uj, draws))
            summary.earned_under += c.reserved_uj < draws
    summary.earned_claims = len(ratios)
    summary.earned_ratio_median = nearest_rank(ratios, 50)
    summary.earned_ratio_p90 = nearest_rank(ratios, 90)


def _reservations(
    claims: Mapping[str, Ledgered], by_id: Mapping[str, JobOutcome]
) -> dict[str, Reservation]:
    out: dict[str, Reservation] = {}
    for source in (GUESS, EARNED):
        n = actual = over = under = g_over = g_under = 0
        for claim_id, c in claims.items():
            o = by_id[claim_id]
            if o.source != source or c.actual_uj is None:
                continue
            job = o.job
            n += 1
            actual += c.actual_uj
            over += max(0, c.reserved_uj - c.actual_uj)
            under += max(0, c.actual_uj - c.reserved_uj)
            g_over += max(0, job.guess.uj - c.actual_uj)
            g_under += max(0, c.actual_uj - job.guess.uj)
        out[source] = Reservation(n, actual, over, under, g_over, g_under)
    return out


def _earned_days(released_by_class: Mapping[str, list[int]], required: int) -> list[int]:
    """For each class that earned an estimate, the day (since the trace's start) it did:
    the release of its `required`-th measured claim. Every actual here is measured (§2.6)."""
    days = []
    for times in released_by_class.values():
        ordered = sorted(times)
        if len(ordered) >= max(1, required):
            days.append(ordered[max(1, required) - 1] // 86_400_000)
    return sorted(days)
