"""A GPU-hour budget per team per period: what Slurm's `GrpTRESMins` gives an operator.

pool/1 cannot express this baseline (its budgets are energy), so it is a small policy object
of its own, decided on hand-written cases in tests/simulate/test_gpu_hours.py.

The rules, in the order they are checked (the order of §4 where the two coincide):

1. a job needing more GPUs than its team's device limit (`GrpTRES=gres/gpu=N`) is refused:
   it can never start (`devices_exceed_guarantee`);
2. a job whose requested GPU-time (GPUs × its `--time` request) exceeds the team's whole
   budget for one period is refused: it can never start (`request_exceeds_budget`);
3. a job needing more GPUs than its team has free waits (`devices_held`);
4. a job whose requested GPU-time does not fit what is left of its team's budget for the
   current period waits (`gpu_time_exhausted`): Slurm's `AccountingStorageEnforce=safe`,
   which starts a job only if it can run to its time limit inside the limit;
5. otherwise it starts, and its requested GPU-time is held against the period it started in.

When it ends, the GPU-time it really ran replaces what it requested (Slurm charges elapsed
time, not the limit). A job is charged to the period it started in, whole, like a pool/1
claim (DESIGN.md §3); the budget renews at each period's start (`PriorityUsageResetPeriod`),
nothing carries over, and there is no borrowing: `GrpTRESMins` is a hard cap per association.
A job is not killed at its time limit: no policy here kills work, so they compare on the
same jobs run to completion.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from joulepool_sim.errors import SimulationConfigError

DEVICES_EXCEED = "devices_exceed_guarantee"
REQUEST_EXCEEDS = "request_exceeds_budget"
DEVICES_HELD = "devices_held"
EXHAUSTED = "gpu_time_exhausted"


@dataclass(frozen=True, slots=True)
class Decision:
    """`admit`, `queue` or `deny`, with the rule that decided it."""

    verdict: str
    reason: str = ""


@dataclass(slots=True)
class _Running:
    tenant: str
    gpus: int
    requested_gpu_us: int
    period: int


@dataclass(slots=True)
class GpuTimeQuota:
    """Per-team GPU limits and GPU-time budgets per period (GPU-µs), with live usage."""

    devices: Mapping[str, int]
    budget_gpu_us: Mapping[str, int]
    held: dict[str, int] = field(default_factory=dict)
    used: dict[tuple[int, str], int] = field(default_factory=dict)
    running: dict[str, _Running] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if set(self.devices) != set(self.budget_gpu_us):
            raise SimulationConfigError("every team needs both a GPU limit and a GPU-time budget")

    def used_gpu_us(self, tenant: str, period: int) -> int:
        """GPU-time charged and held against `tenant` in `period`."""
        return self.used.get((period, tenant), 0)

    def decide(self, tenant: str, gpus: int, requested_us: int, period: int) -> Decision:
        """The rules above, in order; pure: changes nothing."""
        if tenant not in self.devices:
            return Decision("deny", "unknown_entitlement")
        request = gpus * requested_us
        if gpus > self.devices[tenant]:
            return Decision("deny", DEVICES_EXCEED)
        if request > self.budget_gpu_us[tenant]:
            return Decision("deny", REQUEST_EXCEEDS)
        if self.held.get(tenant, 0) + gpus > self.devices[tenant]:
            return Decision("queue", DEVICES_HELD)
        if self.used_gpu_us(tenant, period) + request > self.budget_gpu_us[tenant]:
            return Decision("queue", EXHAUSTED)
        return Decision("admit")

    def start(self, job: str, tenant: str, gpus: int, requested_us: int, period: int) -> Decision:
        """Decide, and on admit hold the GPUs and the requested GPU-time."""
        decision = self.decide(tenant, gpus, requested_us, period)
        if decision.verdict == "admit":
            if job in self.running:
                raise SimulationConfigError(f"job {job} is already running")
            request = gpus * requested_us
            self.running[job] = _Running(tenant, gpus, request, period)
            self.held[tenant] = self.held.get(tenant, 0) + gpus
            self.used[(period, tenant)] = self.used_gpu_us(tenant, period) + request
        return decision

    def finish(self, job: str, ran_us: int) -> int:
        """The job ended after `ran_us`: its GPU-time replaces its request; what it was charged."""
        run = self.running.pop(job, None)
        if run is None:
            raise SimulationConfigError(f"job {job} is not running")
        charged = run.gpus * ran_us
        self.held[run.tenant] -= run.gpus
        key = (run.period, run.tenant)
        self.used[key] = self.used[key] - run.requested_gpu_us + charged
        return charged
