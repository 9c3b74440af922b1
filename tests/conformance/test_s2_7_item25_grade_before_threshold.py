"""§7 item 25: never establish idleness from an Estimator figure; grade before threshold (§2.7)."""

from joulepool.grade import Energy
from joulepool.idle import (
    IdleObservation,
    IdlePolicy,
    IdleVerdictKind,
    NoVerdictReason,
    idle_verdict,
)
from tests.support.builders import E, H, M


def test_an_observed_low_draw_is_idle() -> None:
    for grade in (H, M):
        v = idle_verdict(
            IdlePolicy(60_000_000, 50_000_000),
            IdleObservation("w", 1, 60_000_000, Energy(0, grade)),
        )
        assert v.kind is IdleVerdictKind.idle


def test_zero_microjoules_from_a_guess_is_no_verdict() -> None:
    v = idle_verdict(
        IdlePolicy(60_000_000, 50_000_000), IdleObservation("w", 1, 60_000_000, Energy(0, E))
    )
    assert (v.kind, v.reason) == (IdleVerdictKind.no_verdict, NoVerdictReason.unobserved)


def test_no_threshold_however_high_lets_a_guess_through() -> None:
    v = idle_verdict(IdlePolicy(1, 2**64 - 1), IdleObservation("w", 8, 10**9, Energy(1, E)))
    assert v.kind is IdleVerdictKind.no_verdict
    assert v.reason is NoVerdictReason.unobserved


def test_a_busy_observed_workload_is_working() -> None:
    v = idle_verdict(
        IdlePolicy(1_000_000, 50_000_000),
        IdleObservation("w", 1, 1_000_000, Energy(300_000_000, H)),
    )
    assert v.kind is IdleVerdictKind.working
    assert v.mean_uw == 300_000_000  # 300 J over 1 s is 300 W
