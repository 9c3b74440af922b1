"""Graded energy meters: figures from real counters, with their honest grade (standard §2.3).

pool/1 decides on figures that arrive already graded (§1.1). These are the sources that
grade them: RAPL through powercap, NVIDIA GPUs through NVML, DCGM exporter and Kepler over
Prometheus, and the TDP × time guess, each graded from the one table in `grades`. A meter
that cannot be read raises `MeterUnavailable` with its reason and never returns 0 (§2.7).
`feed` turns readings into what Pool takes: a release's actual and an idle observation.
"""

from __future__ import annotations

from joulepool.meters.discovery import MeterStatus, discover, resolve
from joulepool.meters.feed import (
    Accumulator,
    Occupants,
    claim_share,
    idle_observation,
    release_actual,
    sample_idle,
)
from joulepool.meters.grades import GRADE_TABLE, GradeRow, MeterKind, grade_of, grade_table_markdown
from joulepool.meters.nvml import NvmlMeter, discover_nvml
from joulepool.meters.prometheus import (
    DCGM_ENERGY,
    KEPLER_ENERGY,
    DcgmMeter,
    KeplerMeter,
    discover_prometheus,
)
from joulepool.meters.rapl import DEFAULT_POWERCAP_ROOT, RaplMeter, discover_rapl
from joulepool.meters.reading import (
    Meter,
    MeterUnavailable,
    Reading,
    UnavailableReason,
    energy_between,
    now_us,
    read_all,
)
from joulepool.meters.tdp import TdpMeter, tdp_energy

__all__ = [
    "DCGM_ENERGY",
    "DEFAULT_POWERCAP_ROOT",
    "GRADE_TABLE",
    "KEPLER_ENERGY",
    "Accumulator",
    "DcgmMeter",
    "GradeRow",
    "KeplerMeter",
    "Meter",
    "MeterKind",
    "MeterStatus",
    "MeterUnavailable",
    "NvmlMeter",
    "Occupants",
    "RaplMeter",
    "Reading",
    "TdpMeter",
    "UnavailableReason",
    "claim_share",
    "discover",
    "discover_nvml",
    "discover_prometheus",
    "discover_rapl",
    "energy_between",
    "grade_of",
    "grade_table_markdown",
    "idle_observation",
    "now_us",
    "read_all",
    "release_actual",
    "resolve",
    "sample_idle",
    "tdp_energy",
]
