"""§7 item 6: distinguish Queue from Deny, with a reason on each (§4.5)."""

from joulepool.admission import Deny, DenyReason, Queue, QueueReason, decide
from joulepool.tree import Tree, Usage
from tests.support.builders import M, claim, ent, spend, team_tree


def test_devices_held_now_queue_devices_never_available_deny() -> None:
    tree = team_tree(gd=4)
    usage = spend(Usage(tree), "a", 0, devices=3)
    assert decide(tree, usage, claim("c1", "a", 1, per_member=2)) == Queue(QueueReason.devices_held)
    assert decide(tree, usage, claim("c2", "a", 1, per_member=5)) == Deny(
        DenyReason.devices_exceed_guarantee
    )


def test_limit_reached_now_queues_beyond_the_limit_ever_denies() -> None:
    tree = Tree(
        [
            ent("p", 0, 9, 0),
            ent("a", 100, 4, 1, parent="p", limit=200),
            ent("b", 1000, 4, 1, parent="p"),
        ]
    )
    usage = spend(Usage(tree), "a", 150)
    assert decide(tree, usage, claim("c1", "a", 60, M)) == Queue(QueueReason.limit_reached)
    assert decide(tree, usage, claim("c2", "a", 201, M)) == Deny(DenyReason.energy_exceeds_limit)


def test_surplus_short_now_queues_beyond_any_share_denies() -> None:
    tree = team_tree(weights=(1, 1, 1))
    usage = spend(Usage(tree), "b", 1000)
    spend(usage, "a", 1000)
    # Now L_a = 1000 (c alone), share 333; ever, with b and c unspent, share 666.
    assert decide(tree, usage, claim("c1", "a", 500, M)) == Queue(QueueReason.surplus_insufficient)
    assert decide(tree, usage, claim("c2", "a", 1667, M)) == Deny(DenyReason.exceeds_weighted_share)


def test_every_queue_and_deny_carries_a_reason() -> None:
    assert {r.value for r in QueueReason} == {
        "devices_held",
        "guarantee_exhausted_may_not_borrow",
        "limit_reached",
        "surplus_insufficient",
    }
    assert Queue(QueueReason.devices_held).to_json() == {
        "verdict": "queue",
        "reason": "devices_held",
    }
    assert Deny(DenyReason.empty_gang).to_json() == {"verdict": "deny", "reason": "empty_gang"}
