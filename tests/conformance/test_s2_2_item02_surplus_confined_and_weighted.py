"""§7 item 2: surplus stays among siblings of one parent; a borrower is bounded by its share."""

from joulepool.admission import Admit, Deny, DenyReason, Queue, QueueReason, decide
from joulepool.tree import Tree, Usage
from tests.support.builders import M, claim, ent, spend, team_tree


def test_borrowing_within_the_weighted_share_is_admitted() -> None:
    # W = 1+1+2 = 4; c's share = floor((1000+1000) * 2 / 4) = 1000.
    tree = team_tree(weights=(1, 1, 2))
    verdict = decide(tree, Usage(tree), claim("c1", "c", 2000, M))
    assert verdict == Admit(claim("x", "c", 2000, M).estimate, 1, 1000)


def test_one_microjoule_past_the_share_is_refused() -> None:
    tree = team_tree(weights=(1, 1, 2))
    assert decide(tree, Usage(tree), claim("c1", "c", 2001, M)) == Deny(
        DenyReason.exceeds_weighted_share
    )


def test_share_is_rounded_down() -> None:
    # W = 3, a's share = floor(2000 * 1 / 3) = 666.
    tree = team_tree()
    assert isinstance(decide(tree, Usage(tree), claim("c1", "a", 1666, M)), Admit)
    assert decide(tree, Usage(tree), claim("c2", "a", 1667, M)) == Deny(
        DenyReason.exceeds_weighted_share
    )


def test_a_root_has_no_siblings_and_never_borrows() -> None:
    tree = Tree([ent("r1", 100, 4, 5), ent("r2", 10_000, 4, 5)])
    assert decide(tree, Usage(tree), claim("c1", "r1", 101, M)) == Deny(
        DenyReason.exceeds_weighted_share
    )
    usage = spend(Usage(tree), "r1", 100)
    assert decide(tree, usage, claim("c2", "r1", 1, M)) == Queue(QueueReason.surplus_insufficient)


def test_a_cousins_unspent_guarantee_is_not_surplus() -> None:
    tree = Tree(
        [
            ent("org", 0, 10, 0),
            ent("d1", 0, 10, 1, parent="org"),
            ent("d2", 0, 10, 1, parent="org"),
            ent("x", 100, 4, 1, parent="d1"),
            ent("y", 100, 4, 1, parent="d1"),
            ent("z", 1_000_000, 4, 1, parent="d2"),
        ]
    )
    usage = spend(Usage(tree), "y", 100)  # x's only sibling has spent everything
    spend(usage, "x", 100)
    assert decide(tree, usage, claim("c1", "x", 1, M)) == Queue(QueueReason.surplus_insufficient)


def test_share_does_not_depend_on_what_another_borrower_took_first() -> None:
    # Lender c unspent 1000; a and b have weight 1 of W = 3: each may borrow floor(1000/3) = 333.
    tree = team_tree(weights=(1, 1, 1))
    usage = spend(Usage(tree), "a", 1000)
    spend(usage, "b", 1000)
    first = decide(tree, usage, claim("c1", "a", 333, M))
    assert first == Admit(claim("x", "a", 333, M).estimate, 1, 333)
    spend(usage, "a", 333)
    # a claiming first did not shrink b's share: b still gets its 333.
    assert decide(tree, usage, claim("c2", "b", 333, M)) == Admit(
        claim("x", "b", 333, M).estimate, 1, 333
    )
    assert decide(tree, usage, claim("c3", "a", 1, M)) == Queue(QueueReason.surplus_insufficient)


def test_borrowing_beyond_what_lenders_left_unspent_queues() -> None:
    # b alone borrows from a's unspent; a then spends part of its guarantee.
    tree = Tree(
        [ent("p", 0, 10, 0), ent("a", 1000, 4, 0, parent="p"), ent("b", 1000, 4, 1, parent="p")]
    )
    usage = spend(Usage(tree), "b", 1000)
    spend(usage, "a", 600)  # L_b = 400, share = floor(400 * 1 / 1) = 400
    assert isinstance(decide(tree, usage, claim("c1", "b", 400, M)), Admit)
    assert decide(tree, usage, claim("c2", "b", 401, M)) == Queue(QueueReason.surplus_insufficient)
