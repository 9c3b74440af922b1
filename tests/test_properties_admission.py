"""Property tests of admission (§2.1, §2.2, §4): whatever the order the same claims arrive in,
no admission takes an entitlement past a guarantee without borrowing, past its limit, or a
borrower past its weighted share; and a guess never borrows."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from joulepool.admission import Admit, decide
from joulepool.claim import Claim
from joulepool.grade import Energy, Grade
from joulepool.tree import Entitlement, Tree, Usage


@st.composite
def trees(draw: st.DrawFn) -> Tree:
    """A root with one to five teams, some with a nested team of their own."""
    n = draw(st.integers(1, 5))
    nodes = [
        Entitlement(
            "root", draw(st.integers(0, 500)), draw(st.integers(0, 8)), draw(st.integers(0, 3))
        )
    ]
    for i in range(n):
        g = draw(st.integers(0, 1000))
        limit = draw(st.one_of(st.none(), st.integers(g, 3000)))
        nodes.append(
            Entitlement(f"t{i}", g, draw(st.integers(0, 6)), draw(st.integers(0, 4)), "root", limit)
        )
        if draw(st.booleans()):
            nodes.append(
                Entitlement(
                    f"t{i}x", draw(st.integers(0, 500)), 4, draw(st.integers(0, 4)), f"t{i}"
                )
            )
    return Tree(nodes)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Tree, list[Claim], list[int]]:
    tree = draw(trees())
    ids = [e.id for e in tree]
    claims = [
        Claim(
            f"c{i}",
            draw(st.sampled_from(ids)),
            draw(st.integers(1, 2)),
            draw(st.integers(1, 3)),
            Energy(draw(st.integers(0, 1500)), draw(st.sampled_from(list(Grade)))),
        )
        for i in range(draw(st.integers(1, 25)))
    ]
    order = draw(st.permutations(range(len(claims))))
    return tree, claims, list(order)


def brute_lendable(tree: Tree, usage: Usage, node: str) -> int:
    parent = tree[node].parent
    if parent is None:
        return 0
    return sum(
        max(0, tree[c].guarantee_uj - usage.spent_uj(c)) for c in tree.children(parent) if c != node
    )


def brute_group_borrowed(tree: Tree, usage: Usage, node: str) -> int:
    parent = tree[node].parent
    group = [node] if parent is None else list(tree.children(parent))
    return sum(max(0, usage.spent_uj(c) - tree[c].guarantee_uj) for c in group)


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_no_arrival_order_breaks_a_guarantee_a_limit_or_a_share(
    scenario: tuple[Tree, list[Claim], list[int]],
) -> None:
    tree, claims, order = scenario
    usage = Usage(tree)
    for index in order:
        c = claims[index]
        ent = tree[c.entitlement]
        before = usage.spent_uj(ent.id)
        verdict = decide(tree, usage, c)
        if not isinstance(verdict, Admit):
            continue
        usage.move(
            ent.id,
            spent_uj=c.estimate.uj,
            reserved_uj=c.estimate.uj,
            held_devices=c.devices,
            running_claims=1,
        )
        after = usage.spent_uj(ent.id)
        g = ent.guarantee_uj
        assert verdict.reserved == c.estimate
        assert usage.held_devices(ent.id) <= ent.guarantee_devices
        if ent.limit_uj is not None:
            assert after <= ent.limit_uj
        assert verdict.borrowed_uj == max(0, after - g) - max(0, before - g)
        if verdict.borrowed_uj > 0:
            # Past the guarantee only by borrowing: observed, weighted, within the share.
            assert c.estimate.grade.observed
            assert ent.over_quota_weight > 0
            lendable = brute_lendable(tree, usage, ent.id)
            share = lendable * ent.over_quota_weight // tree.group_weight(ent.id)
            assert after - g <= share
            assert brute_group_borrowed(tree, usage, ent.id) <= lendable
        if not c.estimate.grade.observed:
            assert verdict.borrowed_uj == 0
            assert after <= g or c.estimate.uj == 0
        # The O(1) aggregates agree with the sums they stand for.
        for node in tree:
            assert usage.lendable_uj(node.id) == brute_lendable(tree, usage, node.id)
            assert usage.group_borrowed_uj(node.id) == brute_group_borrowed(tree, usage, node.id)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 10**6),
    st.integers(0, 10**6),
    st.integers(0, 10**9),
    st.integers(1, 10),
)
def test_an_estimator_estimate_never_borrows(g: int, spent: int, est: int, weight: int) -> None:
    tree = Tree(
        [
            Entitlement("p", 0, 10, 0),
            Entitlement("a", g, 10, weight, "p"),
            Entitlement("rich", 10**12, 10, 0, "p"),
        ]
    )
    usage = Usage(tree)
    usage.move("a", spent_uj=spent)
    verdict = decide(tree, usage, Claim("c", "a", 1, 1, Energy(est, Grade.Estimator)))
    if isinstance(verdict, Admit):
        assert verdict.borrowed_uj == 0
        assert spent + est <= g
