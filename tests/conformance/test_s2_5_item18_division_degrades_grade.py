"""§7 item 18: a divided figure's grade degrades, never HwShunt per tenant, never improved (§2.5)."""

import pytest

from joulepool.attribution import attribute
from joulepool.grade import Energy, Grade
from tests.support.builders import E, H, M


def test_a_counter_divided_between_two_occupants_is_a_model() -> None:
    shares = attribute(Energy(100, H), {"t1": 1, "t2": 1})
    assert {s.grade for s in shares.values()} == {M}


def test_a_sole_occupant_keeps_the_devices_own_grade() -> None:
    assert attribute(Energy(100, H), {"t1": 3}) == {"t1": Energy(100, H)}


@pytest.mark.parametrize("grade", [M, E])
def test_dividing_never_improves_a_model_or_a_guess(grade: Grade) -> None:
    shares = attribute(Energy(100, grade), {"t1": 1, "t2": 2, "t3": 0})
    assert {s.grade for s in shares.values()} == {grade}


def test_an_occupant_of_zero_weight_still_makes_it_a_division() -> None:
    # Two occupants listed is a division (DESIGN.md §3), whatever their weights.
    shares = attribute(Energy(90, H), {"busy": 1, "parked": 0})
    assert shares == {"busy": Energy(90, M), "parked": Energy(0, M)}
