"""§7 item 4: admission in the order of §4, refusing the impossible before queueing anything."""

from joulepool.admission import Admit, Deny, DenyReason, Queue, QueueReason, decide
from joulepool.tree import Tree, Usage
from tests.support.builders import E, H, M, claim, ent, spend, team_tree


def test_unknown_entitlement_is_refused_first() -> None:
    tree = team_tree()
    # Also an empty gang: resolution comes before shape.
    assert decide(tree, Usage(tree), claim("c1", "nobody", 10, gang=0)) == Deny(
        DenyReason.unknown_entitlement
    )


def test_an_empty_gang_or_deviceless_members_claim_nothing() -> None:
    tree = team_tree()
    assert decide(tree, Usage(tree), claim("c1", "a", 10, gang=0)) == Deny(DenyReason.empty_gang)
    assert decide(tree, Usage(tree), claim("c2", "a", 10, per_member=0)) == Deny(
        DenyReason.empty_gang
    )


def test_impossible_devices_are_denied_even_while_devices_are_held() -> None:
    tree = team_tree(gd=4)
    usage = spend(Usage(tree), "a", 0, devices=4)
    # It would queue on devices_held if pendency were tested first.
    assert decide(tree, usage, claim("c1", "a", 1, gang=5)) == Deny(
        DenyReason.devices_exceed_guarantee
    )


def test_impossible_energy_is_denied_even_when_the_guarantee_is_spent() -> None:
    tree = Tree(
        [
            ent("p", 0, 9, 0),
            ent("a", 100, 4, 1, parent="p", limit=150),
            ent("b", 100, 4, 1, parent="p"),
        ]
    )
    usage = spend(Usage(tree), "a", 100)
    assert decide(tree, usage, claim("c1", "a", 151, M)) == Deny(DenyReason.energy_exceeds_limit)
    assert decide(tree, usage, claim("c2", "a", 50, M)) == Admit(
        claim("x", "a", 50, M).estimate, 1, 50
    )


def test_device_impossibility_is_tested_before_energy_impossibility() -> None:
    tree = Tree([ent("a", 100, 2, 1, limit=100)])
    assert decide(tree, Usage(tree), claim("c1", "a", 1000, E, gang=3)) == Deny(
        DenyReason.devices_exceed_guarantee
    )


def test_a_guess_larger_than_the_whole_guarantee_is_denied_not_queued() -> None:
    tree = team_tree(g=1000)
    assert decide(tree, Usage(tree), claim("c1", "a", 1001, E)) == Deny(
        DenyReason.unobserved_cannot_borrow
    )


def test_weight_zero_larger_than_the_guarantee_is_denied() -> None:
    tree = team_tree(weights=(0, 1, 1))
    assert decide(tree, Usage(tree), claim("c1", "a", 1001, H)) == Deny(
        DenyReason.weight_zero_cannot_borrow
    )


def test_unobserved_is_checked_before_weight_zero() -> None:
    tree = team_tree(weights=(0, 1, 1))
    assert decide(tree, Usage(tree), claim("c1", "a", 1001, E)) == Deny(
        DenyReason.unobserved_cannot_borrow
    )


def test_devices_held_is_tested_before_the_borrowing_rules() -> None:
    tree = team_tree(gd=2)
    usage = spend(Usage(tree), "a", 1000, devices=2)
    assert decide(tree, usage, claim("c1", "a", 10, E)) == Queue(QueueReason.devices_held)


def test_limit_is_tested_before_the_share() -> None:
    tree = Tree(
        [
            ent("p", 0, 9, 0),
            ent("a", 100, 4, 1, parent="p", limit=120),
            ent("b", 0, 4, 1, parent="p"),
        ]
    )
    usage = spend(Usage(tree), "a", 100)
    # Over the limit and also beyond the share (b lends nothing): limit_reached wins.
    assert decide(tree, usage, claim("c1", "a", 21, M)) == Queue(QueueReason.limit_reached)
    assert decide(tree, usage, claim("c2", "a", 20, M)) == Queue(QueueReason.surplus_insufficient)
