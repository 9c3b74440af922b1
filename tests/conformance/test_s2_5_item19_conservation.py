"""§7 item 19: a device total is conserved exactly, remainder by a deterministic rule (§2.5)."""

from joulepool.attribution import attribute
from joulepool.grade import Energy
from tests.support.builders import H, M


def test_even_split_has_no_remainder() -> None:
    assert attribute(Energy(90, H), {"a": 1, "b": 2}) == {"a": Energy(30, M), "b": Energy(60, M)}


def test_remainder_goes_to_the_largest_fractional_remainders() -> None:
    # 10 * (1, 2, 4) / 7 = 1.43, 2.86, 5.71: floors 1, 2, 5 (8); remainders 3, 6, 5 -> b, c get 1.
    shares = attribute(Energy(10, H), {"a": 1, "b": 2, "c": 4})
    assert {k: v.uj for k, v in shares.items()} == {"a": 1, "b": 3, "c": 6}


def test_equal_remainders_break_on_occupant_id_in_code_point_order() -> None:
    # 10 / 3 each: floors 3, remainder 1 each; one microjoule left, to the smallest id.
    shares = attribute(Energy(10, H), {"zeta": 1, "Alpha": 1, "beta": 1})
    assert {k: v.uj for k, v in shares.items()} == {"Alpha": 4, "beta": 3, "zeta": 3}


def test_the_order_occupants_are_listed_in_changes_nothing() -> None:
    a = attribute(Energy(1001, H), {"x": 3, "y": 5, "z": 7})
    b = attribute(Energy(1001, H), {"z": 7, "x": 3, "y": 5})
    assert a == b
    assert sum(s.uj for s in a.values()) == 1001
