"""The evaluation: every policy, on the same jobs and budget, over trace seeds × budgets.

Which jobs take part: every trace job whose VC has a size in `philly_vc.csv` and whose
type has a Gavel rate on the chosen GPU type. A VC with no size has no guarantee to give
it (a size of 0 would be a made-up figure), so its jobs are left out and counted, as are
jobs with no rate. Every policy replays exactly the same jobs with the same errors.

Budget periods are fixed-length, starting at the trace's first instant: a week is 7 days,
a month 30 days (`Schedule("fixed", ...)`, DESIGN.md §3), so every period of the replay is
whole. The budget is energy per period for the cluster, split among VCs by size. Every
policy is measured from the trace's start to the horizon: the last arrival plus
`drain_periods` periods, after which nothing is admitted and waiting jobs are censored.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

from joulepool.acts import RuntimePolicy
from joulepool.periods import DAY_MS, Schedule
from joulepool_sim.energy import (
    EnergyModel,
    ModelledJob,
    Unmodelled,
    read_power_profiles,
    read_throughputs,
)
from joulepool_sim.engine import (
    EARNED,
    GUESS,
    Admission,
    GpuTimeAdmission,
    PoolAdmission,
    Run,
    replay_trace,
)
from joulepool_sim.errors import SimulationConfigError
from joulepool_sim.estimates import ErrorModel, SimJob, simulated, with_timed_classes
from joulepool_sim.gpu_hours import GpuTimeQuota
from joulepool_sim.policy import (
    device_limits,
    device_only_policy,
    gpu_time_budgets,
    grade_blind_policy,
    pool1_policy,
    split_in_proportion,
    tiered_device_policy,
)
from joulepool_sim.preempt import ORDERS, Preemption, tiers
from joulepool_sim.summary import Percentile, Summary, censored_percentile, summarise
from joulepool_sim.trace import read_trace, read_vc_sizes

DEFAULT_DATA_DIR = Path(__file__).resolve().parent / "data" / "traces"
"""The traces shipped inside joulepool-sim (data/traces/README.md lists them, with their
licences): found beside this module, never relative to the working folder, so
`pool simulate` runs from a fresh clone anywhere. Seeds 0, 1 and 2 ship."""
DEFAULT_SAMPLE = 4
"""Every 4th job of each VC's trace file is replayed (lines 1, 5, 9, ...), on a quarter of
the cluster with a quarter of the budget: the whole grid then runs in minutes on 2 cores.
The sample keeps the trace's span, so every budget period of it is replayed."""
DEFAULT_GPUS = 176
"""A quarter of 352 Philly nodes (Helios's VC sizes) at 2 GPUs each, for the 1-in-4 sample."""
GPUS_PER_NODE = 2
DEFAULT_SEEDS = (0, 1, 2)
DEFAULT_BUDGETS_UJ = (6 * 10**15, 9 * 10**15, 12 * 10**15)
"""Cluster energy per week for the 1-in-4 sample: 6, 9 and 12 GJ, about 50%, 80% and 105% of
the modelled demand of an average week of seed 0's sampled arrivals."""
DEFAULT_TDP_W = 300
"""The V100 SXM2's rated board power, W: the figure TDP-modelled jobs draw."""
PERIOD_DAYS = {"week": 7, "month": 30}
DRAIN_PERIODS = 6
POLICY_ORDER = ("devices", "gpu_hours", "blind", "pool1")


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything a run depends on; the report states each of them."""

    data_dir: Path = DEFAULT_DATA_DIR
    seeds: tuple[int, ...] = DEFAULT_SEEDS
    trace_dir: Path | None = None
    budgets_uj: tuple[int, ...] = DEFAULT_BUDGETS_UJ
    period: str = "week"
    gpu_type: str = "v100"
    gpus: int = DEFAULT_GPUS
    tdp_w: int = DEFAULT_TDP_W
    first_jobs: int | None = None
    sample: int = DEFAULT_SAMPLE
    error_seed: int = 0
    error_median: Fraction = Fraction(2)
    error_sigma: Fraction = Fraction(1)
    drain_periods: int = DRAIN_PERIODS
    monthly: bool = True
    preemption: bool = True

    def trace_path(self, seed: int) -> Path:
        """The seed's trace folder under the data folder, or `--trace-dir` for every seed."""
        if self.trace_dir is not None:
            return self.trace_dir
        return self.data_dir / "philly-gavel" / f"seed{seed}"

    @property
    def throughputs_path(self) -> Path:
        """Gavel's throughputs."""
        return self.data_dir / "philly-gavel" / "simulation_throughputs.json"

    @property
    def sizes_path(self) -> Path:
        """Helios's Philly VC sizes."""
        return self.data_dir / "helios-vc" / "philly_vc.csv"

    @property
    def power_path(self) -> Path:
        """Zeus's measured power for the GPU type."""
        return self.data_dir / "zeus-power" / f"summary_power_{self.gpu_type}.csv"

    @property
    def schedule(self) -> Schedule:
        """Fixed-length periods from the trace's first instant (DESIGN.md §3)."""
        if self.period not in PERIOD_DAYS:
            raise SimulationConfigError(f"--period must be week or month, got {self.period!r}")
        return Schedule("fixed", PERIOD_DAYS[self.period] * DAY_MS, 0)

    @property
    def errors(self) -> ErrorModel:
        """Users' estimate error (estimates.py)."""
        return ErrorModel(self.error_seed, self.error_median, self.error_sigma)


@dataclass(slots=True)
class Trace:
    """One seed's jobs as replayed, and what was left out and why."""

    seed: int
    path: Path
    sizes: dict[str, int]
    jobs: list[SimJob]
    left_out_no_size: dict[str, int]
    unmodelled: list[Unmodelled]
    horizon_us: int

    @property
    def demand_uj(self) -> int:
        """The modelled energy every replayed job draws."""
        return sum(j.actual.uj for j in self.jobs)

    @property
    def gpu_us(self) -> int:
        """GPU-time every replayed job runs."""
        return sum(j.devices * j.duration_us for j in self.jobs)


@dataclass(slots=True)
class Cell:
    """Every policy's summary for one seed and one budget."""

    seed: int
    budget_uj: int
    budget_gpu_us: int
    summaries: dict[str, Summary]


@dataclass(slots=True)
class PreemptionRow:
    """One preemption replay (preempt.py): its summary, and its tiers' waits."""

    order: str
    summary: Summary
    high_jobs: int
    high_wait_median: Percentile | None
    high_wait_p95: Percentile | None
    low_wait_median: Percentile | None
    preemptions: int
    lost_gpu_us: int


@dataclass(slots=True)
class Evaluation:
    """The whole grid: the traces, the cells, and how long it took."""

    settings: Settings
    traces: dict[int, Trace] = field(default_factory=dict)
    cells: list[Cell] = field(default_factory=list)
    monthly: list[Cell] = field(default_factory=list)
    preemption: dict[int, list[PreemptionRow]] = field(default_factory=dict)
    high_tier: tuple[str, ...] = ()
    elapsed_ms: int = 0

    def cell(self, seed: int, budget_uj: int) -> Cell:
        """One seed and budget."""
        return next(c for c in self.cells if (c.seed, c.budget_uj) == (seed, budget_uj))

    @property
    def focus(self) -> Cell:
        """The cell the per-team sections show: the first seed, the middle budget."""
        s = self.settings
        return self.cell(s.seeds[0], s.budgets_uj[len(s.budgets_uj) // 2])


def load_trace(settings: Settings, seed: int) -> Trace:
    """Read, model and draw errors for one seed's jobs (energy.py, estimates.py)."""
    path = settings.trace_path(seed)
    if settings.sample < 1:
        raise SimulationConfigError(f"--sample must be at least 1, got {settings.sample}")
    trace = [j for j in read_trace(path) if (j.line - 1) % settings.sample == 0]
    if settings.first_jobs is not None:
        trace = trace[: settings.first_jobs]
    sizes_all = read_vc_sizes(settings.sizes_path)
    model = EnergyModel(
        read_throughputs(settings.throughputs_path, settings.gpu_type),
        read_power_profiles(settings.power_path),
        settings.tdp_w * 1_000_000,
    )
    errors = settings.errors
    no_size = Counter(j.tenant for j in trace if j.tenant not in sizes_all)
    jobs: list[SimJob] = []
    unmodelled: list[Unmodelled] = []
    for job in trace:
        if job.tenant not in sizes_all:
            continue
        modelled = model.model(job)
        if isinstance(modelled, ModelledJob):
            jobs.append(simulated(modelled, errors, GPUS_PER_NODE))
        else:
            unmodelled.append(modelled)
    if not jobs:
        raise SimulationConfigError("no job of the trace can be replayed: see the VC sizes")
    tenants = {j.job.tenant for j in jobs}
    sizes = {vc: n for vc, n in sizes_all.items() if vc in tenants}
    schedule = settings.schedule
    last = jobs[-1].job.arrival_us
    end_ms = schedule.period(schedule.index_at(last // 1000) + settings.drain_periods).start_ms
    assert end_ms is not None
    return Trace(seed, path, sizes, jobs, dict(no_size), unmodelled, end_ms * 1000)


def _summary(run: Run, key: str, title: str, trace: Trace, budget: int, gpus: int) -> Summary:
    shares = split_in_proportion(budget, trace.sizes)
    return summarise(run, key, title, shares, trace.sizes, budget, gpus)


RUNTIME_MARGIN_PCT = 10
"""The margin every runtime policy replayed here allows past the reservation (`margin_pct`)."""
RUNTIME_ORDER = ("pool1", "pool1_requeue", "pool1_cancel", "pool1_timed", "pool1_timed_cancel")
"""pool/1 holding runs to their reservation, and declaring classes that name run time."""
MONTHLY_ORDER = (
    "gpu_hours",
    "blind",
    "pool1",
    "pool1_cancel",
    "pool1_timed",
    "pool1_timed_cancel",
)
"""The policies replayed again with monthly periods (the first seed)."""
VARIANTS: dict[str, tuple[str, bool]] = {
    "pool1": ("report", False),
    "pool1_requeue": ("requeue", False),
    "pool1_cancel": ("cancel", False),
    "pool1_timed": ("report", True),
    "pool1_timed_cancel": ("cancel", True),
}
"""Each pool/1 variant: its `[runtime] over_reservation`, and whether its classes name the
requested run time (estimates.timed_class)."""


def _cell(
    settings: Settings,
    trace: Trace,
    schedule: Schedule,
    budget: int,
    keys: tuple[str, ...],
    horizon_us: int,
    timed: list[SimJob],
    say: Callable[[str], None],
    noun: str,
) -> Cell:
    """Every policy of `keys` but the device quota, for one trace and budget."""
    jobs, sizes = trace.jobs, trace.sizes
    limits = device_limits(pool1_policy(sizes, settings.gpus, budget).tree)
    # The same budget in GPU-time, at the replayed jobs' mean modelled power per GPU.
    budget_gpu_us = budget * trace.gpu_us // trace.demand_uj
    cell = Cell(trace.seed, budget, budget_gpu_us, {})
    shares = split_in_proportion(budget, sizes)

    def summary(run: Run, key: str, title: str) -> Summary:
        return summarise(run, key, title, shares, sizes, budget, settings.gpus)

    for key in keys:
        say(f"seed {trace.seed}, {budget:,} µJ a {noun}: {key}")
        if key == "gpu_hours":
            quota = GpuTimeQuota(limits, gpu_time_budgets(sizes, budget_gpu_us))
            adm: Admission = GpuTimeAdmission(jobs, quota, schedule)
            run = replay_trace(jobs, adm, limits, horizon_us=horizon_us)
            cell.summaries[key] = summary(run, key, "GPU-hour quota (GrpTRESMins)")
        elif key == "blind":
            blind = grade_blind_policy(sizes, settings.gpus, budget)
            adm = PoolAdmission(jobs, blind.tree, "blind", schedule)
            run = replay_trace(jobs, adm, limits, horizon_us=horizon_us)
            cell.summaries[key] = summary(run, key, blind.title)
        else:
            act, by_time = VARIANTS[key]
            replayed = timed if by_time else jobs
            tree = pool1_policy(sizes, settings.gpus, budget).tree
            runtime = RuntimePolicy(act, RUNTIME_MARGIN_PCT)
            adm = PoolAdmission(replayed, tree, EARNED, schedule, runtime=runtime)
            run = replay_trace(replayed, adm, limits, horizon_us=horizon_us)
            cell.summaries[key] = summary(run, key, key)
    return cell


PREEMPTION_SQUEEZE = 2
"""The preemption replay runs on 1/2 of the cluster's GPUs: at the full count the sampled
trace seldom fills the partition, and preemption has nothing to act on."""


def _preemption(settings: Settings, trace: Trace, schedule: Schedule) -> list[PreemptionRow]:
    """The device quota with two priority tiers, without preemption, with §5.2's order
    (`reclaim.victims`) and with Slurm's youngest-first choice (preempt.py)."""
    jobs, sizes = trace.jobs, trace.sizes
    ceiling: Counter[str] = Counter()
    for j in jobs:
        ceiling[j.job.tenant] += max(j.guess.uj, j.actual.uj)
    priority = tiers(sizes)
    gpus = settings.gpus // PREEMPTION_SQUEEZE
    policy = tiered_device_policy(sizes, gpus, dict(ceiling), priority)
    limits = device_limits(policy.tree)
    shares = {vc: policy.tree[vc].guarantee_uj for vc in sizes}
    rows = []
    for order in ORDERS:
        setup = Preemption(gpus, {vc: policy.tree[vc].priority for vc in sizes}, order)
        run = replay_trace(
            jobs,
            PoolAdmission(jobs, policy.tree, GUESS, schedule),
            limits,
            horizon_us=trace.horizon_us,
            preemption=setup,
        )
        s = summarise(run, order, order, shares, sizes, sum(shares.values()), gpus)
        assert run.slurm is not None

        def waits(high: bool, run: Run = run) -> list[tuple[int, bool]]:
            return [
                (o.wait_us, False)
                if o.wait_us is not None
                else (run.horizon_us - o.job.job.arrival_us, True)
                for o in run.outcomes
                if bool(priority[o.job.job.tenant]) == high
            ]

        high = waits(True)
        rows.append(
            PreemptionRow(
                order,
                s,
                len(high),
                censored_percentile(high, 50),
                censored_percentile(high, 95),
                censored_percentile(waits(False), 50),
                sum(run.slurm.preempted.values()),
                sum(run.slurm.lost_gpu_us.values()),
            )
        )
    return rows


def monthly_horizon_us(trace: Trace) -> int:
    """The first 30-day boundary at or after the weekly replay's horizon: every month whole,
    and no less time to drain than the weekly replay had."""
    month_us = PERIOD_DAYS["month"] * DAY_MS * 1000
    return -(-trace.horizon_us // month_us) * month_us


def evaluate(settings: Settings, progress: Callable[[str], None] | None = None) -> Evaluation:
    """Replay every seed under every policy and budget (§2.1, §2.2, §2.6, §4, §6), and the
    first seed again under monthly periods where the settings' periods are weekly."""
    say = progress if progress is not None else (lambda _: None)
    if settings.gpus < 1:
        raise SimulationConfigError(f"--gpus must be at least 1, got {settings.gpus}")
    if settings.tdp_w < 1:
        raise SimulationConfigError(f"--tdp-w must be at least 1, got {settings.tdp_w}")
    if not settings.seeds or not settings.budgets_uj:
        raise SimulationConfigError("give at least one seed and one budget")
    if any(b < 1 for b in settings.budgets_uj):
        raise SimulationConfigError("every budget must be at least 1 µJ")
    started = time.perf_counter_ns()
    evaluation = Evaluation(settings)
    schedule = settings.schedule
    keys = tuple(k for k in (*POLICY_ORDER, *RUNTIME_ORDER) if k != "devices")
    keys = tuple(dict.fromkeys(keys))
    for seed in settings.seeds:
        say(f"reading seed {seed}")
        trace = load_trace(settings, seed)
        evaluation.traces[seed] = trace
        jobs, sizes = trace.jobs, trace.sizes
        timed = with_timed_classes(jobs)
        ceiling: Counter[str] = Counter()
        for j in jobs:
            ceiling[j.job.tenant] += max(j.guess.uj, j.actual.uj)
        devices = device_only_policy(sizes, settings.gpus, dict(ceiling))
        limits = device_limits(devices.tree)
        say(f"seed {seed}: {len(jobs):,} jobs under {devices.title}")
        quota_run = replay_trace(
            jobs,
            PoolAdmission(jobs, devices.tree, GUESS, schedule),
            limits,
            horizon_us=trace.horizon_us,
        )
        for budget in settings.budgets_uj:
            cell = _cell(
                settings,
                trace,
                schedule,
                budget,
                keys,
                trace.horizon_us,
                timed,
                say,
                settings.period,
            )
            cell.summaries = {
                "devices": _summary(
                    quota_run, "devices", devices.title, trace, budget, settings.gpus
                )
            } | cell.summaries
            evaluation.cells.append(cell)
        if settings.preemption:
            say(f"seed {seed}: preemption, two priority tiers")
            evaluation.preemption[seed] = _preemption(settings, trace, schedule)
            evaluation.high_tier = tuple(sorted(vc for vc, p in tiers(sizes).items() if p))
        if seed == settings.seeds[0] and settings.period == "week" and settings.monthly:
            month = Schedule("fixed", PERIOD_DAYS["month"] * DAY_MS, 0)
            horizon = monthly_horizon_us(trace)
            for budget in settings.budgets_uj:
                monthly = budget * PERIOD_DAYS["month"] // PERIOD_DAYS["week"]
                evaluation.monthly.append(
                    _cell(
                        settings, trace, month, monthly, MONTHLY_ORDER, horizon, timed, say, "month"
                    )
                )
    evaluation.elapsed_ms = (time.perf_counter_ns() - started) // 1_000_000
    return evaluation
