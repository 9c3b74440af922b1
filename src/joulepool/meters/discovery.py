"""What meters this host has, at what grade and resolution, and why a missing one is missing.

Every source is probed by reading it once, so "available" means a figure really came back;
a source that gave none is listed with the reason and what to do, never left out, since
an operator who cannot see why a meter is absent will reach for the TDP guess (§2.3, §2.7).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from joulepool.errors import InvalidInput
from joulepool.grade import Grade
from joulepool.meters.grades import MeterKind, grade_of
from joulepool.meters.nvml import NvmlMeter, discover_nvml
from joulepool.meters.prometheus import DEFAULT_TIMEOUT_MS, discover_prometheus
from joulepool.meters.rapl import DEFAULT_POWERCAP_ROOT, RaplMeter, discover_rapl
from joulepool.meters.reading import Meter, MeterUnavailable, UnavailableReason


@dataclass(frozen=True, slots=True)
class MeterStatus:
    """One line of `pool meter list`: a meter, or a source with none, and its state (§2.3).

    `kind` and `grade` are None only for an endpoint that answered with neither DCGM nor
    Kepler series, or did not answer. `resolution_uj` is the probe reading's, where one came.
    """

    name: str
    kind: MeterKind | None
    grade: Grade | None
    available: bool
    resolution_uj: int | None
    reason: UnavailableReason | None
    detail: str
    meter: Meter | None = None

    def to_json(self) -> dict[str, object]:
        """The status as JSON, for `pool meter list --json` (§2.3)."""
        return {
            "name": self.name,
            "kind": None if self.kind is None else self.kind.value,
            "grade": None if self.grade is None else self.grade.value,
            "available": self.available,
            "resolution_uj": self.resolution_uj,
            "reason": None if self.reason is None else self.reason.value,
            "detail": self.detail,
        }


def _probe(meter: Meter, detail: str) -> MeterStatus:
    try:
        reading = meter.read()
    except MeterUnavailable as exc:
        return MeterStatus(
            meter.name, meter.kind, meter.grade, False, None, exc.reason, exc.explanation, meter
        )
    return MeterStatus(
        meter.name, meter.kind, meter.grade, True, reading.resolution_uj, None, detail, meter
    )


def _missing(name: str, kind: MeterKind | None, exc: MeterUnavailable) -> MeterStatus:
    grade = None if kind is None else grade_of(kind)
    return MeterStatus(name, kind, grade, False, None, exc.reason, exc.explanation)


def rapl_status(root: Path | str = DEFAULT_POWERCAP_ROOT) -> list[MeterStatus]:
    """Every RAPL zone under `root`, probed; or one line saying why there are none (§2.3)."""
    base = Path(root)
    meters = discover_rapl(base)
    if not meters:
        if not base.is_dir():
            why = f"no {base}: a kernel without powercap, or a container that does not mount it"
        else:
            why = f"no intel-rapl zones under {base}: not exposed on this CPU, VM or container"
        return [
            _missing(
                "rapl",
                MeterKind.rapl,
                MeterUnavailable("rapl", UnavailableReason.missing_device, why),
            )
        ]
    out = []
    for meter in meters:
        zone = meter.zone_name()
        out.append(_probe(meter, f"{zone or 'zone'} at {meter.path}"))
    return out


def nvml_status() -> list[MeterStatus]:
    """Every GPU NVML sees, probed; or one line saying why NVML gives none (§2.3)."""
    try:
        meters = discover_nvml()
    except MeterUnavailable as exc:
        return [_missing("nvml", MeterKind.nvml, exc)]
    if not meters:
        why = "the NVIDIA driver is loaded but sees no GPU"
        return [
            _missing(
                "nvml",
                MeterKind.nvml,
                MeterUnavailable("nvml", UnavailableReason.missing_device, why),
            )
        ]
    return [_probe(m, m.describe() or "NVIDIA GPU") for m in meters]


def prometheus_status(url: str, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> list[MeterStatus]:
    """Every DCGM GPU and Kepler series an endpoint offers, read from one scrape (§2.3)."""
    try:
        scraped, meters = discover_prometheus(url, timeout_ms)
    except MeterUnavailable as exc:
        return [_missing(url, None, exc)]
    if not meters:
        why = (
            f"{url} answered, with no DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION and no "
            "kepler_*_joules_total series"
        )
        return [_missing(url, None, MeterUnavailable(url, UnavailableReason.not_found, why))]
    out = []
    for meter in meters:
        try:
            reading = meter.reading_from(scraped)
        except MeterUnavailable as exc:
            out.append(
                MeterStatus(
                    meter.name,
                    meter.kind,
                    meter.grade,
                    False,
                    None,
                    exc.reason,
                    exc.explanation,
                    meter,
                )
            )
            continue
        out.append(
            MeterStatus(
                meter.name, meter.kind, meter.grade, True, reading.resolution_uj, None, url, meter
            )
        )
    return out


def discover(
    powercap_root: Path | str = DEFAULT_POWERCAP_ROOT,
    prometheus_urls: Iterable[str] = (),
    nvml: bool = True,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
) -> list[MeterStatus]:
    """What meters this host has: RAPL, NVML, and each Prometheus endpoint named (§2.3)."""
    out = rapl_status(powercap_root)
    if nvml:
        out += nvml_status()
    for url in prometheus_urls:
        out += prometheus_status(url, timeout_ms)
    return out


_PREFIXES = ("rapl:", "nvml:", "dcgm:", "kepler:")


def resolve(
    name: str,
    powercap_root: Path | str = DEFAULT_POWERCAP_ROOT,
    prometheus_urls: Sequence[str] = (),
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
) -> Meter:
    """The meter a name from `pool meter list` names (§2.3).

    RAPL and NVML names are built directly (`rapl:intel-rapl:0`, `nvml:0`, `nvml:GPU-…`);
    DCGM and Kepler names are looked up on the endpoints given. A well-formed name that
    none of them has is `MeterUnavailable` with `not_found`.
    """
    if name.startswith("rapl:"):
        return RaplMeter(name[len("rapl:") :], powercap_root)
    if name.startswith("nvml:"):
        return NvmlMeter(name[len("nvml:") :])
    if name.startswith("tdp:"):
        raise InvalidInput("name", "a TDP estimator is configured with its power, not discovered")
    if not name.startswith(_PREFIXES):
        raise InvalidInput(
            "name", f"{name!r} names no meter; names start with {', '.join(_PREFIXES)}"
        )
    if not prometheus_urls:
        raise MeterUnavailable(
            name,
            UnavailableReason.not_found,
            "DCGM and Kepler meters are found on an endpoint: pass --prometheus URL",
        )
    unreachable: list[str] = []
    for url in prometheus_urls:
        try:
            _, meters = discover_prometheus(url, timeout_ms)
        except MeterUnavailable as exc:
            unreachable.append(exc.explanation)
            continue
        for meter in meters:
            if meter.name == name:
                return meter
    where = ", ".join(prometheus_urls)
    if unreachable and len(unreachable) == len(prometheus_urls):
        raise MeterUnavailable(name, UnavailableReason.unreachable, "; ".join(unreachable))
    raise MeterUnavailable(name, UnavailableReason.not_found, f"no such series at {where}")
