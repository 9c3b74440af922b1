"""§7 item 26: a stated window, no verdict below it, an empty window is no rate (§2.7)."""

from joulepool.grade import Energy
from joulepool.idle import (
    IdleObservation,
    IdlePolicy,
    IdleVerdictKind,
    NoVerdictReason,
    idle_verdict,
    mean_uw,
)
from tests.support.builders import H


def test_startup_shorter_than_the_window_is_not_idleness() -> None:
    v = idle_verdict(
        IdlePolicy(60_000_000, 1_000_000), IdleObservation("w", 1, 59_999_999, Energy(0, H))
    )
    assert (v.kind, v.reason) == (IdleVerdictKind.no_verdict, NoVerdictReason.window_too_short)


def test_exactly_the_window_reaches_a_verdict() -> None:
    v = idle_verdict(
        IdlePolicy(60_000_000, 1_000_000), IdleObservation("w", 1, 60_000_000, Energy(0, H))
    )
    assert v.kind is IdleVerdictKind.idle


def test_an_empty_window_yields_no_rate_not_a_rate_of_zero() -> None:
    v = idle_verdict(IdlePolicy(0, 1_000_000), IdleObservation("w", 1, 0, Energy(0, H)))
    assert (v.kind, v.reason, v.mean_uw) == (
        IdleVerdictKind.no_verdict,
        NoVerdictReason.empty_window,
        None,
    )
    assert mean_uw(0, 0) is None


def test_the_rate_is_compared_exactly() -> None:
    # 3001 µJ over 2 s is 1500.5 µW: floored it would equal a 1500 µW threshold, exactly it is above.
    v = idle_verdict(
        IdlePolicy(2_000_000, 1500), IdleObservation("w", 1, 2_000_000, Energy(3001, H))
    )
    assert v.kind is IdleVerdictKind.working
    assert v.mean_uw == 1500
