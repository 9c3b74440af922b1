"""Graded energy meters: figures from real counters, with their honest grade (standard §2.3).

pool/1 decides on figures that arrive already graded (§1.1). These are the sources that
grade them: RAPL through powercap, NVIDIA GPUs through NVML, DCGM exporter and Kepler over
Prometheus, and the TDP × time guess, each graded from the one table in `grades`. A meter
that cannot be read raises `MeterUnavailable` with its reason and never returns 0 (§2.7).
`feed` turns readings into what Pool takes: a release's actual and an idle observation.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from joulepool.meters.discovery import MeterStatus, discover, resolve
    from joulepool.meters.feed import (
        Accumulator,
        Occupants,
        claim_share,
        idle_observation,
        release_actual,
        sample_idle,
    )
    from joulepool.meters.grades import (
        GRADE_TABLE,
        GradeRow,
        MeterKind,
        grade_of,
        grade_table_markdown,
    )
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

# Each name is loaded from its module on first use (PEP 562): every `pool` command builds
# `pool meter`'s parser, and none but `pool meter` needs the meters themselves.
_WHERE = {
    "MeterStatus": "discovery",
    "discover": "discovery",
    "resolve": "discovery",
    "Accumulator": "feed",
    "Occupants": "feed",
    "claim_share": "feed",
    "idle_observation": "feed",
    "release_actual": "feed",
    "sample_idle": "feed",
    "GRADE_TABLE": "grades",
    "GradeRow": "grades",
    "MeterKind": "grades",
    "grade_of": "grades",
    "grade_table_markdown": "grades",
    "NvmlMeter": "nvml",
    "discover_nvml": "nvml",
    "DCGM_ENERGY": "prometheus",
    "KEPLER_ENERGY": "prometheus",
    "DcgmMeter": "prometheus",
    "KeplerMeter": "prometheus",
    "discover_prometheus": "prometheus",
    "DEFAULT_POWERCAP_ROOT": "rapl",
    "RaplMeter": "rapl",
    "discover_rapl": "rapl",
    "Meter": "reading",
    "MeterUnavailable": "reading",
    "Reading": "reading",
    "UnavailableReason": "reading",
    "energy_between": "reading",
    "now_us": "reading",
    "read_all": "reading",
    "TdpMeter": "tdp",
    "tdp_energy": "tdp",
}


def __getattr__(name: str) -> Any:
    """`joulepool.meters.NAME`, imported from its module when first asked for (§2.3)."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


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
