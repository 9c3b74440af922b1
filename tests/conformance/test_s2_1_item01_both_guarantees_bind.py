"""§7 item 1: enforce both guarantees of §2.1, refusing a claim that exceeds either."""

from joulepool.admission import Admit, Deny, DenyReason, Queue, QueueReason, decide
from joulepool.tree import Tree, Usage
from tests.support.builders import E, H, claim, ent, spend, team_tree


def test_claim_within_both_guarantees_is_admitted() -> None:
    tree = team_tree()
    verdict = decide(tree, Usage(tree), claim("c1", "a", 1000, H, gang=2, per_member=2))
    assert verdict == Admit(claim("c1", "a", 1000).estimate, 4, 0)


def test_devices_beyond_device_guarantee_are_refused_even_with_energy_to_spare() -> None:
    tree = team_tree(gd=4)
    verdict = decide(tree, Usage(tree), claim("c1", "a", 1, H, gang=5, per_member=1))
    assert verdict == Deny(DenyReason.devices_exceed_guarantee)


def test_devices_held_by_running_work_queue_a_claim_that_fits_energy() -> None:
    tree = team_tree(gd=4)
    usage = spend(Usage(tree), "a", 10, devices=3)
    assert decide(tree, usage, claim("c1", "a", 10, H, per_member=2)) == Queue(
        QueueReason.devices_held
    )


def test_energy_beyond_guarantee_is_refused_for_a_guess_even_with_devices_free() -> None:
    tree = team_tree(g=1000)
    usage = spend(Usage(tree), "a", 900)
    verdict = decide(tree, usage, claim("c1", "a", 200, E))
    assert verdict == Queue(QueueReason.guarantee_exhausted_may_not_borrow)


def test_energy_exactly_at_the_guarantee_is_within_it() -> None:
    tree = Tree([ent("solo", 500, 1, 0)])
    usage = spend(Usage(tree), "solo", 200)
    assert isinstance(decide(tree, usage, claim("c1", "solo", 300)), Admit)
    assert decide(tree, usage, claim("c2", "solo", 301)) == Queue(
        QueueReason.guarantee_exhausted_may_not_borrow
    )


def test_devices_never_borrow_from_a_sibling_with_idle_devices() -> None:
    tree = team_tree(gd=2)
    usage = spend(Usage(tree), "a", 0, devices=2)
    # b and c hold nothing, but devices are not surplus (DESIGN.md §3).
    assert decide(tree, usage, claim("c1", "a", 1)) == Queue(QueueReason.devices_held)
