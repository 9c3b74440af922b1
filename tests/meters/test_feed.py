"""From readings to what Pool takes: a release's actual and an idle observation (§2.5, §2.7, §6.2)."""

from __future__ import annotations

import pytest

from joulepool.errors import AttributionRefused, InvalidInput
from joulepool.grade import Energy, Grade
from joulepool.idle import IdlePolicy, IdleVerdictKind, NoVerdictReason, idle_verdict
from joulepool.meters import (
    Accumulator,
    MeterUnavailable,
    RaplMeter,
    Reading,
    TdpMeter,
    UnavailableReason,
    claim_share,
    idle_observation,
    read_all,
    release_actual,
    sample_idle,
)
from tests.meters.conftest import PowercapTree

H, M, E = Grade.HwShunt, Grade.ModelBased, Grade.Estimator
GPU0, GPU1 = "nvml:GPU-0", "nvml:GPU-1"


def gpu(name: str, counter_mj: int, at_us: int) -> Reading:
    return Reading(name, counter_mj * 1000, at_us, H, 1000)


BEFORE = {GPU0: gpu(GPU0, 1_000, 0), GPU1: gpu(GPU1, 5_000, 10)}
AFTER = {GPU0: gpu(GPU0, 4_000, 60_000_000), GPU1: gpu(GPU1, 6_000, 60_000_020)}


def test_a_gang_alone_on_its_gpus_keeps_hwshunt() -> None:
    actual = release_actual("job-1", BEFORE, AFTER)
    assert actual == Energy(3_000_000 + 1_000_000, H)
    explicit = {GPU0: {"job-1": 1}, GPU1: {"job-1": 7}}
    assert release_actual("job-1", BEFORE, AFTER, explicit) == actual


def test_a_shared_gpu_is_divided_by_attribute_and_becomes_model_based() -> None:
    occupants = {GPU0: {"job-1": 1, "job-2": 2}, GPU1: {"job-1": 1}}
    mine = release_actual("job-1", BEFORE, AFTER, occupants)
    # GPU0's 3 J split 1:2 is 1 J for job-1; GPU1's 1 J is all job-1's.
    assert mine == Energy(1_000_000 + 1_000_000, M)
    theirs = release_actual("job-2", {GPU0: BEFORE[GPU0]}, {GPU0: AFTER[GPU0]}, occupants)
    assert theirs == Energy(2_000_000, M)
    # No joule invented or lost on the shared device.
    assert (mine.uj - 1_000_000) + theirs.uj == 3_000_000


def test_every_device_must_be_accounted_for_when_occupants_are_given() -> None:
    with pytest.raises(InvalidInput):
        release_actual("job-1", BEFORE, AFTER, {GPU0: {"job-1": 1}})
    with pytest.raises(InvalidInput):
        release_actual("job-1", BEFORE, AFTER, {GPU0: {"job-2": 1}, GPU1: {"job-1": 1}})
    with pytest.raises(AttributionRefused):
        release_actual("job-1", BEFORE, AFTER, {GPU0: {"job-1": 0}, GPU1: {"job-1": 1}})


def test_readings_must_pair_up() -> None:
    with pytest.raises(InvalidInput):
        release_actual("job-1", BEFORE, {GPU0: AFTER[GPU0]})
    with pytest.raises(InvalidInput):
        release_actual("job-1", {}, {})
    with pytest.raises(InvalidInput):
        release_actual("job-1", {GPU0: BEFORE[GPU1]}, {GPU0: AFTER[GPU1]})


def test_a_reset_counter_leaves_the_release_without_a_figure() -> None:
    reset = {**AFTER, GPU1: gpu(GPU1, 3, 60_000_020)}
    with pytest.raises(MeterUnavailable) as info:
        release_actual("job-1", BEFORE, reset)
    assert info.value.reason is UnavailableReason.counter_reset


def test_the_sum_takes_the_weakest_grade() -> None:
    energy = {GPU0: Energy(10, H), "kepler:x": Energy(5, M), "tdp:y": Energy(1, E)}
    assert claim_share("job-1", energy) == Energy(16, E)
    assert claim_share("job-1", {GPU0: Energy(10, H), "kepler:x": Energy(5, M)}) == Energy(15, M)


def test_a_package_and_its_own_zone_are_not_summed() -> None:
    energy = {"rapl:intel-rapl:0": Energy(10, H), "rapl:intel-rapl:0:1": Energy(3, H)}
    with pytest.raises(InvalidInput):
        claim_share("job-1", energy)


def test_an_accumulator_measures_a_window_of_many_wraps(powercap: PowercapTree) -> None:
    powercap.zone("intel-rapl:0", "package-0", 0, max_range_uj=999)
    meter = RaplMeter("intel-rapl:0", powercap.root)
    acc = Accumulator(meter.read())
    expected = 0
    counter = 0
    for step in (700, 600, 999, 1, 350, 990, 420):
        counter = (counter + step) % 1000
        powercap.set_energy("intel-rapl:0", counter)
        assert acc.add(meter.read()).uj == step
        expected += step
    assert acc.energy == Energy(expected, H)
    assert expected > 4 * 1000  # more than four wraps, each seen
    assert acc.span_us >= 0
    assert claim_share("job-1", {meter.name: acc.energy}) == Energy(expected, H)


def test_an_idle_observation_from_two_readings() -> None:
    obs = idle_observation("job-1", 2, BEFORE, AFTER)
    assert obs.key == "job-1"
    assert obs.held_devices == 2
    # The shortest window of the two devices: GPU0's 60 s, not GPU1's 60.00001 s.
    assert obs.observed_us == 60_000_000
    assert obs.energy == Energy(4_000_000, H)
    # 4 J in 60 s is 66 666 µW: idle under a 100 mW threshold, working under 50 mW.
    assert idle_verdict(IdlePolicy(60_000_000, 100_000), obs).kind is IdleVerdictKind.idle
    assert idle_verdict(IdlePolicy(60_000_000, 50_000), obs).kind is IdleVerdictKind.working


def test_sampling_a_parked_package_from_real_files_is_idle_evidence(powercap: PowercapTree) -> None:
    powercap.zone("intel-rapl:0", "package-0", 42)
    meter = RaplMeter("intel-rapl:0", powercap.root)
    obs = sample_idle("job-1", 1, [meter], 20_000)
    assert obs.energy == Energy(0, H)
    assert obs.observed_us >= 20_000
    verdict = idle_verdict(IdlePolicy(window_us=10_000, threshold_uw=1), obs)
    assert verdict.kind is IdleVerdictKind.idle


def test_a_tdp_guess_never_makes_a_workload_idle() -> None:
    obs = sample_idle("job-1", 1, [TdpMeter("gpu0", 1)], 20_000)
    assert obs.energy.grade is E
    verdict = idle_verdict(IdlePolicy(window_us=10_000, threshold_uw=10**12), obs)
    assert verdict.kind is IdleVerdictKind.no_verdict
    assert verdict.reason is NoVerdictReason.unobserved


def test_an_unavailable_meter_gives_no_observation_at_all(powercap: PowercapTree) -> None:
    # §2.7's chain "meter unavailable → 0 µJ → idle → reclaim" stops at its first link.
    powercap.zone("intel-rapl:0", "package-0", 42)
    present = RaplMeter("intel-rapl:0", powercap.root)
    absent = RaplMeter("intel-rapl:1", powercap.root)
    with pytest.raises(MeterUnavailable) as info:
        sample_idle("job-1", 1, [present, absent], 1_000)
    assert info.value.reason is UnavailableReason.missing_device
    with pytest.raises(MeterUnavailable):
        read_all([absent])


def test_a_shared_device_makes_an_idle_observation_model_based() -> None:
    obs = idle_observation(
        "job-1", 1, BEFORE, AFTER, {GPU0: {"job-1": 1, "job-2": 1}, GPU1: {"job-1": 1}}
    )
    assert obs.energy.grade is M
    assert obs.energy.uj == 1_500_000 + 1_000_000
