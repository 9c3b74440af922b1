"""RAPL energy counters through Linux powercap (standard §2.3, §2.7).

Each `intel-rapl:N` zone under `/sys/class/powercap` is a package (or `psys`, the platform),
each `intel-rapl:N:M` a zone inside it (core, uncore, dram). The driver serves AMD packages
under the same names. `energy_uj` is the zone's counter in microjoules and
`max_energy_range_uj` the largest value it shows before it returns to 0.

How the kernel makes those figures (drivers/powercap/intel_rapl_common.c): the hardware
counter is 32 bits of raw energy units (2^-14 J on most Intel parts, 2^-16 J on AMD), and
both files are that raw count scaled to µJ and floored; `max_energy_range_uj` is the scale of
0xFFFFFFFF. So the counter as exposed counts 0 .. max_energy_range_uj and then returns to 0,
and this module reads it with the modulus `max_energy_range_uj + 1`. Across one wrap that
figure is short of the hardware's by less than one raw unit, which is below the resolution
reported with the reading: ceil(max_energy_range_uj / 0xFFFFFFFF), one raw unit rounded up.

Since the 2020 side-channel fix (CVE-2020-8694) many kernels make `energy_uj` readable by
root only; a read refused there is `permission_denied`, never 0.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Iterable
from pathlib import Path

from joulepool.errors import InvalidInput
from joulepool.meters.grades import MeterKind
from joulepool.meters.reading import Meter, Reading, UnavailableReason, now_us

DEFAULT_POWERCAP_ROOT = Path("/sys/class/powercap")

# A zone directory's name; anything else under the root (the bare `intel-rapl` control
# type, other powercap drivers) is not a RAPL counter, and a name outside this pattern can
# never walk out of the root.
_ZONE_RE = re.compile(r"intel-rapl(?:-mmio)?:[0-9]+(?::[0-9]+)*")
_DIGITS_RE = re.compile(r"[0-9]+")
_RAW_MAX = 0xFFFFFFFF

_PERMISSION_HINT = (
    "is readable by root only on kernels patched for CVE-2020-8694 (PLATYPUS); run as root, "
    "or have the operator grant read access (a udev rule or chmod on energy_uj)"
)


class RaplMeter(Meter):
    """One powercap RAPL zone's `energy_uj`, HwShunt as a whole-package counter (§2.3)."""

    kind = MeterKind.rapl

    def __init__(
        self,
        zone: str,
        root: Path | str = DEFAULT_POWERCAP_ROOT,
        max_power_uw: int | None = None,
    ) -> None:
        if not isinstance(zone, str) or not _ZONE_RE.fullmatch(zone):
            raise InvalidInput(
                "zone", f"{zone!r} is not a powercap RAPL zone such as 'intel-rapl:0'"
            )
        super().__init__(f"rapl:{zone}")
        self.zone = zone
        self.root = Path(root)
        # Only an operator-stated bound: powercap's constraint_*_max_power_uw is a limit the
        # firmware will accept, not a bound on what the package can draw, so it is not used.
        self.max_power_uw = max_power_uw

    @property
    def path(self) -> Path:
        """The zone's directory under the powercap root (§2.3)."""
        return self.root / self.zone

    def zone_name(self) -> str | None:
        """The zone's own name (`package-0`, `dram`, `psys`), or None where none (§2.3)."""
        try:
            return (self.path / "name").read_text(encoding="utf-8").strip() or None
        except OSError:
            return None

    def read(self) -> Reading:
        """Read `energy_uj` and `max_energy_range_uj`, or raise `MeterUnavailable` (§2.3, §2.7)."""
        max_range = self._read_uj("max_energy_range_uj")
        counter = self._read_uj("energy_uj")
        at = now_us()
        if max_range == 0:
            raise self.unavailable(
                UnavailableReason.invalid_value,
                f"{self.path}/max_energy_range_uj is 0: the counter has no range",
            )
        if counter > max_range:
            raise self.unavailable(
                UnavailableReason.invalid_value,
                f"{self.path}/energy_uj is {counter}, above max_energy_range_uj {max_range}",
            )
        return Reading(
            meter=self.name,
            counter_uj=counter,
            read_at_us=at,
            grade=self.grade,
            resolution_uj=max(1, -(-max_range // _RAW_MAX)),
            wrap_uj=max_range + 1,
            max_power_uw=self.max_power_uw,
        )

    def _read_uj(self, file: str) -> int:
        path = self.path / file
        try:
            text = path.read_text(encoding="ascii")
        except PermissionError:
            raise self.unavailable(
                UnavailableReason.permission_denied, f"{path} {_PERMISSION_HINT}"
            ) from None
        except FileNotFoundError:
            if not self.path.is_dir():
                raise self.unavailable(
                    UnavailableReason.missing_device, f"no RAPL zone {self.zone} under {self.root}"
                ) from None
            raise self.unavailable(
                UnavailableReason.missing_device, f"{path} does not exist"
            ) from None
        except UnicodeDecodeError:
            raise self.unavailable(
                UnavailableReason.invalid_value, f"{path} is not ASCII text"
            ) from None
        except OSError as exc:
            # The driver answers EIO when the MSR read fails and ENODATA on zones it cannot
            # count: the counter is there, but no figure came out of it.
            name = errno.errorcode.get(exc.errno or 0, "error")
            raise self.unavailable(
                UnavailableReason.driver_error, f"reading {path} failed: {name} ({exc.strerror})"
            ) from None
        value = text.strip()
        if not _DIGITS_RE.fullmatch(value):
            raise self.unavailable(
                UnavailableReason.invalid_value,
                f"{path} holds {value[:40]!r}, not a count of microjoules",
            )
        return int(value)


def _zone_key(zone: str) -> tuple[str, tuple[int, ...]]:
    prefix, _, rest = zone.partition(":")
    return prefix, tuple(int(part) for part in rest.split(":"))


def rapl_zones(root: Path | str = DEFAULT_POWERCAP_ROOT) -> list[str]:
    """The RAPL zones under a powercap root, packages before their subzones (§2.3).

    An absent or unreadable root has no zones; `discovery` says why.
    """
    base = Path(root)
    try:
        names = [entry.name for entry in base.iterdir()]
    except OSError:
        return []
    return sorted((n for n in names if _ZONE_RE.fullmatch(n)), key=_zone_key)


def discover_rapl(root: Path | str = DEFAULT_POWERCAP_ROOT) -> list[RaplMeter]:
    """A meter for every RAPL zone under `root`, readable or not (§2.3)."""
    return [RaplMeter(zone, root) for zone in rapl_zones(root)]


def zones_overlap(meter_names: Iterable[str]) -> tuple[str, str] | None:
    """Two RAPL meters of which one is inside the other, or None (§2.5).

    A package's counter already includes its core and DRAM zones; summing both for one
    claim would count the same joules twice.
    """
    zones = sorted(name[len("rapl:") :] for name in meter_names if name.startswith("rapl:"))
    for outer in zones:
        for inner in zones:
            if inner.startswith(outer + ":"):
                return f"rapl:{outer}", f"rapl:{inner}"
    return None
