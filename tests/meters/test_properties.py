"""Properties: no negative figure, no figure from an unavailable meter, exact arithmetic."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings
from prometheus_client import utils as prometheus_utils

from joulepool.attribution import attribute
from joulepool.grade import Energy, Grade
from joulepool.meters import (
    MeterUnavailable,
    RaplMeter,
    Reading,
    UnavailableReason,
    claim_share,
    energy_between,
)
from joulepool.meters.prometheus import joules_text_to_uj, millijoules_text_to_uj


def go_text(value: float) -> str:
    """The text prometheus-client (like Go's client) prints for a sample value."""
    text: str = prometheus_utils.floatToGoString(value)  # type: ignore[no-untyped-call]
    return text


grades = st.sampled_from(list(Grade))
counters = st.integers(min_value=0, max_value=2**64 - 1)  # every figure (DESIGN.md §3)
times = st.integers(min_value=0, max_value=2**40)


@given(counters, counters, times, times, grades, grades)
def test_never_negative_and_a_reset_is_never_a_figure(
    a: int, b: int, ta: int, tb: int, ga: Grade, gb: Grade
) -> None:
    first = Reading("nvml:0", a, min(ta, tb), ga, 1000)
    second = Reading("nvml:0", b, max(ta, tb), gb, 1000)
    if b < a:
        with pytest.raises(MeterUnavailable) as info:
            energy_between(first, second)
        assert info.value.reason is UnavailableReason.counter_reset
        return
    energy = energy_between(first, second)
    assert energy.uj == b - a >= 0
    assert energy.grade is ga.weaker(gb)


@given(st.integers(min_value=1, max_value=2**48), st.data())
def test_one_wrap_is_exact_for_any_counters_within_range(wrap: int, data: st.DataObject) -> None:
    a = data.draw(st.integers(min_value=0, max_value=wrap - 1))
    b = data.draw(st.integers(min_value=0, max_value=wrap - 1))
    energy = energy_between(
        Reading("rapl:intel-rapl:0", a, 0, Grade.HwShunt, 1, wrap_uj=wrap),
        Reading("rapl:intel-rapl:0", b, 1, Grade.HwShunt, 1, wrap_uj=wrap),
    )
    assert energy.uj == (b - a) % wrap
    assert 0 <= energy.uj < wrap


file_text = st.one_of(
    st.integers(min_value=0, max_value=10**12).map(str),
    st.text(max_size=12),
    st.just(""),
    st.just("-1"),
)


@settings(max_examples=60, deadline=None)
@given(file_text, st.booleans())
def test_a_rapl_read_is_the_file_s_integer_or_a_refusal(text: str, present: bool) -> None:
    root = Path(tempfile.mkdtemp(prefix="powercap-prop-"))
    try:
        zone = root / "intel-rapl:0"
        zone.mkdir()
        (zone / "max_energy_range_uj").write_text("262143328850\n")
        if present:
            (zone / "energy_uj").write_text(text + "\n", encoding="utf-8")
        try:
            reading = RaplMeter("intel-rapl:0", root).read()
        except MeterUnavailable:
            return
        # A figure came back only because the file said exactly that figure.
        assert present
        assert text.strip().isascii()
        assert text.strip().isdigit()
        assert reading.counter_uj == int(text.strip())
    finally:
        shutil.rmtree(root, ignore_errors=True)


@given(st.integers(min_value=0, max_value=2**51))
def test_kepler_joules_printed_from_a_float_recover_the_exact_uj(uj: int) -> None:
    # What Kepler does: whole µJ / 1e6 as a float64, printed in shortest form.
    assert joules_text_to_uj(go_text(uj / 1e6), "kepler:x") == uj


@given(st.integers(min_value=0, max_value=2**53 - 1))
def test_dcgm_mj_printed_from_a_float_is_exact_below_2_53(mj: int) -> None:
    assert millijoules_text_to_uj(go_text(float(mj)), "dcgm:x") == mj * 1000


@given(st.integers(min_value=0, max_value=2**80))
def test_dcgm_mj_printed_as_plain_digits_is_exact_at_any_size(mj: int) -> None:
    assert millijoules_text_to_uj(str(mj), "dcgm:x") == mj * 1000


occupant_weights = st.dictionaries(
    st.sampled_from(["a", "b", "c", "job"]), st.integers(min_value=0, max_value=50), min_size=1
).filter(lambda d: "job" in d and sum(d.values()) > 0)


@given(
    st.dictionaries(
        st.sampled_from(["nvml:0", "nvml:1", "dcgm:GPU-x", "kepler:y"]),
        st.tuples(st.integers(min_value=0, max_value=10**12), grades, occupant_weights),
        min_size=1,
    )
)
def test_no_code_path_raises_a_grade(devices: dict[str, tuple[int, Grade, dict[str, int]]]) -> None:
    energy = {d: Energy(uj, g) for d, (uj, g, _) in devices.items()}
    occupants = {d: w for d, (_, _, w) in devices.items()}
    share = claim_share("job", energy, occupants)
    for uj, g, w in devices.values():
        assert share.grade.rank >= g.rank
        if len(w) > 1:
            assert share.grade.rank >= Grade.ModelBased.rank
        assert attribute(Energy(uj, g), w)["job"].uj <= uj
    assert share.uj <= sum(e.uj for e in energy.values())
