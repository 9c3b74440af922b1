"""Usage as every surface reports it: each entitlement's own figures and, for an interior
node, its subtree's totals beside them (API.md "Usage fields"; `pool usage`).

Admission compares each node's own figures (DESIGN.md §3): a claim filed at a leaf moves the
leaf's figures, not its parent's. A parent's own row therefore reads 0 while its teams spend;
an operator asking "how much has this department used" needs the subtree's sum, which this
module adds as a separate object (`subtree`) so neither answer is mistaken for the other.
`pool usage`, `GET /v1/entitlements` and `GET /v1/entitlements/{id}` all come here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from joulepool.pool import Pool

SUMMED = ("charged_uj", "reserved_uj", "committed_uj", "held_devices", "running_claims")


def subtree_ids(pool: Pool, node: str) -> list[str]:
    """`node` and every descendant, in tree order."""
    out, stack = [], [node]
    while stack:
        current = stack.pop()
        out.append(current)
        stack.extend(reversed(pool.tree.children(current)))
    return out


def subtree_usage(rows: dict[str, dict[str, Any]], ids: list[str]) -> dict[str, Any]:
    """The sums over `ids` (a node and its descendants) of every figure of their usage
    objects and of their energy and device guarantees (API.md usage fields, marked
    `"subtree": true`): the row a reader adds up by eye, added up once, here."""
    totals = {k: sum(rows[i]["usage"][k] for i in ids) for k in SUMMED}
    first = rows[ids[0]]
    return {
        **totals,
        "spent_uj": totals["committed_uj"],
        "remaining_uj": sum(rows[i]["usage"]["remaining_uj"] for i in ids),
        "borrowed_uj": sum(rows[i]["usage"]["borrowed_uj"] for i in ids),
        "guarantee_uj": sum(rows[i]["guarantee_uj"] for i in ids),
        "guarantee_devices": sum(rows[i]["guarantee_devices"] for i in ids),
        "subtree": True,
        "period": first["usage"].get("period"),
    }


def entitlement_reports(
    pool: Pool, ids: list[str] | None = None, index: int | None = None
) -> list[dict[str, Any]]:
    """API.md's Entitlement with its `usage` (Pool.report) for `ids` (all by default), and
    for each interior node a `subtree` usage object: the one usage answer of the CLI and HTTP."""
    wanted = [e.id for e in pool.tree] if ids is None else ids
    needed: set[str] = set()
    for node in wanted:
        needed.update(subtree_ids(pool, node))
    rows = {i: pool.report(i, index) for i in needed}
    out = []
    for node in wanted:
        report = rows[node]
        if pool.tree.children(node):
            report = {**report, "subtree": subtree_usage(rows, subtree_ids(pool, node))}
        out.append(report)
    return out
