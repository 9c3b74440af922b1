"""§7 item 3: every energy figure carries a grade, and the grade never improves silently."""

import pytest

from joulepool.errors import InvalidInput
from joulepool.grade import Energy, Grade
from tests.support.builders import E, H, M


def test_every_energy_figure_carries_its_grade() -> None:
    assert Energy(5, M).grade is M
    assert Energy(5, M).to_json() == {"uj": 5, "grade": "ModelBased"}


def test_an_energy_without_a_real_grade_is_refused() -> None:
    with pytest.raises(InvalidInput):
        Energy(5, "HwShunt")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="unknown grade"):
        Grade.parse("Measured")


@pytest.mark.parametrize("a", list(Grade))
@pytest.mark.parametrize("b", list(Grade))
def test_a_sum_takes_the_weaker_grade(a: Grade, b: Grade) -> None:
    total = Energy(1, a) + Energy(2, b)
    assert total.uj == 3
    assert total.grade.rank == max(a.rank, b.rank)


@pytest.mark.parametrize("grade", list(Grade))
@pytest.mark.parametrize("ceiling", list(Grade))
def test_capping_never_raises_a_grade(grade: Grade, ceiling: Grade) -> None:
    capped = Energy(7, grade).at_most(ceiling)
    assert capped.grade.rank >= grade.rank
    assert capped.grade.rank >= ceiling.rank


def test_dividing_degrades_a_counter_and_never_improves_a_guess() -> None:
    assert H.divided() is M
    assert M.divided() is M
    assert E.divided() is E


def test_only_hwshunt_and_modelbased_are_observed() -> None:
    assert [g for g in Grade if g.observed] == [H, M]
