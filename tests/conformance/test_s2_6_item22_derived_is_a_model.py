"""§7 item 22: a derived estimate's grade is capped at ModelBased (§2.6)."""

from joulepool.estimate import Derived, Observation, derive_estimate
from joulepool.grade import Energy, Grade
from tests.support.builders import H, M


def test_all_hardware_readings_still_give_a_model() -> None:
    history = [Observation("x", "a", Energy(u, H)) for u in (5, 9, 7)]
    result = derive_estimate(history, "x")
    assert isinstance(result, Derived)
    assert result.estimate == Energy(9, Grade.ModelBased)


def test_modelled_inputs_give_a_modelled_output() -> None:
    history = [Observation("x", "a", Energy(u, M)) for u in (5, 9, 7)]
    result = derive_estimate(history, "x")
    assert isinstance(result, Derived)
    assert result.estimate.grade is M
    assert (result.min_uj, result.max_uj) == (5, 9)
