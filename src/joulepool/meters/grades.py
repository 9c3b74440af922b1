"""The one table of grades for the figures joulepool's meters produce (standard §2.3, §2.5).

pool/1 decides on figures that arrive already graded (§1.1), and nothing in it can detect
a meter that lies about its provenance (§8). This table is where joulepool states, once,
what each source honestly is. Every meter takes its grade from here (`grade_of`), so no
meter can claim better; the per-claim column is what `joulepool.meters.feed` does with it,
through `joulepool.attribution.attribute()`, which never raises a grade.

| source | what it counts | grade of the reading | grade of a claim's figure |
|---|---|---|---|
| RAPL, Linux powercap `energy_uj` | the whole package (or its DRAM/core zone) | HwShunt | HwShunt where one gang holds the node for the window; shared: split by `attribute()`, ModelBased |
| NVML `nvmlDeviceGetTotalEnergyConsumption` | the whole GPU, mJ since driver load | HwShunt | HwShunt where one gang holds the GPU for the window; shared: split by `attribute()`, ModelBased |
| DCGM exporter `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` | the whole GPU, mJ, scraped | HwShunt | HwShunt where one gang holds the GPU for the window; shared: split by `attribute()`, ModelBased |
| Kepler `kepler_{pod,container}_{cpu,gpu}_joules_total` | a pod's or container's share, modelled from CPU time and utilisation | ModelBased | ModelBased at best |
| TDP × time (`joulepool.meters.tdp`) | a default-power guess, nobody measured | Estimator | Estimator: never evidence of idleness |
"""  # noqa: E501

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from joulepool.grade import Grade


class MeterKind(StrEnum):
    """The sources joulepool reads (§2.3)."""

    rapl = "rapl"
    nvml = "nvml"
    dcgm = "dcgm"
    kepler = "kepler"
    tdp = "tdp"


@dataclass(frozen=True, slots=True)
class GradeRow:
    """One row of the grade table: a source, what it counts, and the grades that follow (§2.3)."""

    kind: MeterKind
    source: str
    counts: str
    grade: Grade
    claim_figure: str


_WHOLE_DEVICE = (
    "HwShunt where one gang holds the {dev} for the window; "
    "shared: split by `attribute()`, ModelBased"
)

GRADE_TABLE: tuple[GradeRow, ...] = (
    GradeRow(
        MeterKind.rapl,
        "RAPL, Linux powercap `energy_uj`",
        "the whole package (or its DRAM/core zone)",
        Grade.HwShunt,
        _WHOLE_DEVICE.format(dev="node"),
    ),
    GradeRow(
        MeterKind.nvml,
        "NVML `nvmlDeviceGetTotalEnergyConsumption`",
        "the whole GPU, mJ since driver load",
        Grade.HwShunt,
        _WHOLE_DEVICE.format(dev="GPU"),
    ),
    GradeRow(
        MeterKind.dcgm,
        "DCGM exporter `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`",
        "the whole GPU, mJ, scraped",
        Grade.HwShunt,
        _WHOLE_DEVICE.format(dev="GPU"),
    ),
    GradeRow(
        MeterKind.kepler,
        "Kepler `kepler_{pod,container}_{cpu,gpu}_joules_total`",
        "a pod's or container's share, modelled from CPU time and utilisation",
        Grade.ModelBased,
        "ModelBased at best",
    ),
    GradeRow(
        MeterKind.tdp,
        "TDP × time (`joulepool.meters.tdp`)",
        "a default-power guess, nobody measured",
        Grade.Estimator,
        "Estimator: never evidence of idleness",
    ),
)

_BY_KIND = {row.kind: row for row in GRADE_TABLE}


def grade_of(kind: MeterKind) -> Grade:
    """The grade every reading of this kind of source carries, from the one table (§2.3)."""
    return _BY_KIND[kind].grade


def grade_table_markdown() -> str:
    """The grade table as Markdown, for the README and `pool meter list --grades` (§2.3)."""
    lines = [
        "| source | what it counts | grade of the reading | grade of a claim's figure |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {r.source} | {r.counts} | {r.grade.value} | {r.claim_figure} |" for r in GRADE_TABLE
    ]
    return "\n".join(lines) + "\n"
