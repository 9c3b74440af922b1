"""RAPL through powercap, against a real powercap tree written to disk (§2.3, §2.7)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from joulepool.errors import InvalidInput
from joulepool.grade import Energy, Grade
from joulepool.meters import MeterUnavailable, RaplMeter, UnavailableReason, energy_between
from joulepool.meters.rapl import discover_rapl, rapl_zones, zones_overlap
from tests.meters.conftest import INTEL_MAX_RANGE_UJ, PowercapTree, running_as_root

NOBODY = 65534


def test_reads_the_counter_exactly_at_hwshunt(powercap: PowercapTree) -> None:
    powercap.zone("intel-rapl:0", "package-0", 123_456_789_012)
    reading = RaplMeter("intel-rapl:0", powercap.root).read()
    assert reading.meter == "rapl:intel-rapl:0"
    assert reading.counter_uj == 123_456_789_012
    assert reading.grade is Grade.HwShunt
    assert reading.wrap_uj == INTEL_MAX_RANGE_UJ + 1
    # One raw unit of 2**-14 J is 61.03... µJ; the stated resolution is that, rounded up.
    assert reading.resolution_uj == 62
    assert reading.read_at_us > 0


def test_subzones_are_meters_of_their_own(powercap: PowercapTree) -> None:
    powercap.zone("intel-rapl:0", "package-0", 1000)
    powercap.zone("intel-rapl:0:0", "core", 400)
    powercap.zone("intel-rapl:0:1", "dram", 300, max_range_uj=65532610987)
    dram = RaplMeter("intel-rapl:0:1", powercap.root)
    assert dram.read().counter_uj == 300
    assert dram.zone_name() == "dram"
    assert dram.read().wrap_uj == 65532610988


def test_wrap_around_is_undone_exactly(powercap: PowercapTree) -> None:
    powercap.zone("intel-rapl:0", "package-0", INTEL_MAX_RANGE_UJ - 1_000)
    meter = RaplMeter("intel-rapl:0", powercap.root)
    before = meter.read()
    powercap.set_energy("intel-rapl:0", 2_500)
    after = meter.read()
    # 1_000 µJ up to the top, one step from the top back to 0, then 2_500 more.
    assert energy_between(before, after) == Energy(1_000 + 1 + 2_500, Grade.HwShunt)


def test_a_counter_at_its_maximum_and_at_zero(powercap: PowercapTree) -> None:
    powercap.zone("intel-rapl:0", "package-0", INTEL_MAX_RANGE_UJ)
    meter = RaplMeter("intel-rapl:0", powercap.root)
    top = meter.read()
    powercap.set_energy("intel-rapl:0", 0)
    assert energy_between(top, meter.read()).uj == 1


def test_an_operator_bound_refuses_a_window_longer_than_a_wrap(powercap: PowercapTree) -> None:
    powercap.zone("intel-rapl:0", "package-0", 10, max_range_uj=999)
    # 1000 µJ of range at up to 1 W wraps in 1 ms: a second reading 1 ms on is ambiguous.
    meter = RaplMeter("intel-rapl:0", powercap.root, max_power_uw=1_000_000)
    first = meter.read()
    assert first.max_power_uw == 1_000_000
    later = dataclasses.replace(first, read_at_us=first.read_at_us + 1_000)
    with pytest.raises(MeterUnavailable) as info:
        energy_between(first, later)
    assert info.value.reason is UnavailableReason.window_exceeds_wrap


def _read_as_nobody(meter: RaplMeter) -> str:
    """Run the real reading code in a child that dropped root, and say what it got."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            os.close(rfd)
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            try:
                message = f"reading {meter.read().counter_uj}"
            except MeterUnavailable as exc:
                message = f"unavailable {exc.reason.value} {exc.explanation}"
            except BaseException as exc:
                message = f"error {type(exc).__name__}: {exc}"
            os.write(wfd, message.encode())
        finally:
            os._exit(0)
    os.close(wfd)
    chunks = []
    while chunk := os.read(rfd, 65536):
        chunks.append(chunk)
    os.close(rfd)
    os.waitpid(pid, 0)
    return b"".join(chunks).decode()


def test_a_root_only_counter_is_permission_denied(powercap: PowercapTree) -> None:
    path = powercap.zone("intel-rapl:0", "package-0", 5_000)
    meter = RaplMeter("intel-rapl:0", powercap.root)
    if running_as_root():
        # As on a patched kernel: energy_uj is root's, mode 0400; the reader is not root.
        (path / "energy_uj").chmod(0o400)
        got = _read_as_nobody(meter)
        assert got.startswith("unavailable permission_denied "), got
        assert "CVE-2020-8694" in got
    else:
        (path / "energy_uj").chmod(0o000)
        with pytest.raises(MeterUnavailable) as info:
            meter.read()
        assert info.value.reason is UnavailableReason.permission_denied
        assert "CVE-2020-8694" in str(info.value)


def test_a_readable_counter_reads_for_an_unprivileged_user_too(powercap: PowercapTree) -> None:
    powercap.zone("intel-rapl:0", "package-0", 5_000)
    meter = RaplMeter("intel-rapl:0", powercap.root)
    if running_as_root():
        assert _read_as_nobody(meter) == "reading 5000"
    else:
        assert meter.read().counter_uj == 5_000


def test_a_missing_zone_is_missing_device(powercap: PowercapTree) -> None:
    with pytest.raises(MeterUnavailable) as info:
        RaplMeter("intel-rapl:3", powercap.root).read()
    assert info.value.reason is UnavailableReason.missing_device
    assert "intel-rapl:3" in str(info.value)


def test_a_zone_without_its_counter_is_missing_device(powercap: PowercapTree) -> None:
    path = powercap.zone("intel-rapl:0", "package-0", 1)
    (path / "energy_uj").unlink()
    with pytest.raises(MeterUnavailable) as info:
        RaplMeter("intel-rapl:0", powercap.root).read()
    assert info.value.reason is UnavailableReason.missing_device
    assert "energy_uj" in str(info.value)


def test_a_zone_without_a_range_is_missing_device(powercap: PowercapTree) -> None:
    powercap.zone("intel-rapl:0", "package-0", 1, max_range_uj=None)
    with pytest.raises(MeterUnavailable) as info:
        RaplMeter("intel-rapl:0", powercap.root).read()
    assert info.value.reason is UnavailableReason.missing_device


@pytest.mark.parametrize("content", ["", "abc", "12.5", "-5", "1e6", "0x10", "١٢٣", "12 34"])
def test_a_counter_that_is_not_an_integer_is_invalid(powercap: PowercapTree, content: str) -> None:
    powercap.zone("intel-rapl:0", "package-0", content)
    with pytest.raises(MeterUnavailable) as info:
        RaplMeter("intel-rapl:0", powercap.root).read()
    assert info.value.reason is UnavailableReason.invalid_value


def test_a_counter_above_its_range_is_invalid(powercap: PowercapTree) -> None:
    powercap.zone("intel-rapl:0", "package-0", 1_001, max_range_uj=1_000)
    with pytest.raises(MeterUnavailable) as info:
        RaplMeter("intel-rapl:0", powercap.root).read()
    assert info.value.reason is UnavailableReason.invalid_value


def test_a_zero_range_is_invalid(powercap: PowercapTree) -> None:
    powercap.zone("intel-rapl:0", "package-0", 0, max_range_uj=0)
    with pytest.raises(MeterUnavailable) as info:
        RaplMeter("intel-rapl:0", powercap.root).read()
    assert info.value.reason is UnavailableReason.invalid_value


def test_a_counter_the_driver_cannot_read_is_a_driver_error(powercap: PowercapTree) -> None:
    path = powercap.zone("intel-rapl:0", "package-0", 1)
    (path / "energy_uj").unlink()
    (path / "energy_uj").mkdir()
    with pytest.raises(MeterUnavailable) as info:
        RaplMeter("intel-rapl:0", powercap.root).read()
    assert info.value.reason is UnavailableReason.driver_error


@pytest.mark.parametrize("zone", ["../../etc", "intel-rapl", "intel-rapl:0/..", "", "dram"])
def test_a_zone_name_outside_the_pattern_is_refused(zone: str) -> None:
    with pytest.raises(InvalidInput):
        RaplMeter(zone)


def test_discovery_lists_zones_packages_first_and_ignores_the_rest(powercap: PowercapTree) -> None:
    for zone in (
        "intel-rapl:1",
        "intel-rapl:0:1",
        "intel-rapl:0",
        "intel-rapl:10",
        "intel-rapl:0:0",
    ):
        powercap.zone(zone, "z", 0)
    (powercap.root / "intel-rapl").mkdir()  # the control type, not a zone
    (powercap.root / "dtpm").mkdir()  # another powercap driver
    assert rapl_zones(powercap.root) == [
        "intel-rapl:0",
        "intel-rapl:0:0",
        "intel-rapl:0:1",
        "intel-rapl:1",
        "intel-rapl:10",
    ]
    assert next(m.name for m in discover_rapl(powercap.root)) == "rapl:intel-rapl:0"


def test_discovery_of_an_absent_root_finds_nothing(tmp_path: Path) -> None:
    assert rapl_zones(tmp_path / "nope") == []


def test_a_package_and_its_own_zone_overlap() -> None:
    assert zones_overlap(["rapl:intel-rapl:0", "rapl:intel-rapl:0:1"]) == (
        "rapl:intel-rapl:0",
        "rapl:intel-rapl:0:1",
    )
    assert zones_overlap(["rapl:intel-rapl:0", "rapl:intel-rapl:1", "nvml:0"]) is None
    assert zones_overlap(["rapl:intel-rapl:1", "rapl:intel-rapl:10:0"]) is None
