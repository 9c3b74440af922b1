"""The one grade table, and every meter taking its grade from it (§2.3, §2.5)."""

from __future__ import annotations

import joulepool.meters.grades as grades_module
from joulepool.grade import Energy, Grade
from joulepool.meters import (
    GRADE_TABLE,
    DcgmMeter,
    KeplerMeter,
    MeterKind,
    NvmlMeter,
    RaplMeter,
    TdpMeter,
    grade_of,
    grade_table_markdown,
    tdp_energy,
)


def test_the_table_in_the_docstring_is_the_table_in_the_code() -> None:
    assert grades_module.__doc__ is not None
    assert grade_table_markdown().strip() in grades_module.__doc__


def test_every_kind_has_one_row() -> None:
    assert sorted(r.kind for r in GRADE_TABLE) == sorted(MeterKind)


def test_each_meter_kind_carries_its_fixed_grade() -> None:
    assert grade_of(MeterKind.rapl) is Grade.HwShunt
    assert grade_of(MeterKind.nvml) is Grade.HwShunt
    assert grade_of(MeterKind.dcgm) is Grade.HwShunt
    assert grade_of(MeterKind.kepler) is Grade.ModelBased
    assert grade_of(MeterKind.tdp) is Grade.Estimator


def test_each_meter_carries_its_kind_s_grade() -> None:
    url = "http://127.0.0.1:1/metrics"
    meters = [
        RaplMeter("intel-rapl:0"),
        NvmlMeter("0"),
        DcgmMeter(url, "0"),
        KeplerMeter(url, "kepler_pod_gpu_joules_total", {"pod_name": "p"}),
        TdpMeter("gpu0", 700_000_000),
    ]
    for meter in meters:
        assert meter.grade is grade_of(meter.kind)


def test_tdp_times_time_is_an_estimate_rounded_up() -> None:
    assert tdp_energy(700_000_000, 1_000_000) == Energy(700_000_000, Grade.Estimator)
    assert tdp_energy(3, 1) == Energy(1, Grade.Estimator)
    assert tdp_energy(0, 10**9) == Energy(0, Grade.Estimator)


def test_a_tdp_meter_reads_as_an_estimator() -> None:
    meter = TdpMeter("gpu0", 1_000_000, started_at_us=0)
    reading = meter.read()
    assert reading.grade is Grade.Estimator
    # 1 W since the monotonic clock's origin: one µJ per µs.
    assert reading.counter_uj == reading.read_at_us
