"""A running claim's live state and its projections (DESIGN.md §7; standard §2.7, §5.1):
fresh and stale readings, power over the idle window, the verdict's order, realised cost,
the share of the reservation used, the projected exhaustion, and bounded memory."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from joulepool.errors import ClaimError, InvalidInput
from joulepool.grade import Energy, Grade
from joulepool.idle import IdlePolicy
from joulepool.live import (
    MAX_SAMPLES,
    ClaimLive,
    LiveBook,
    Progress,
    Reading,
    parse_progress,
    parse_reading,
    project,
    record_progress,
    record_reading,
    window_ms,
)

H, M, E = Grade.HwShunt, Grade.ModelBased, Grade.Estimator
POLICY = IdlePolicy(window_us=60_000_000, threshold_uw=50_000_000)  # 60 s, 50 W
T0 = 1_700_000_000_000


def fed(power_w: int, seconds: int, grade: Grade = H, every_s: int = 30) -> ClaimLive:
    live = ClaimLive()
    for s in range(0, seconds + 1, every_s):
        reading = Reading(T0 + s * 1000, Energy(power_w * 1_000_000 * s, grade))
        record_reading(live, reading, None, 60_000)
    return live


def view(
    live: ClaimLive | None, now_s: int, reserved_uj: int = 10**12, held: int = 1
) -> dict[str, Any]:
    return project(
        live,
        key="c",
        policy=POLICY,
        held_devices=held,
        reserved_uj=reserved_uj,
        now_ms=T0 + now_s * 1000,
        sample_period_ms=30_000,
    ).to_json()


def test_s2_7_a_claim_never_read_is_unknown_not_idle() -> None:
    out = view(None, 0)
    assert out["energy_uj"] is None and out["power_uw"] is None
    assert out["idle"] == {"verdict": "no_verdict", "reason": "no_reading"}
    assert out["reservation_used_pct"] is None and out["exhausts_at_ms"] is None


def test_design_s7_a_reading_older_than_twice_the_sample_period_is_no_reading() -> None:
    live = fed(10, 120)
    assert view(live, 180)["energy_uj"] == 10 * 1_000_000 * 120  # 60 s old: fresh
    out = view(live, 181)
    assert out["energy_uj"] is None and out["grade"] is None
    assert out["idle"] == {"verdict": "no_verdict", "reason": "stale"}


def test_s2_7_power_over_the_window_judges_idle_and_working() -> None:
    assert view(fed(10, 120), 120)["idle"] == {"verdict": "idle", "reason": None}
    busy = view(fed(300, 120), 120)
    assert busy["idle"] == {"verdict": "working", "reason": None}
    assert busy["power_uw"] == 300_000_000


def test_s2_7_startup_is_not_idleness_below_the_window() -> None:
    out = view(fed(0, 30), 30)
    assert out["idle"] == {"verdict": "no_verdict", "reason": "window_too_short"}


def test_s2_7_an_estimator_reading_never_establishes_idleness() -> None:
    out = view(fed(0, 120, E), 120)
    assert out["idle"] == {"verdict": "no_verdict", "reason": "unobserved"}


def test_s2_7_a_claim_holding_nothing_is_not_a_candidate() -> None:
    assert view(fed(0, 120), 120, held=0)["idle"]["verdict"] == "nothing_held"


def test_s2_7_the_window_mean_uses_only_the_window_not_the_whole_run() -> None:
    live = ClaimLive()
    # 300 W for two minutes, then nothing for a minute and a half: idle now.
    points = [(0, 0), (60, 18_000), (120, 36_000), (150, 36_000), (180, 36_000), (210, 36_000)]
    for s, joules in points:
        record_reading(live, Reading(T0 + s * 1000, Energy(joules * 1_000_000, H)), None, 60_000)
    out = view(live, 210)
    assert out["power_uw"] == 0 and out["idle"]["verdict"] == "idle"
    assert out["energy_uj"] == 36_000 * 1_000_000


def test_s5_1_realised_cost_is_undefined_until_a_unit_completes() -> None:
    live = fed(100, 60)
    assert view(live, 60)["realised_cost"] is None
    record_progress(live, Progress(0, "steps", None, T0))
    assert view(live, 60)["realised_cost"] is None
    record_progress(live, Progress(7, "steps", 100, T0))
    out = view(live, 60)
    assert out["realised_cost"] == str(Fraction(6_000_000_000, 7))
    assert (out["units"], out["unit"], out["total"]) == (7, "steps", 100)


def test_api_progress_never_decreases() -> None:
    live = ClaimLive()
    record_progress(live, Progress(5, "steps", None, T0))
    with pytest.raises(ClaimError) as raised:
        record_progress(live, Progress(4, "steps", None, T0))
    assert raised.value.code == "progress_decreased"
    assert live.progress is not None and live.progress.units == 5


def test_design_s7_reservation_used_is_an_integer_percent_and_exhaustion_is_projected() -> None:
    live = fed(100, 60)  # 6 kJ used at 100 W
    out = view(live, 60, reserved_uj=24_000_000_000)
    assert out["reservation_used_pct"] == 25
    # 18 kJ left at 100 W is 180 s after the last reading.
    assert out["exhausts_at_ms"] == T0 + 60_000 + 180_000
    over = view(live, 60, reserved_uj=5_000_000_000)
    assert over["reservation_used_pct"] == 120 and over["exhausts_at_ms"] == T0 + 60_000
    assert view(live, 60, reserved_uj=0)["reservation_used_pct"] is None


def test_design_s7_no_power_means_no_exhaustion_instant() -> None:
    assert view(fed(0, 120), 120, reserved_uj=10**9)["exhausts_at_ms"] is None


def test_design_s7_readings_out_of_order_or_decreasing_are_refused_and_change_nothing() -> None:
    live = fed(10, 60)
    before = list(live.samples)
    with pytest.raises(ClaimError) as older:
        record_reading(live, Reading(T0, Energy(10**9, H)), None, 60_000)
    assert older.value.code == "reading_out_of_order"
    with pytest.raises(ClaimError) as down:
        record_reading(live, Reading(T0 + 90_000, Energy(1, H)), None, 60_000)
    assert down.value.code == "reading_decreased"
    assert list(live.samples) == before


def test_s2_7_a_window_of_a_fraction_of_a_millisecond_is_rounded_up_not_down() -> None:
    # Readings are dated in ms: a 1.5 ms window is met by a 2 ms span, never by a 1 ms one,
    # both when samples are dropped and when the window's mean is taken.
    policy = IdlePolicy(window_us=1_500, threshold_uw=1)
    assert window_ms(policy) == 2 and window_ms(IdlePolicy(2_000, 1)) == 2
    assert window_ms(IdlePolicy(None, 1)) is None
    live = ClaimLive()
    for at in (0, 1, 2):
        record_reading(live, Reading(T0 + at, Energy(0, H)), None, window_ms(policy))
    out = project(
        live, key="c", policy=policy, held_devices=1, reserved_uj=1, now_ms=T0 + 2
    ).to_json()
    assert out["idle"] == {"verdict": "idle", "reason": None}


def test_design_s7_memory_per_claim_is_bounded_by_the_window() -> None:
    live = fed(10, 3600, every_s=1)
    assert len(live.samples) <= 62
    no_window = ClaimLive()
    for s in range(MAX_SAMPLES * 3):
        record_reading(no_window, Reading(T0 + s, Energy(s, H)), None, 10**12)
    assert len(no_window.samples) == MAX_SAMPLES


def test_design_s7_the_book_forgets_the_least_recently_touched_past_its_bound() -> None:
    book = LiveBook(max_claims=2)
    for claim in ("a", "b", "c"):
        book.reading(claim, Reading(T0, Energy(1, H)), None, None)
    assert book.get("a") is None and book.get("c") is not None and len(book) == 2


@pytest.mark.parametrize(
    "body",
    [
        {"at_ms": -1, "energy": {"uj": 1, "grade": "HwShunt"}},
        {"at_ms": 1.5, "energy": {"uj": 1, "grade": "HwShunt"}},
        {"at_ms": 1, "energy": {"uj": 1, "grade": "Guess"}},
        {"at_ms": 1, "energy": {"uj": 1, "grade": "HwShunt"}, "extra": 1},
        {"at_ms": 1, "energy": {"uj": 1, "grade": "HwShunt"}, "job": {"id": "x" * 300}},
        {"at_ms": 1, "energy": {"uj": 1, "grade": "HwShunt"}, "job": {"id": "a\nb"}},
        {"at_ms": 1},
        [],
    ],
)
def test_design_s7_a_hostile_reading_is_refused_naming_the_field(body: object) -> None:
    with pytest.raises(InvalidInput):
        parse_reading(body)


def test_design_s7_a_reading_carries_whose_job_it_is() -> None:
    body = {"at_ms": 5, "energy": {"uj": 1, "grade": "HwShunt"}, "job": {"id": "42", "user": "ann"}}
    reading, job = parse_reading(body)
    assert reading.at_ms == 5 and job is not None and job.to_json()["user"] == "ann"


@pytest.mark.parametrize(
    "body", [{"units": -1}, {"units": True}, {"units": 1, "total": "x"}, {"unit": "s"}, 3]
)
def test_api_a_hostile_progress_report_is_refused(body: object) -> None:
    with pytest.raises(InvalidInput):
        parse_progress(body, T0)
