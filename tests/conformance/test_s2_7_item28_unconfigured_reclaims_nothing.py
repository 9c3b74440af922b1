"""§7 item 28: reclaim nothing under an unconfigured policy (§2.7)."""

import pytest

from joulepool.grade import Energy
from joulepool.idle import (
    IdleObservation,
    IdlePolicy,
    IdleVerdictKind,
    NoVerdictReason,
    idle_verdict,
    reclamation_order,
)
from tests.support.builders import H

PARKED = IdleObservation("parked", 4, 3_600_000_000, Energy(0, H))


@pytest.mark.parametrize(
    "policy", [IdlePolicy(), IdlePolicy(window_us=60_000_000), IdlePolicy(threshold_uw=10**9)]
)
def test_without_both_window_and_threshold_nothing_is_idle(policy: IdlePolicy) -> None:
    v = idle_verdict(policy, PARKED)
    assert (v.kind, v.reason) == (IdleVerdictKind.no_verdict, NoVerdictReason.unconfigured)
    assert reclamation_order(policy, [PARKED]) == []


def test_the_same_workload_is_idle_once_configured() -> None:
    assert reclamation_order(IdlePolicy(60_000_000, 1), [PARKED]) == ["parked"]


def test_nothing_held_is_answered_before_the_policy() -> None:
    v = idle_verdict(IdlePolicy(), IdleObservation("none", 0, 0, Energy(0, H)))
    assert (v.kind, v.reason, v.mean_uw) == (IdleVerdictKind.nothing_held, None, None)
