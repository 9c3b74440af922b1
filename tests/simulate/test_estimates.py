"""Users' estimate errors (a stated log-normal model) and measured releases (§2.3, §2.6)."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from joulepool.grade import Energy, Grade
from joulepool_sim.energy import ModelledJob
from joulepool_sim.errors import SimulationConfigError
from joulepool_sim.estimates import HIGHEST, LOWEST, ErrorModel, job_class, simulated
from joulepool_sim.trace import TraceJob


def trace_job(line: int, gpus: int = 1) -> TraceJob:
    return TraceJob("vc", line, "LM (batch size 20)", 10, 0, gpus)


def test_the_error_is_seeded_per_job_and_changes_with_the_seed() -> None:
    model = ErrorModel(seed=7)
    assert model.multiplier(trace_job(3)) == ErrorModel(seed=7).multiplier(trace_job(3))
    draws = [model.multiplier(trace_job(n)) for n in range(1, 50)]
    other = [ErrorModel(seed=8).multiplier(trace_job(n)) for n in range(1, 50)]
    assert draws != other
    assert all(m.denominator <= 1024 and LOWEST <= m <= HIGHEST for m in draws)


def test_the_drawn_multipliers_have_the_stated_median_and_share_of_under_estimates() -> None:
    model = ErrorModel(seed=0)
    draws = sorted(model.multiplier(trace_job(n)) for n in range(1, 4001))
    median = draws[len(draws) // 2]
    assert Fraction(17, 10) < median < Fraction(23, 10)
    under = sum(m < 1 for m in draws) / len(draws)
    # P(ln m < 0) = Φ(-ln 2 / 1) ≈ 0.244
    assert 0.21 < under < 0.28
    sigma = ErrorModel(seed=0, sigma=Fraction(0))
    assert {sigma.multiplier(trace_job(n)) for n in range(1, 20)} == {Fraction(2)}


def test_a_guess_is_an_estimator_and_the_release_is_measured_by_node_ownership() -> None:
    model = ErrorModel(seed=0, sigma=Fraction(0), median=Fraction(3, 2))
    one = ModelledJob(trace_job(1, 1), 10, Energy(1001, Grade.Estimator), "x", False)
    sim = simulated(one, model, gpus_per_node=2)
    assert sim.guess == Energy(math.ceil(1001 * 3 / 2), Grade.Estimator)
    assert sim.actual == Energy(1001, Grade.ModelBased)  # shares a 2-GPU node
    assert sim.requested_us == 15
    whole = ModelledJob(trace_job(2, 4), 10, Energy(1000, Grade.ModelBased), "x", False)
    assert simulated(whole, model, gpus_per_node=2).actual == Energy(1000, Grade.HwShunt)
    assert sim.class_ == job_class(one.job) == "LM (batch size 20) x1"


def test_a_model_that_states_no_error_is_refused() -> None:
    with pytest.raises(SimulationConfigError, match="median"):
        ErrorModel(median=Fraction(0))
    with pytest.raises(SimulationConfigError, match="sigma"):
        ErrorModel(sigma=Fraction(-1))
