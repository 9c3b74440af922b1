"""How long each trace job runs and what energy it is charged, at an honest grade (§2.3).

No trace here carries a per-job energy reading, so every figure is a model:

- **Duration.** Gavel's `simulation_throughputs.json` gives steps per second by job type
  and gang size on each GPU type; a job runs `ceil(total_steps × 10⁶ / rate)` µs. The GPU
  type is a setting (default `v100`; Gavel and Zeus both measured V100 and P100; Gavel made
  each trace line's step count from a Philly run time and a measured rate). Gavel tabulates
  gangs of 1, 2, 4 and 8 (A3C and CycleGAN only 1); a gang it does not tabulate (16 GPUs,
  say) takes the rate of the largest tabulated gang below it, scaled linearly with the
  extra GPUs. That scaling is an assumption, and the jobs it touches are counted.
- **ModelBased** where a Zeus measured power profile is of the job's own model: Gavel's
  `ResNet-50 (batch size B)` is ResNet-50 on ImageNet, which Zeus measured on the same GPU
  type at the same batch sizes. The profile used is the one at Zeus's highest power limit
  (the unthrottled card); where Zeus lists several rows there, the highest average power
  is taken, since an under-reservation is the failure §2.6 warns of. Energy is
  `ceil(power × GPUs × duration)`. Zeus measured one GPU; a gang is charged that per GPU.
- **Estimator** everywhere else: TDP × GPUs × duration (`meters.tdp.tdp_energy`, rounded
  up); the TDP is a setting, by default the V100 SXM2's rated 300 W. Gavel's
  other job types (ResNet-18 on CIFAR-10, Transformer, LM, Recommendation, CycleGAN, A3C)
  have no Zeus profile of the same model and data: Zeus's nearest rows (ShuffleNet on
  CIFAR-100, BERT, DeepSpeech2, NCF on MovieLens-1M) are different networks, and lending
  their curves to these jobs would be a guess graded as a model, which §2.3 forbids.

The simulation hands `Pool` this figure as the claim's estimate and charges the same
figure, at the same grade, on release: with no reading of what the job really drew there
is nothing better to charge, and inventing a different "actual" would be a number nobody
measured.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from joulepool.grade import Energy, Grade
from joulepool.meters.tdp import tdp_energy
from joulepool_sim.errors import SimulationInputError
from joulepool_sim.trace import US_PER_S, TraceJob

_KEY = re.compile(r"^\('(?P<job_type>.+)', (?P<gpus>\d+)\)$")
_ZEUS_HEADER = [
    "dataset",
    "network",
    "batch_size",
    "optimizer",
    "power_limit",
    "time_per_epoch",
    "average_power",
]

# Gavel job type -> the Zeus (dataset, network) that is the same model on the same data.
PROFILE_MATCHES: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"^ResNet-50 \(batch size (?P<batch>\d+)\)$"), "imagenet", "resnet50"),
)


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not a number")


@dataclass(frozen=True, slots=True)
class Throughputs:
    """Steps per second by (job type, gang GPUs) on one GPU type, exact (Gavel)."""

    gpu_type: str
    rates: Mapping[tuple[str, int], Fraction]

    def rate(self, job_type: str, gpus: int) -> tuple[Fraction, bool] | None:
        """The steps per second of a gang, and whether it was scaled from a smaller gang.

        None where Gavel tabulates no positive rate for the job type at or below `gpus`.
        """
        exact = self.rates.get((job_type, gpus))
        if exact is not None and exact > 0:
            return exact, False
        below = [g for (t, g), r in self.rates.items() if t == job_type and g < gpus and r > 0]
        if not below:
            return None
        base = max(below)
        return self.rates[(job_type, base)] * gpus / base, True


def read_throughputs(path: Path, gpu_type: str) -> Throughputs:
    """Gavel's `simulation_throughputs.json`, the isolated (`null`) rates of one GPU type."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SimulationInputError(path, f"cannot read the throughputs ({exc.strerror})") from None
    try:
        doc = json.loads(text, parse_float=Fraction, parse_constant=_reject_constant)
    except ValueError as exc:
        raise SimulationInputError(path, f"not valid JSON ({exc})") from None
    if not isinstance(doc, dict) or gpu_type not in doc:
        known = ", ".join(sorted(doc)) if isinstance(doc, dict) else "none"
        raise SimulationInputError(path, f"no GPU type {gpu_type!r} (it has: {known})")
    rates: dict[tuple[str, int], Fraction] = {}
    table = doc[gpu_type]
    if not isinstance(table, dict):
        raise SimulationInputError(path, f"{gpu_type}: expected an object of job types")
    for key, entry in table.items():
        match = _KEY.match(key)
        if match is None:
            raise SimulationInputError(path, f"{gpu_type}: unreadable job key {key!r}")
        rate = entry.get("null") if isinstance(entry, dict) else None
        if isinstance(rate, int) and not isinstance(rate, bool):
            rate = Fraction(rate)
        if not isinstance(rate, Fraction) or rate < 0:
            raise SimulationInputError(
                path, f"{gpu_type} {key}: the isolated rate ('null') is not a non-negative number"
            )
        rates[(match["job_type"], int(match["gpus"]))] = rate
    return Throughputs(gpu_type, rates)


@dataclass(frozen=True, slots=True)
class PowerProfile:
    """Zeus's measured average power of one model at one batch size and power limit."""

    dataset: str
    network: str
    batch_size: int
    power_limit_w: int
    average_power_uw: int

    def describe(self) -> str:
        """The profile in words, for the report."""
        watts = Fraction(self.average_power_uw, US_PER_S)
        return (
            f"Zeus {self.dataset}/{self.network} batch {self.batch_size} at "
            f"{self.power_limit_w} W limit: {math.floor(watts)} W"
        )


def read_power_profiles(path: Path) -> dict[tuple[str, str, int], PowerProfile]:
    """Zeus `summary_power_<gpu>.csv`: per (dataset, network, batch), the profile at the
    highest power limit, the largest average power where several rows share it."""
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            rows = list(csv.reader(handle))
    except OSError as exc:
        raise SimulationInputError(
            path, f"cannot read the power profiles ({exc.strerror})"
        ) from None
    if not rows or rows[0] != _ZEUS_HEADER:
        raise SimulationInputError(path, f"expected the header {','.join(_ZEUS_HEADER)}", 1)
    best: dict[tuple[str, str, int], PowerProfile] = {}
    for number, row in enumerate(rows[1:], 2):
        if not row:
            continue
        if len(row) != len(_ZEUS_HEADER):
            raise SimulationInputError(path, f"expected 7 fields, found {len(row)}", number)
        dataset, network, batch, _opt, limit, _epoch, power = row
        try:
            batch_size, limit_w = int(batch), int(limit)
            watts = Fraction(power)
        except ValueError:
            raise SimulationInputError(
                path, "batch_size and power_limit must be integers, average_power a number", number
            ) from None
        if watts <= 0 or batch_size < 1 or limit_w < 1:
            raise SimulationInputError(path, "figures must be positive", number)
        profile = PowerProfile(dataset, network, batch_size, limit_w, math.ceil(watts * US_PER_S))
        key = (dataset, network, batch_size)
        held = best.get(key)
        if held is None or (profile.power_limit_w, profile.average_power_uw) > (
            held.power_limit_w,
            held.average_power_uw,
        ):
            best[key] = profile
    return best


@dataclass(frozen=True, slots=True)
class ModelledJob:
    """A trace job with its modelled duration and energy, and the basis of the figure."""

    job: TraceJob
    duration_us: int
    energy: Energy
    basis: str
    scaled_rate: bool


@dataclass(frozen=True, slots=True)
class Unmodelled:
    """A trace job no duration can be given for: Gavel has no rate for its type."""

    job: TraceJob
    reason: str


@dataclass(frozen=True, slots=True)
class EnergyModel:
    """Durations from Gavel's rates; energy from a matching Zeus profile, else TDP × time."""

    throughputs: Throughputs
    profiles: Mapping[tuple[str, str, int], PowerProfile]
    tdp_uw: int

    def profile_for(self, job_type: str) -> PowerProfile | None:
        """The Zeus profile of the job's own model and batch size, if Zeus measured it."""
        for pattern, dataset, network in PROFILE_MATCHES:
            match = pattern.match(job_type)
            if match is not None:
                return self.profiles.get((dataset, network, int(match["batch"])))
        return None

    def model(self, job: TraceJob) -> ModelledJob | Unmodelled:
        """The job's duration and energy at its grade (§2.3), or why there is none."""
        found = self.throughputs.rate(job.job_type, job.gpus)
        if found is None:
            return Unmodelled(
                job, f"no {self.throughputs.gpu_type} throughput for {job.job_type!r}"
            )
        rate, scaled = found
        duration_us = math.ceil(job.total_steps * US_PER_S / rate)
        profile = self.profile_for(job.job_type)
        if profile is not None:
            uj = -(-profile.average_power_uw * job.gpus * duration_us // US_PER_S)
            return ModelledJob(
                job, duration_us, Energy(uj, Grade.ModelBased), profile.describe(), scaled
            )
        energy = tdp_energy(self.tdp_uw * job.gpus, duration_us)
        tdp_w = Fraction(self.tdp_uw, US_PER_S)
        return ModelledJob(job, duration_us, energy, f"TDP {tdp_w} W × time", scaled)
