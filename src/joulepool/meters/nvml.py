"""NVIDIA GPU energy through NVML (standard §2.3, §2.7).

`nvmlDeviceGetTotalEnergyConsumption` is the GPU's own counter, in millijoules since the
driver was loaded, on Volta and newer. It is a whole-device counter, so its readings are
HwShunt; a share of a GPU held by several gangs goes through `attribute()` in
`joulepool.meters.feed` and comes out ModelBased.

nvidia-ml-py is an optional dependency (`pip install 'joulepool[nvml]'`) and is imported only
when an NVML meter is read. Every NVML failure becomes a `MeterUnavailable` with its reason:
no library, no driver, no such GPU, no permission, no counter on this GPU.
"""

from __future__ import annotations

import importlib
import re
import threading
from types import ModuleType

from joulepool.errors import InvalidInput
from joulepool.meters.grades import MeterKind
from joulepool.meters.reading import Meter, MeterUnavailable, Reading, UnavailableReason, now_us

_DEVICE_RE = re.compile(r"[0-9]+|(?:GPU|MIG)-[0-9A-Za-z/-]+")

_lock = threading.Lock()
_initialised = False

# NVML return codes (nvml.h) and what each means for a meter. Looked up by number so that
# a pynvml without one of the names still maps the others.
_NVML_REASONS: dict[int, tuple[UnavailableReason, str]] = {
    1: (UnavailableReason.driver_error, "NVML is not initialised"),
    2: (UnavailableReason.missing_device, "no GPU with that index or UUID"),
    3: (
        UnavailableReason.unsupported_device,
        "this GPU has no total-energy counter (Volta or newer has one)",
    ),
    4: (UnavailableReason.permission_denied, "NVML refused this process the read"),
    6: (UnavailableReason.missing_device, "no GPU with that index or UUID"),
    9: (UnavailableReason.missing_device, "the NVIDIA driver is not loaded"),
    12: (
        UnavailableReason.library_missing,
        "libnvidia-ml.so not found: no NVIDIA driver is installed on this host",
    ),
    15: (UnavailableReason.missing_device, "the GPU has fallen off the bus"),
}


def _pynvml(meter: str) -> ModuleType:
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        raise MeterUnavailable(
            meter,
            UnavailableReason.library_missing,
            "nvidia-ml-py is not installed: pip install 'joulepool[nvml]'",
        ) from None


def _mapped(meter: str, exc: Exception) -> MeterUnavailable:
    code = getattr(exc, "value", None)
    if isinstance(code, int) and code in _NVML_REASONS:
        reason, detail = _NVML_REASONS[code]
        return MeterUnavailable(meter, reason, f"{detail} (NVML: {exc})")
    return MeterUnavailable(meter, UnavailableReason.driver_error, f"NVML: {exc}")


def _nvml(meter: str) -> ModuleType:
    """pynvml, initialised once for the process; a failed init is retried on the next read."""
    global _initialised
    nv = _pynvml(meter)
    with _lock:
        if not _initialised:
            try:
                nv.nvmlInit()
            except nv.NVMLError as exc:
                raise _mapped(meter, exc) from None
            _initialised = True
    return nv


def _text(value: object) -> str:
    # Older pynvml returned bytes for names and UUIDs; newer returns str.
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class NvmlMeter(Meter):
    """One GPU's NVML total-energy counter, by index (`0`) or UUID (`GPU-…`), HwShunt (§2.3)."""

    kind = MeterKind.nvml

    def __init__(self, device: str) -> None:
        if not isinstance(device, str) or not _DEVICE_RE.fullmatch(device):
            raise InvalidInput("device", f"{device!r} is neither a GPU index nor a GPU UUID")
        super().__init__(f"nvml:{device}")
        self.device = device

    def _handle(self, nv: ModuleType) -> object:
        if self.device.isdigit():
            return nv.nvmlDeviceGetHandleByIndex(int(self.device))
        return nv.nvmlDeviceGetHandleByUUID(self.device)

    def read(self) -> Reading:
        """Read the GPU's counter (mJ) as µJ, or raise `MeterUnavailable` (§2.3, §2.7)."""
        nv = _nvml(self.name)
        try:
            handle = self._handle(nv)
            mj = nv.nvmlDeviceGetTotalEnergyConsumption(handle)
        except nv.NVMLError as exc:
            raise _mapped(self.name, exc) from None
        at = now_us()
        if isinstance(mj, bool) or not isinstance(mj, int) or mj < 0:
            raise self.unavailable(
                UnavailableReason.invalid_value, f"NVML returned {mj!r}, not a count of millijoules"
            )
        # Whole millijoules times 1000: exact, and the resolution is the millijoule.
        return Reading(self.name, mj * 1000, at, self.grade, resolution_uj=1000)

    def describe(self) -> str:
        """The GPU's model name, for listings (§2.3); empty where NVML cannot say."""
        nv = _nvml(self.name)
        try:
            return _text(nv.nvmlDeviceGetName(self._handle(nv)))
        except nv.NVMLError:
            return ""


def discover_nvml() -> list[NvmlMeter]:
    """A meter for every GPU NVML sees, named by UUID (§2.3).

    Raises `MeterUnavailable` (meter `nvml`) where NVML itself cannot start: no nvidia-ml-py,
    no libnvidia-ml.so, no driver. A host whose driver sees no GPU has none.
    """
    nv = _nvml("nvml")
    try:
        count = nv.nvmlDeviceGetCount()
        uuids = [
            _text(nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(i))) for i in range(count)
        ]
    except nv.NVMLError as exc:
        raise _mapped("nvml", exc) from None
    return [NvmlMeter(uuid) for uuid in uuids]
