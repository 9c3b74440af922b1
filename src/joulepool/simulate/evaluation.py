"""One evaluation: read the trace and data, model every job, replay it under both policies.

Which jobs take part: every trace job whose VC has a size in `philly_vc.csv` and whose
type has a Gavel rate on the chosen GPU type. A VC with no size has no guarantee to give
it (a size of 0 would be a made-up figure), so its jobs are left out and counted, as are
jobs with no rate. Both policies replay exactly the same jobs.

Guarantees (policy.py): the cluster's GPUs and the window's energy budget are each split
among the VCs in proportion to their node counts. The window is the whole trace.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from joulepool.simulate.energy import (
    EnergyModel,
    ModelledJob,
    Unmodelled,
    read_power_profiles,
    read_throughputs,
)
from joulepool.simulate.engine import replay_trace
from joulepool.simulate.errors import SimulationConfigError
from joulepool.simulate.policy import device_only_policy, pool1_policy
from joulepool.simulate.summary import PolicySummary, summarise
from joulepool.simulate.trace import read_trace, read_vc_sizes

DEFAULT_DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "traces"
"""The traces shipped inside the package (data/traces/README.md lists them, with their
licences): found beside this module, never relative to the working folder, so
`pool simulate` runs from a fresh clone anywhere. Only seed 0 ships; `--data-dir` takes a
folder of the same layout with the other seeds."""
DEFAULT_GPUS = 704
"""352 Philly nodes (Helios's VC sizes) at 2 GPUs each, the smaller of Philly's node types."""
DEFAULT_BUDGET_UJ = 500 * 10**15
"""500 GJ for the window: about 60% of what seed 0's replayed jobs are modelled to need."""
DEFAULT_TDP_W = 300
"""The V100 SXM2's rated board power, W: the guess an Estimator figure stands on."""


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything a run depends on; the report states each of them."""

    data_dir: Path = DEFAULT_DATA_DIR
    seed: int = 0
    trace_dir: Path | None = None
    gpu_type: str = "v100"
    gpus: int = DEFAULT_GPUS
    budget_uj: int = DEFAULT_BUDGET_UJ
    tdp_w: int = DEFAULT_TDP_W
    first_jobs: int | None = None

    @property
    def trace_path(self) -> Path:
        """The trace folder: `--trace-dir`, else the seed's folder under the data folder."""
        if self.trace_dir is not None:
            return self.trace_dir
        return self.data_dir / "philly-gavel" / f"seed{self.seed}"

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


@dataclass(slots=True)
class Evaluation:
    """Both policies' replays of the same jobs, and what was left out and why."""

    settings: Settings
    sizes: dict[str, int]
    jobs: list[ModelledJob]
    demand_uj: int
    left_out_no_size: dict[str, int]
    unmodelled: list[Unmodelled]
    policies: list[PolicySummary] = field(default_factory=list)
    elapsed_ms: int = 0

    def policy(self, key: str) -> PolicySummary:
        """One policy's summary by key (`pool1`, `devices`)."""
        return next(p for p in self.policies if p.key == key)

    @property
    def end_us(self) -> int:
        """The later of the two replays' ends: both are measured over the same span."""
        return max(p.last_event_us for p in self.policies)


def evaluate(settings: Settings, progress: Callable[[str], None] | None = None) -> Evaluation:
    """Replay the trace under pool/1 and under a device-count quota (§2.1, §2.2, §4)."""
    say = progress if progress is not None else (lambda _: None)
    if settings.gpus < 1:
        raise SimulationConfigError(f"--gpus must be at least 1, got {settings.gpus}")
    if settings.tdp_w < 1:
        raise SimulationConfigError(f"--tdp-w must be at least 1, got {settings.tdp_w}")
    started = time.perf_counter_ns()
    say(f"reading {settings.trace_path}")
    trace = read_trace(settings.trace_path)
    if settings.first_jobs is not None:
        trace = trace[: settings.first_jobs]
    sizes_all = read_vc_sizes(settings.sizes_path)
    model = EnergyModel(
        read_throughputs(settings.throughputs_path, settings.gpu_type),
        read_power_profiles(settings.power_path),
        settings.tdp_w * 1_000_000,
    )
    no_size = Counter(j.tenant for j in trace if j.tenant not in sizes_all)
    jobs: list[ModelledJob] = []
    unmodelled: list[Unmodelled] = []
    for job in trace:
        if job.tenant not in sizes_all:
            continue
        modelled = model.model(job)
        if isinstance(modelled, ModelledJob):
            jobs.append(modelled)
        else:
            unmodelled.append(modelled)
    if not jobs:
        raise SimulationConfigError("no job of the trace can be replayed: see the VC sizes")
    tenants = {j.job.tenant for j in jobs}
    sizes = {vc: n for vc, n in sizes_all.items() if vc in tenants}
    demand = sum(j.energy.uj for j in jobs)
    evaluation = Evaluation(settings, sizes, jobs, demand, dict(no_size), unmodelled)
    for policy in (
        pool1_policy(sizes, settings.gpus, settings.budget_uj),
        device_only_policy(sizes, settings.gpus, demand),
    ):
        say(f"replaying {len(jobs)} jobs under {policy.title}")
        evaluation.policies.append(summarise(replay_trace(jobs, policy)))
    evaluation.elapsed_ms = (time.perf_counter_ns() - started) // 1_000_000
    return evaluation
