"""§7 item 5: refuse surplus to an unobserved estimate (§4.4)."""

from joulepool.admission import Admit, Deny, DenyReason, Queue, QueueReason, decide
from joulepool.tree import Usage
from tests.support.builders import E, H, M, claim, spend, team_tree


def test_a_guess_spends_its_own_guarantee() -> None:
    tree = team_tree(g=1000)
    assert decide(tree, Usage(tree), claim("c1", "a", 1000, E)) == Admit(
        claim("x", "a", 1000, E).estimate, 1, 0
    )


def test_a_guess_that_would_borrow_from_a_partly_spent_guarantee_queues() -> None:
    tree = team_tree(g=1000)
    usage = spend(Usage(tree), "a", 500)
    assert decide(tree, usage, claim("c1", "a", 501, E)) == Queue(
        QueueReason.guarantee_exhausted_may_not_borrow
    )


def test_the_same_figure_observed_borrows() -> None:
    tree = team_tree(g=1000)
    usage = spend(Usage(tree), "a", 500)
    for grade in (H, M):
        verdict = decide(tree, usage, claim("c1", "a", 501, grade))
        assert verdict == Admit(claim("x", "a", 501, grade).estimate, 1, 1)


def test_a_guess_beyond_the_whole_guarantee_is_denied_from_empty() -> None:
    tree = team_tree(g=1000)
    assert decide(tree, Usage(tree), claim("c1", "a", 1001, E)) == Deny(
        DenyReason.unobserved_cannot_borrow
    )


def test_zero_weight_never_borrows_even_when_observed() -> None:
    tree = team_tree(weights=(0, 1, 1))
    usage = spend(Usage(tree), "a", 999)
    assert decide(tree, usage, claim("c1", "a", 2, H)) == Queue(
        QueueReason.guarantee_exhausted_may_not_borrow
    )
