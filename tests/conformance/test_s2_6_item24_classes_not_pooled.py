"""§7 item 24: refuse an empty class; never pool observations of differing classes (§2.6)."""

from joulepool.estimate import Declined, DeclineReason, Derived, Observation, derive_estimate
from joulepool.grade import Energy, Grade
from tests.support.builders import H


def mixed() -> list[Observation]:
    return [
        Observation("train", "a", Energy(100, H)),
        Observation("train", "a", Energy(110, H)),
        Observation("infer", "a", Energy(5, H)),
        Observation("infer", "a", Energy(6, H)),
        Observation(None, "a", Energy(999, H)),
        Observation("train", "b", Energy(500, H)),
    ]


def test_empty_and_missing_classes_are_refused() -> None:
    assert derive_estimate(mixed(), "") == Declined(DeclineReason.empty_class, 0, 0)
    assert derive_estimate(mixed(), None) == Declined(DeclineReason.empty_class, 0, 0)


def test_other_classes_do_not_count_towards_the_evidence() -> None:
    assert derive_estimate(mixed(), "infer") == Declined(DeclineReason.insufficient_evidence, 2, 2)


def test_a_class_derives_from_its_own_observations_only() -> None:
    assert derive_estimate(mixed(), "train") == Derived(
        Energy(500, Grade.ModelBased), 100, 500, 3, 3
    )


def test_scoped_to_one_entitlement() -> None:
    assert derive_estimate(mixed(), "train", entitlement="a") == Declined(
        DeclineReason.insufficient_evidence, 2, 2
    )
