"""What users say a job will cost, and what the meter then charges (standard §2.3, §2.6, §4.4).

**The user's estimate is wrong, by a stated model.** Each job's estimate is its modelled
energy times a multiplier `m` drawn per job: `ln m ~ Normal(ln median, sigma)`, so the
median user reserves `median` times what the job draws, a minority reserve less than it
draws (an under-estimate), and the right tail is heavy. The defaults are a median of 2 and
a sigma of 1: about 24% of jobs under-estimate (`P(ln m < 0) = Φ(-ln 2)`), one in ten
over-estimates more than 7-fold. The multiplier is clamped to [1/16, 64]: a request is bounded
by what a queue accepts.

The shape, not the numbers, comes from published studies of user run-time estimates in
batch schedulers (Mu'alem & Feitelson, IEEE TPDS 12(6), 2001; Tsafrir, Etsion & Feitelson,
JSSPP 2005 and IEEE TPDS 18(6), 2007; Lee et al., JSSPP 2004): most estimates are
over-estimates spread over an order of magnitude or more, while a minority run past what
their users asked for. Those studies measured run time, not energy, on HPC logs, not GPU
clusters; the parameters here are an assumption the report states, not a fit.

The draw is seeded by the error seed and the job's id alone, so a job's error does not
depend on which other jobs are replayed. It is quantised to 1/1024 before it touches a
figure, and the estimate is `ceil(modelled × m)` µJ: integers from there on (DESIGN.md §2).
The user's figure is a guess, graded `Estimator`.

**The actual is measured.** Release charges the modelled figure (the simulation's truth),
graded `HwShunt` when the job holds whole nodes, the meter a bridge reads for an exclusive
node (README: Slurm's `ConsumedEnergyRaw`), and `ModelBased` when it shares a node, whose
reading must be divided among occupants (§2.5). So every released claim is evidence (§2.6).

The same multiplier scales the user's requested run time (`requested_us`), the figure a
GPU-hour quota (Slurm's `GrpTRESMins`) holds a job to: one user, one misjudgement.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass, replace
from fractions import Fraction

from joulepool.grade import Energy, Grade
from joulepool_sim.energy import ModelledJob
from joulepool_sim.errors import SimulationConfigError
from joulepool_sim.trace import TraceJob

QUANTUM = 1024
"""The multiplier's resolution: 1/1024, so a figure never carries a float's last bits."""
LOWEST = Fraction(1, 16)
HIGHEST = Fraction(64)


@dataclass(frozen=True, slots=True)
class ErrorModel:
    """Users' estimate error: a log-normal multiplier, its median and sigma stated (§2.3)."""

    seed: int = 0
    median: Fraction = Fraction(2)
    sigma: Fraction = Fraction(1)

    def __post_init__(self) -> None:
        if self.median <= 0:
            raise SimulationConfigError(f"the error median must be above 0, got {self.median}")
        if self.sigma < 0:
            raise SimulationConfigError(f"the error sigma must not be negative, got {self.sigma}")

    def multiplier(self, job: TraceJob) -> Fraction:
        """The user's estimate over the job's modelled energy, for this job (exact, clamped)."""
        digest = hashlib.sha256(f"{self.seed}\x00{job.id}".encode()).digest()
        rng = random.Random(int.from_bytes(digest[:8], "big"))
        # Floats are used for the draw alone; the figure is the quantised fraction.
        z = rng.gauss(0.0, 1.0)
        drawn = math.exp(math.log(self.median) + float(self.sigma) * z)
        m = Fraction(round(drawn * QUANTUM), QUANTUM)
        return min(HIGHEST, max(LOWEST, m))


def holds_whole_nodes(gpus: int, gpus_per_node: int) -> bool:
    """A gang holds whole nodes when its GPUs fill them exactly (nodes are not shared)."""
    return gpus % gpus_per_node == 0


@dataclass(frozen=True, slots=True)
class SimJob:
    """A trace job as the replay sees it: the user's guess, the measured actual, the class."""

    modelled: ModelledJob
    guess: Energy
    actual: Energy
    requested_us: int
    class_: str

    @property
    def job(self) -> TraceJob:
        """The trace line."""
        return self.modelled.job

    @property
    def duration_us(self) -> int:
        """How long it runs once started."""
        return self.modelled.duration_us

    @property
    def devices(self) -> int:
        """GPUs it holds: one device per gang member."""
        return self.modelled.job.gpus


def job_class(job: TraceJob) -> str:
    """The §2.6 class a claim declares: Gavel's job type (with its batch size) × gang size."""
    return f"{job.job_type} x{job.gpus}"


US_PER_HOUR = 3_600 * 1_000_000


def time_bucket_hours(requested_us: int) -> int:
    """The requested run time's bucket: the least power of two of hours at or above it."""
    whole_hours = -(-requested_us // US_PER_HOUR)
    return 1 << max(0, whole_hours - 1).bit_length()


def timed_class(job: SimJob) -> str:
    """The class an operator would declare with the requested run time: job type × gang
    size × the request bucketed in powers of two of hours (`≤ 1 h`, `≤ 2 h`, `≤ 4 h`, ...).
    The request carries the user's error (the same multiplier as the energy guess), so a
    class groups runs that their users expected to take about as long."""
    return f"{job_class(job.job)} <={time_bucket_hours(job.requested_us)}h"


def with_timed_classes(jobs: list[SimJob]) -> list[SimJob]:
    """The same jobs, each declaring `timed_class`."""
    return [replace(j, class_=timed_class(j)) for j in jobs]


def simulated(modelled: ModelledJob, errors: ErrorModel, gpus_per_node: int) -> SimJob:
    """The job with its user's guess (`Estimator`) and its measured actual (§2.3, §6.2)."""
    m = errors.multiplier(modelled.job)
    guess_uj = max(1, math.ceil(modelled.energy.uj * m))
    grade = (
        Grade.HwShunt if holds_whole_nodes(modelled.job.gpus, gpus_per_node) else Grade.ModelBased
    )
    return SimJob(
        modelled=modelled,
        guess=Energy(guess_uj, Grade.Estimator),
        actual=Energy(modelled.energy.uj, grade),
        requested_us=max(1, math.ceil(modelled.duration_us * m)),
        class_=job_class(modelled.job),
    )
