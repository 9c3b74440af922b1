"""§7 item 23: derive nothing below the required evidence; a required count of 0 is 1 (§2.6)."""

from joulepool.estimate import Declined, DeclineReason, Derived, Observation, derive_estimate
from joulepool.grade import Energy
from tests.support.builders import H


def history(n: int) -> list[Observation]:
    return [Observation("x", "a", Energy(10 + i, H)) for i in range(n)]


def test_the_default_required_count_is_three() -> None:
    assert derive_estimate(history(2), "x") == Declined(DeclineReason.insufficient_evidence, 2, 2)
    assert isinstance(derive_estimate(history(3), "x"), Derived)


def test_a_required_count_of_zero_is_one() -> None:
    assert derive_estimate([], "x", required=0) == Declined(
        DeclineReason.insufficient_evidence, 0, 0
    )
    assert isinstance(derive_estimate(history(1), "x", required=0), Derived)


def test_a_higher_policy_count_is_honoured() -> None:
    assert derive_estimate(history(4), "x", required=5) == Declined(
        DeclineReason.insufficient_evidence, 4, 4
    )
