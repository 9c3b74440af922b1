"""§7 item 27: a workload with no verdict is absent from the reclamation order (§2.7)."""

from joulepool.grade import Energy
from joulepool.idle import IdleObservation, IdlePolicy, reclamation_order
from tests.support.builders import E, H, M

POLICY = IdlePolicy(10_000_000, 5_000_000)


def test_only_idle_workloads_are_ordered_lowest_power_first() -> None:
    order = reclamation_order(
        POLICY,
        [
            IdleObservation("warm", 1, 10_000_000, Energy(40_000_000, H)),  # 4 W: idle
            IdleObservation("cold", 2, 10_000_000, Energy(1_000_000, M)),  # 0.1 W: idle
            IdleObservation("busy", 1, 10_000_000, Energy(900_000_000, H)),  # working
        ],
    )
    assert order == ["cold", "warm"]


def test_no_verdict_and_nothing_held_are_not_ranked_last_they_are_absent() -> None:
    order = reclamation_order(
        POLICY,
        [
            IdleObservation("guess", 1, 10_000_000, Energy(0, E)),
            IdleObservation("young", 1, 1_000, Energy(0, H)),
            IdleObservation("empty", 0, 10_000_000, Energy(0, H)),
            IdleObservation("parked", 1, 10_000_000, Energy(0, H)),
        ],
    )
    assert order == ["parked"]


def test_equal_power_breaks_on_the_key() -> None:
    order = reclamation_order(
        POLICY,
        [IdleObservation(k, 1, 10_000_000, Energy(100, H)) for k in ("b", "a", "c")],
    )
    assert order == ["a", "b", "c"]
