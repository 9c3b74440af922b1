"""Decisions per second against a 10,000-entitlement tree, with 10 and with 10,000 siblings.

One decision must cost the same whatever the size of the claim's sibling group (DESIGN.md
§3: per-parent aggregates in Usage). Both runs happen in one process, so their ratio is
comparable on a noisy machine. Prints one JSON object.
"""

from __future__ import annotations

import json
import time

from joulepool.admission import decide
from joulepool.claim import Claim
from joulepool.grade import Energy, Grade
from joulepool.tree import Entitlement, Tree, Usage

NODES = 10_000
DECISIONS = 200_000


def build(siblings: int) -> tuple[Tree, Usage, list[Claim]]:
    """A 10,000-node tree whose measured parent has `siblings` children, and usage in it."""
    nodes = [Entitlement("root", 0, 10**6, 0)]
    groups = (NODES - 1) // siblings
    for p in range(groups):
        parent = f"p{p}"
        if siblings < NODES - 1:
            nodes.append(Entitlement(parent, 0, 10**6, 1, "root"))
        else:
            parent = "root"
        for c in range(siblings):
            nodes.append(Entitlement(f"{parent}.t{c}", 10_000, 8, 1 + c % 3, parent))
        if len(nodes) >= NODES:
            break
    tree = Tree(nodes[:NODES])
    usage = Usage(tree)
    target = "p0" if siblings < NODES - 1 else "root"
    kids = tree.children(target)
    for i, kid in enumerate(kids):
        usage.move(kid, spent_uj=(i * 3_737) % 12_000, held_devices=i % 4)
    # A mix that reaches every step of the decision, borrowing most of all.
    claims = []
    for i in range(64):
        kid = kids[i % len(kids)]
        grade = (Grade.HwShunt, Grade.ModelBased, Grade.Estimator)[i % 3]
        claims.append(Claim(f"c{i}", kid, 1, 1 + i % 3, Energy(500 + (997 * i) % 14_000, grade)))
    return tree, usage, claims


def rate(siblings: int) -> tuple[float, dict[str, int]]:
    tree, usage, claims = build(siblings)
    assert len(tree) == NODES
    verdicts: dict[str, int] = {}
    for c in claims:
        v = decide(tree, usage, c)
        key = v.verdict if v.verdict == "admit" else f"{v.verdict}:{v.reason.value}"
        verdicts[key] = verdicts.get(key, 0) + 1
    n = len(claims)
    start = time.perf_counter()
    for i in range(DECISIONS):
        decide(tree, usage, claims[i % n])
    return DECISIONS / (time.perf_counter() - start), verdicts


def main() -> None:
    few, mix_few = rate(10)
    many, mix_many = rate(NODES - 1)
    print(
        json.dumps(
            {
                "entitlements": NODES,
                "decisions": DECISIONS,
                "decisions_per_s_10_siblings": round(few),
                "decisions_per_s_10000_siblings": round(many),
                "sibling_ratio": round(many / few, 3),
                "verdict_mix_10_siblings": mix_few,
                "verdict_mix_10000_siblings": mix_many,
                "goal": {"decisions_per_s_min": 50_000, "sibling_ratio_min": 0.8},
            }
        )
    )


if __name__ == "__main__":
    main()
