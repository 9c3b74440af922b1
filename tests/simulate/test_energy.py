"""Durations from Gavel rates; ModelBased only where Zeus measured the same model (§2.3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from joulepool.grade import Energy, Grade
from joulepool_sim.energy import (
    EnergyModel,
    ModelledJob,
    Unmodelled,
    read_power_profiles,
    read_throughputs,
)
from joulepool_sim.errors import SimulationInputError
from joulepool_sim.trace import TraceJob
from tests.simulate.helpers import write_data


@pytest.fixture
def model(tmp_path: Path) -> EnergyModel:
    root = write_data(tmp_path, {}, {"a": 1})
    return EnergyModel(
        read_throughputs(root / "philly-gavel" / "simulation_throughputs.json", "v100"),
        read_power_profiles(root / "zeus-power" / "summary_power_v100.csv"),
        300_000_000,
    )


def _job(job_type: str, steps: int, gpus: int) -> TraceJob:
    return TraceJob("a", 1, job_type, steps, 0, gpus)


def test_resnet50_is_model_based_from_the_highest_power_limit(model: EnergyModel) -> None:
    out = model.model(_job("ResNet-50 (batch size 64)", 100, 2))
    assert isinstance(out, ModelledJob)
    # 100 steps at 4.0 steps/s = 25 s; 200.25 W (the 250 W limit's larger row) × 2 GPUs.
    assert out.duration_us == 25_000_000
    assert out.energy == Energy(200_250_000 * 2 * 25, Grade.ModelBased)
    assert not out.scaled_rate


def test_a_model_zeus_did_not_measure_is_an_estimator_guess(model: EnergyModel) -> None:
    out = model.model(_job("LM (batch size 20)", 30, 1))
    assert isinstance(out, ModelledJob)
    assert out.duration_us == 3_000_000
    assert out.energy == Energy(300 * 3 * 1_000_000, Grade.Estimator)


def test_an_untabulated_gang_scales_the_largest_smaller_one(model: EnergyModel) -> None:
    out = model.model(_job("ResNet-50 (batch size 64)", 160, 8))
    assert isinstance(out, ModelledJob)
    # Gang of 2 runs 4.0 steps/s; 8 GPUs are taken as 16.0 steps/s: 10 s.
    assert out.duration_us == 10_000_000
    assert out.scaled_rate


def test_a_job_type_with_no_rate_is_left_unmodelled(model: EnergyModel) -> None:
    out = model.model(_job("CycleGAN", 10, 1))
    assert isinstance(out, Unmodelled)
    assert "no v100 throughput for 'CycleGAN'" in out.reason


def test_bad_data_files_are_refused_by_name(tmp_path: Path) -> None:
    root = write_data(tmp_path, {}, {"a": 1})
    rates = root / "philly-gavel" / "simulation_throughputs.json"
    with pytest.raises(SimulationInputError, match="no GPU type 'h100'"):
        read_throughputs(rates, "h100")
    rates.write_text('{"v100": {"(\'LM\', 1)": {"null": NaN}}}')
    with pytest.raises(SimulationInputError, match="not valid JSON"):
        read_throughputs(rates, "v100")
    zeus = root / "zeus-power" / "summary_power_v100.csv"
    zeus.write_text(zeus.read_text() + "imagenet,resnet50,x,adam,250,1,2\n")
    with pytest.raises(SimulationInputError, match=r"summary_power_v100.csv:5: batch_size"):
        read_power_profiles(zeus)
