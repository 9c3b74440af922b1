"""What the dashboard at `/ui` shows, as far as a token's scope reaches.

Nothing here decides or recomputes a figure: usage is `usage_report.entitlement_reports`
(the code path of `pool usage --json` and `GET /v1/entitlements`), the ledger's facts are
`ledger_report` (`GET /v1/ledger`), estimates are `Pool.estimate` (`POST /v1/estimates`),
verdicts are the service's own record of what it answered, running claims are
`live_claim_json` (`GET /v1/claims`), recent acts are `visible_actions` (`GET /v1/actions`).
Scope is applied here, on the server: a tenant's answer holds its own subtree and nothing
else, whatever the page does.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from joulepool.claim_id import shown_id
from joulepool.deployment.actions import ActionLog
from joulepool.pool import Pool
from joulepool.service.ledger_report import ledger_report
from joulepool.service.timeline import REQUEST_FOLD_MAX, Timeline
from joulepool.service.tokens import Principal
from joulepool.service.verdicts import VerdictBook
from joulepool.views.live import live_claim_json
from joulepool.views.usage import entitlement_reports

RUNNING_SHOWN = 200
"""The most running claims one answer lists, the most recently admitted; the rest counted."""

RECENT_ACTIONS = 20
"""The newest records of the action log one answer lists."""

CONSISTENT_TRIES = 5
"""Reads of the whole answer before giving up on one in which no append came in between."""


def dashboard(
    pool: Pool,
    who: Principal,
    timeline: Timeline,
    verdicts: VerdictBook,
    witnesses: Path | None,
    index: int | None,
    recent: int,
    actions: ActionLog | None = None,
) -> dict[str, Any]:
    """API.md `GET /v1/dashboard`: the usage of period `index` (the current one if None) of
    every entitlement `who` may see, whom each borrower's surplus comes from, each one's
    committed energy over time, the recent verdicts, what each class earned, the running
    claims with their live figures and the newest acts (DESIGN.md §7), and, for an
    operator, the ledger's length, head and attestation (§6.8, DESIGN.md §3, §2.6).
    Raises `TimelineBuilding` while the timeline's history is still being read."""
    visible = [e.id for e in pool.tree if who.may_act_on(pool.tree, e.id)]
    schedule = pool.schedule
    current = pool.period().index
    chosen = current if index is None else index
    # The usage rows and the timeline are read at one ledger length, so the line chart's
    # last point is the committed figure beside it. A request folds only what is new: the
    # history is the build's (`TimelineBuilding` until it is done, docs/reliability.md §16).
    for _ in range(CONSISTENT_TRIES):
        before = pool.length
        folded = timeline.catch_up(pool, REQUEST_FOLD_MAX)
        rows = entitlement_reports(pool, visible, chosen, present_only=True)
        if folded == before == pool.length:
            break

    def period_json(i: int) -> dict[str, Any]:
        return {"label": schedule.label(i), **schedule.period(i).to_json(), "current": i == current}

    out: dict[str, Any] = {
        "now_ms": pool.now_ms(),
        "period": period_json(chosen),
        "periods": [
            period_json(i) for i in sorted({*timeline.periods(visible), current}, reverse=True)
        ],
        "entitlements": rows,
        "lenders": lenders(pool, rows),
        "timeline": timeline.series(chosen, visible),
        "verdicts": verdicts.recent(_scope(pool, who), who.tenant, recent),
        "estimates": estimates(pool, who, timeline),
        **running(pool, who, actions),
        # Null, not an empty list, where the service keeps no action log: unknown, not none.
        "recent_actions": None if actions is None else _recent_actions(pool, who, actions),
    }
    if who.operator:
        ledger = ledger_report(pool, witnesses, witness=True)
        if ledger["length"] > 0:
            ledger["last_at_ms"] = pool.state.last_at_ms
        out["ledger"] = ledger
    return out


def running(pool: Pool, who: Principal, actions: ActionLog | None = None) -> dict[str, Any]:
    """DESIGN.md §7: the running claims `who` may see, newest admitted first, at most
    `RUNNING_SHOWN` of them, each exactly as `GET /v1/claims` shows it (`live_claim_json`),
    and how many more run unlisted."""
    now_ms = pool.now_ms()
    seen = [s for s in pool.running_claims() if who.may_act_on(pool.tree, s.admitted.entitlement)]
    seen.sort(key=lambda s: s.admitted_seq, reverse=True)
    acts = None if actions is None else actions.latest
    return {
        "running": [
            live_claim_json(pool, s, shown_id(who.tenant, s.claim), now_ms, acts)
            for s in seen[:RUNNING_SHOWN]
        ],
        "running_more": max(0, len(seen) - RUNNING_SHOWN),
    }


def _recent_actions(pool: Pool, who: Principal, log: ActionLog) -> list[dict[str, Any]]:
    from joulepool.service.routes.actions import visible_actions

    return visible_actions(log, pool.tree, who, RECENT_ACTIONS)


def _scope(pool: Pool, who: Principal) -> Callable[[str], bool]:
    return lambda node: who.may_act_on(pool.tree, node)


def lenders(pool: Pool, rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """For each shown entitlement that borrowed, the shown siblings with unspent guarantee:
    the lendable surplus it draws on is theirs (DESIGN.md §2.2; borrowing is pooled, so no
    one sibling is named as the lender of a given joule)."""
    by_id = {r["id"]: r for r in rows}
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        parent = row.get("parent")
        if row["usage"]["borrowed_uj"] == 0 or parent is None:
            continue
        out[row["id"]] = [
            {"id": s, "remaining_uj": by_id[s]["usage"]["remaining_uj"]}
            for s in pool.tree.children(parent)
            if s != row["id"] and s in by_id and by_id[s]["usage"]["remaining_uj"] > 0
        ]
    return out


def estimates(pool: Pool, who: Principal, timeline: Timeline) -> list[dict[str, Any]]:
    """What each declared class earned (§2.6), with its evidence counts: over the whole
    ledger for an operator; for a tenant, per entitlement of its subtree that ran the class
    (as `POST /v1/estimates` answers a tenant naming that entitlement)."""
    out: list[dict[str, Any]] = []
    for class_, ents in sorted(timeline.classes().items()):
        if who.operator:
            out.append({"class": class_, **pool.estimate(class_).to_json()})
            continue
        for ent in sorted(ents):
            if who.may_act_on(pool.tree, ent):
                out.append(
                    {"class": class_, "entitlement": ent, **pool.estimate(class_, ent).to_json()}
                )
    return out
