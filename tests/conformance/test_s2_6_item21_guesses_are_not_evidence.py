"""§7 item 21: Estimator observations are excluded, and both counts reported (§2.6)."""

from joulepool.estimate import Declined, DeclineReason, Derived, Observation, derive_estimate
from joulepool.grade import Energy
from tests.support.builders import E, H, M


def obs(uj: int, grade: object, class_: str | None = "train", ent: str = "a") -> Observation:
    return Observation(class_, ent, Energy(uj, grade))  # type: ignore[arg-type]


def test_guesses_are_excluded_from_the_figure() -> None:
    history = [obs(100, H), obs(120, M), obs(110, H), obs(10_000, E)]
    result = derive_estimate(history, "train")
    assert result == Derived(Energy(120, M), 100, 120, 4, 3)


def test_a_history_of_guesses_declines_and_says_it_needs_a_meter() -> None:
    history = [obs(100, E)] * 5
    assert derive_estimate(history, "train") == Declined(DeclineReason.insufficient_evidence, 5, 0)


def test_little_history_declines_and_says_it_needs_patience() -> None:
    history = [obs(100, H), obs(100, E)]
    assert derive_estimate(history, "train") == Declined(DeclineReason.insufficient_evidence, 2, 1)
