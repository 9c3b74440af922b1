"""§7 item 8: represent an undefined realised cost as undefined (§5.1)."""

from fractions import Fraction

import pytest

from joulepool.errors import InvalidInput
from joulepool.preemption import realised_cost


def test_cost_is_spent_per_completed_unit_exactly() -> None:
    assert realised_cost(10, 4) == Fraction(5, 2)
    assert realised_cost(0, 3) == 0


def test_nothing_completed_is_undefined_not_zero_or_infinite() -> None:
    cost = realised_cost(1_000_000, 0)
    assert cost is None


def test_negative_or_fractional_figures_are_refused() -> None:
    with pytest.raises(InvalidInput):
        realised_cost(-1, 1)
    with pytest.raises(InvalidInput):
        realised_cost(1, 1.5)  # type: ignore[arg-type]
