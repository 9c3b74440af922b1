"""Readings and the energy between two of them (§2.3, §2.7)."""

from __future__ import annotations

import pytest

from joulepool.errors import InvalidInput, PoolError
from joulepool.grade import Energy, Grade
from joulepool.meters import (
    MeterUnavailable,
    Reading,
    TdpMeter,
    UnavailableReason,
    energy_between,
    read_all,
)

H, M, E = Grade.HwShunt, Grade.ModelBased, Grade.Estimator


def r(counter: int, at: int, grade: Grade = H, wrap_uj: int | None = None) -> Reading:
    return Reading("nvml:0", counter, at, grade, 1000, wrap_uj=wrap_uj)


def test_difference_of_a_rising_counter() -> None:
    assert energy_between(r(5_000, 10), r(12_000, 20)) == Energy(7_000, H)


def test_a_counter_that_did_not_move_is_a_real_zero_at_its_grade() -> None:
    assert energy_between(r(5_000, 10), r(5_000, 1_000_010)) == Energy(0, H)


def test_counter_reset_is_unavailable_never_negative_never_zero() -> None:
    with pytest.raises(MeterUnavailable) as info:
        energy_between(r(9_000, 10), r(2_000, 20))
    assert info.value.reason is UnavailableReason.counter_reset
    assert info.value.meter == "nvml:0"
    assert isinstance(info.value, PoolError)


def test_one_wrap_is_undone_exactly_with_the_modulus() -> None:
    # The counter counts 0 .. 999 and returns to 0: from 990 to 5 is 10 + 5 = 15 µJ.
    a = Reading("rapl:intel-rapl:0", 990, 0, H, 1, wrap_uj=1000)
    b = Reading("rapl:intel-rapl:0", 5, 10, H, 1, wrap_uj=1000)
    assert energy_between(a, b) == Energy(15, H)


def test_a_window_that_could_hide_a_second_wrap_is_refused() -> None:
    # 1000 µJ range at up to 1 W: a whole wrap takes 1000 µs.
    a = Reading("rapl:intel-rapl:0", 0, 0, H, 1, wrap_uj=1000, max_power_uw=1_000_000)
    just_short = Reading("rapl:intel-rapl:0", 999, 999, H, 1, wrap_uj=1000, max_power_uw=1_000_000)
    too_long = Reading("rapl:intel-rapl:0", 5, 1000, H, 1, wrap_uj=1000, max_power_uw=1_000_000)
    assert energy_between(a, just_short) == Energy(999, H)
    with pytest.raises(MeterUnavailable) as info:
        energy_between(a, too_long)
    assert info.value.reason is UnavailableReason.window_exceeds_wrap


def test_grade_is_the_weaker_of_the_two_readings() -> None:
    assert energy_between(r(0, 0, H), r(10, 1, M)).grade is M
    assert energy_between(r(0, 0, M), r(10, 1, H)).grade is M
    assert energy_between(r(0, 0, E), r(10, 1, H)).grade is E


def test_readings_of_two_meters_are_refused() -> None:
    other = Reading("nvml:1", 10, 1, H, 1000)
    with pytest.raises(InvalidInput):
        energy_between(r(0, 0), other)


def test_a_second_reading_earlier_than_the_first_is_refused() -> None:
    with pytest.raises(InvalidInput):
        energy_between(r(0, 50), r(10, 40))


def test_readings_that_disagree_on_the_wrap_are_refused() -> None:
    with pytest.raises(InvalidInput):
        energy_between(r(0, 0, wrap_uj=100), r(10, 1, wrap_uj=200))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"counter_uj": -1},
        {"counter_uj": 1.5},
        {"counter_uj": True},
        {"read_at_us": -3},
        {"resolution_uj": 0},
        {"meter": ""},
        {"grade": "HwShunt"},
        {"wrap_uj": 0},
        {"counter_uj": 100, "wrap_uj": 100},
        {"max_power_uw": 0},
    ],
)
def test_a_malformed_reading_is_refused_as_invalid_input(kwargs: dict[str, object]) -> None:
    fields: dict[str, object] = {
        "meter": "nvml:0",
        "counter_uj": 0,
        "read_at_us": 0,
        "grade": H,
        "resolution_uj": 1,
    }
    fields.update(kwargs)
    with pytest.raises(InvalidInput):
        Reading(**fields)  # type: ignore[arg-type]


def test_reading_json_is_integers_and_the_grade_name() -> None:
    reading = Reading("rapl:intel-rapl:0", 7, 9, H, 62, wrap_uj=100)
    assert reading.to_json() == {
        "meter": "rapl:intel-rapl:0",
        "counter_uj": 7,
        "read_at_us": 9,
        "grade": "HwShunt",
        "resolution_uj": 62,
        "wrap_uj": 100,
    }


def test_read_all_refuses_one_name_twice() -> None:
    with pytest.raises(InvalidInput):
        read_all([TdpMeter("gpu0", 1), TdpMeter("gpu0", 2)])


def test_unavailable_names_its_reason_for_people_and_machines() -> None:
    exc = MeterUnavailable("rapl:intel-rapl:0", UnavailableReason.permission_denied, "root only")
    assert str(exc) == "meter 'rapl:intel-rapl:0' unavailable (permission_denied): root only"
    assert exc.code == "meter_unavailable"
    assert exc.to_json() == {
        "meter": "rapl:intel-rapl:0",
        "reason": "permission_denied",
        "detail": "root only",
    }
