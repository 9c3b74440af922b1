"""Usage as every surface reports it: each entitlement's own figures and, for an interior
node, its subtree's totals beside them (API.md "Usage fields"; `pool usage`).

Admission compares each node's own figures (DESIGN.md §3): a claim filed at a leaf moves the
leaf's figures, not its parent's. A parent's own row therefore reads 0 while its teams spend;
an operator asking "how much has this department used" needs the subtree's sum, which this
module adds as a separate object (`subtree`) so neither answer is mistaken for the other.
`pool usage`, `GET /v1/entitlements` and `GET /v1/entitlements/{id}` all come here, and so
do `pool usage --history` and `GET /v1/entitlements/{id}/periods`.

A period is judged by the configuration in force at its end (docs/reliability.md §18): a
past period by the last configuration statement dated before its end, so November is read
against November's guarantees after they change; the period still running by the tree in
force. Each answer names the configuration it used (`configuration`). The periods
themselves are the schedule's in force: a changed schedule regroups history (DESIGN.md §3).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from joulepool.errors import InvalidInput

if TYPE_CHECKING:
    from joulepool.ledger.configs import AppliedConfig
    from joulepool.periods import Period
    from joulepool.pool import Pool
    from joulepool.tree import Tree

SUMMED = ("charged_uj", "reserved_uj", "committed_uj", "held_devices", "running_claims")


def subtree_ids(tree: Tree, node: str) -> list[str]:
    """`node` and every descendant, in tree order."""
    out, stack = [], [node]
    while stack:
        current = stack.pop()
        out.append(current)
        stack.extend(reversed(tree.children(current)))
    return out


def judged_by(pool: Pool, period: Period) -> tuple[Tree, dict[str, Any] | None]:
    """The tree that judges `period` and how to name its configuration
    (docs/reliability.md §18): for a period that has ended, the configuration in force at
    its end; for the period running, the tree in force. None names nothing: no statement
    records the configuration (a `Pool` opened without a deployment folder)."""
    history = pool.configs
    if history is None or history.last is None:
        return pool.tree, None
    now = pool.now_ms()
    if period.end_ms is None or period.end_ms > now:
        tree = pool.tree
        same = history.last_names(tree, pool.schedule)
        return tree, (_named(history.last, False) if same else None)
    applied = history.in_force_before(period.end_ms)
    if applied is None:
        # The period ended before the first statement (a ledger older than the record):
        # its earliest record judges it, and the answer says the record came after.
        return history.applied[0].tree, _named(history.applied[0], True)
    return applied.tree, _named(applied, False)


def _named(applied: AppliedConfig, after: bool) -> dict[str, Any]:
    out = applied.to_json()
    if after:
        out["recorded_after_period"] = True
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
    pool: Pool,
    ids: list[str] | None = None,
    index: int | None = None,
    *,
    present_only: bool = False,
) -> list[dict[str, Any]]:
    """API.md's Entitlement with its `usage` (Pool.report) for `ids` (all by default), and
    for each interior node a `subtree` usage object: the one usage answer of the CLI and HTTP.
    Period `index` is judged by the tree in force at its end (docs/reliability.md §18); an id
    that tree did not have is refused, or with `present_only` left out (a view of the whole
    tree, as the dashboard's, shows the tree of the period it shows)."""
    period = pool.period(index)
    tree, configuration = judged_by(pool, period)
    wanted = [e.id for e in tree] if ids is None else ids
    if present_only:
        wanted = [node for node in wanted if node in tree]
    for node in wanted:
        if node not in tree:
            raise InvalidInput(
                "entitlement",
                f"{node!r} was not in the tree that judges {pool.schedule.label(period.index)} "
                f"(configuration {configuration['digest'][:12] if configuration else '-'})",
            )
    needed: set[str] = set()
    for node in wanted:
        needed.update(subtree_ids(tree, node))
    rows = {i: pool.report(i, index, tree) for i in needed}
    out = []
    for node in wanted:
        report = rows[node]
        if tree.children(node):
            report = {**report, "subtree": subtree_usage(rows, subtree_ids(tree, node))}
        if configuration is not None:
            report = {**report, "configuration": configuration}
        out.append(report)
    return out


def history(pool: Pool, entitlement: str) -> dict[str, Any]:
    """Each period's charged energy against the guarantee, oldest first, each period judged
    by the configuration in force at its end and naming it (DESIGN.md §3;
    docs/reliability.md §18): what `pool usage --history` and
    `GET /v1/entitlements/{id}/periods` show. An interior node's rows are its subtree's
    sums (its own claims and its descendants'), against its subtree's guarantees, so a
    department reads what its teams spent (`"subtree": true`)."""
    if entitlement not in pool.tree:
        raise InvalidInput("entitlement", f"no entitlement {entitlement!r} in the tree")
    trees = [pool.tree]
    if pool.configs is not None:
        trees += [a.tree for a in pool.configs.applied]
    # Every node that was ever under it: claims of a team since moved or removed still
    # count in the periods whose tree had it there.
    candidates: list[str] = []
    for tree in trees:
        if entitlement in tree:
            candidates += [i for i in subtree_ids(tree, entitlement) if i not in candidates]
    figures = {(i, f.period.index): f for i in candidates for f in pool.periods_of(i)}
    schedule = pool.schedule
    rows = []
    for index in sorted({k for _, k in figures}):
        period = schedule.period(index)
        tree, configuration = judged_by(pool, period)
        ids = subtree_ids(tree, entitlement) if entitlement in tree else [entitlement]
        mine = [figures[(i, index)] for i in ids if (i, index) in figures]
        if not mine:
            continue
        charged = sum(f.charged_uj for f in mine)
        reserved = sum(f.reserved_uj for f in mine)
        committed = charged + reserved
        row: dict[str, Any] = {
            "label": schedule.label(index),
            "period": period.to_json(),
            "claims": sum(f.claims for f in mine),
            "charged_uj": charged,
            "reserved_uj": reserved,
            "committed_uj": committed,
        }
        if entitlement in tree:
            guarantee = sum(tree[i].guarantee_uj for i in ids)
            row |= {
                "guarantee_uj": guarantee,
                "remaining_uj": max(0, guarantee - committed),
                "borrowed_uj": max(0, committed - guarantee),
            }
            if len(ids) > 1:
                row["subtree"] = True
        else:
            # Not in the tree that judges this period: it had no guarantee there to read
            # against, and none is made up.
            row["in_tree"] = False
        if configuration is not None:
            row["configuration"] = configuration
        rows.append(row)
    return {"id": entitlement, "period": schedule.to_json(), "periods": rows}
