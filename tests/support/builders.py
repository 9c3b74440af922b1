"""Small builders for the objects of the standard, so each test states only what it checks."""

from __future__ import annotations

from joulepool.claim import Claim
from joulepool.grade import Energy, Grade
from joulepool.tree import Entitlement, Tree, Usage

H = Grade.HwShunt
M = Grade.ModelBased
E = Grade.Estimator


def ent(
    node_id: str,
    g: int,
    gd: int,
    w: int = 1,
    parent: str | None = None,
    limit: int | None = None,
    priority: int = 0,
) -> Entitlement:
    """An entitlement with guarantee `g` µJ, `gd` devices and weight `w`."""
    return Entitlement(node_id, g, gd, w, parent=parent, limit_uj=limit, priority=priority)


def claim(
    claim_id: str,
    entitlement: str,
    uj: int,
    grade: Grade = H,
    gang: int = 1,
    per_member: int = 1,
    class_: str | None = None,
) -> Claim:
    """A claim of `gang` members of `per_member` devices estimating `uj` at `grade`."""
    return Claim(claim_id, entitlement, gang, per_member, Energy(uj, grade), class_)


def team_tree(weights: tuple[int, int, int] = (1, 1, 1), g: int = 1000, gd: int = 4) -> Tree:
    """A department `dept` (a root) with teams `a`, `b`, `c` of guarantee `g` each."""
    return Tree(
        [
            ent("dept", 0, 100, 0),
            ent("a", g, gd, weights[0], parent="dept"),
            ent("b", g, gd, weights[1], parent="dept"),
            ent("c", g, gd, weights[2], parent="dept"),
        ]
    )


def spend(usage: Usage, node_id: str, uj: int, devices: int = 0) -> Usage:
    """Charge `uj` and hold `devices` against `node_id`, as a running claim would."""
    usage.move(node_id, spent_uj=uj, reserved_uj=uj, held_devices=devices, running_claims=1)
    return usage
