"""NVML: a real read where a GPU is present; the real failure paths where none is (§2.3, §2.7)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from joulepool.errors import InvalidInput
from joulepool.grade import Grade
from joulepool.meters import MeterUnavailable, NvmlMeter, UnavailableReason, energy_between
from joulepool.meters.discovery import nvml_status
from joulepool.meters.nvml import discover_nvml

SRC = Path(__file__).resolve().parents[2] / "src"


def _gpus() -> tuple[list[NvmlMeter], str]:
    try:
        meters = discover_nvml()
    except MeterUnavailable as exc:
        return [], f"no NVML here: {exc.reason.value}: {exc.explanation}"
    if not meters:
        return [], "NVML started but sees no GPU"
    return meters, ""


@pytest.mark.gpu
def test_a_gpu_counter_reads_in_whole_mj_at_hwshunt() -> None:
    meters, why = _gpus()
    if not meters:
        pytest.skip(why)
    meter = meters[0]
    try:
        first = meter.read()
    except MeterUnavailable as exc:
        if exc.reason is UnavailableReason.unsupported_device:
            pytest.skip(f"{meter.name} has no energy counter (pre-Volta): {exc.explanation}")
        raise
    time.sleep(0.2)
    second = meter.read()
    assert first.grade is Grade.HwShunt
    assert first.resolution_uj == 1000
    assert first.counter_uj % 1000 == 0
    assert first.meter == meter.name
    energy = energy_between(first, second)
    assert energy.uj >= 0
    assert energy.grade is Grade.HwShunt
    by_index = NvmlMeter("0").read()
    assert by_index.counter_uj >= first.counter_uj


def test_without_a_gpu_reading_raises_with_a_reason_never_a_figure() -> None:
    meters, _ = _gpus()
    if meters:
        # A GPU is here: every one is listed, read, or refused with its reason.
        status = nvml_status()
        assert [s.name for s in status] == [m.name for m in meters]
        for s in status:
            assert s.available or s.reason is UnavailableReason.unsupported_device
        return
    with pytest.raises(MeterUnavailable) as info:
        NvmlMeter("0").read()
    assert info.value.reason in {
        UnavailableReason.library_missing,
        UnavailableReason.missing_device,
        UnavailableReason.driver_error,
    }
    if importlib.util.find_spec("pynvml") is None:
        assert info.value.reason is UnavailableReason.library_missing
        assert "joulepool[nvml]" in str(info.value)
    status = nvml_status()
    assert len(status) == 1
    assert status[0].name == "nvml"
    assert not status[0].available
    assert status[0].reason is info.value.reason


def test_without_nvidia_ml_py_the_reason_is_library_missing(tmp_path: Path) -> None:
    # A real interpreter with no site-packages at all, so pynvml is genuinely absent there;
    # only the one package that joulepool's records need is linked in beside the source.
    (tmp_path / "msgspec").symlink_to(Path(msgspec.__file__).parent)
    program = (
        "import sys; sys.path[:0] = sys.argv[1:]\n"
        "from joulepool.meters import NvmlMeter, MeterUnavailable\n"
        "try:\n"
        "    NvmlMeter('0').read()\n"
        "except MeterUnavailable as exc:\n"
        "    print(exc.reason.value, exc.explanation)\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", program, str(SRC), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.startswith("library_missing nvidia-ml-py is not installed"), done


@pytest.mark.parametrize("device", ["", "gpu0", "-1", "GPU", "../0", "0 "])
def test_a_device_that_is_neither_index_nor_uuid_is_refused(device: str) -> None:
    with pytest.raises(InvalidInput):
        NvmlMeter(device)


def test_names_are_by_index_or_uuid() -> None:
    assert NvmlMeter("3").name == "nvml:3"
    uuid = "GPU-3877938d-024c-c46b-5268-cd86ad37f0d7"
    assert NvmlMeter(uuid).name == f"nvml:{uuid}"
    assert NvmlMeter("MIG-GPU-3877938d-024c-c46b-5268-cd86ad37f0d7/1/0").device.startswith("MIG-")
