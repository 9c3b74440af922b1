"""§7 item 9: order preemption by evidence before declaration (§5.2)."""

import pytest

from joulepool.errors import InvalidInput
from joulepool.preemption import Workload, preemption_order


def test_defined_costs_first_most_expensive_first() -> None:
    order = preemption_order(
        [Workload("cheap", 10, 10, 0), Workload("dear", 100, 10, 0), Workload("mid", 50, 10, 0)]
    )
    assert order == ["dear", "mid", "cheap"]


def test_unmeasured_work_follows_all_measured_work_lowest_priority_first() -> None:
    order = preemption_order(
        [
            Workload("new-low", 10**12, 0, 1),
            Workload("measured-cheap", 1, 1000, 9),
            Workload("new-high", 5, 0, 7),
        ]
    )
    # A huge spend with nothing completed is not "infinitely expensive": it is unmeasured.
    assert order == ["measured-cheap", "new-low", "new-high"]


def test_ties_break_on_the_key() -> None:
    order = preemption_order(
        [
            Workload("b", 4, 2, 0),
            Workload("a", 2, 1, 0),
            Workload("d", 0, 0, 3),
            Workload("c", 9, 0, 3),
        ]
    )
    assert order == ["a", "b", "c", "d"]


def test_costs_compare_exactly_not_as_floats() -> None:
    # 10**17+1 / 10**17 and 1/1 are equal as floats but not as numbers.
    order = preemption_order([Workload("one", 1, 1, 0), Workload("more", 10**17 + 1, 10**17, 0)])
    assert order == ["more", "one"]


def test_a_duplicate_key_is_refused() -> None:
    with pytest.raises(InvalidInput, match="appears twice"):
        preemption_order([Workload("x", 1, 1, 0), Workload("x", 2, 1, 0)])
