"""The reservation as a limit (API.md "Run time"; DESIGN.md §7): what is due now, the action
log, and the bridges' reports of what they carried out.

`GET /v1/actions/due` answers from live state and the `[runtime]` policy (`views.actions`);
it also records, once per change, an act withheld for want of evidence and an
over-reservation the `report` policy only reports. A bridge carries an act out and then
reports its outcome with `POST /v1/actions`; the log records that outcome, and a kind
recorded `done` is never due again for the claim, across agent and service restarts.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from joulepool.acts import ACTS
from joulepool.checks import check_figure, check_keys
from joulepool.claim_id import shown_id
from joulepool.deployment.actions import RULES, ActionLog, matching
from joulepool.errors import ClaimError, InvalidInput
from joulepool.grade import Energy
from joulepool.live import MAX_TEXT
from joulepool.service.body import BODY, json_body
from joulepool.service.deps import (
    ERRORS,
    ApiError,
    operator_or_bridge,
    principal,
    query_figure,
    require_scope,
    served,
)
from joulepool.service.served import Service
from joulepool.service.tokens import Principal
from joulepool.tree import Tree
from joulepool.views.actions import (
    OVER_RESERVATION,
    DueItem,
    NoBook,
    Policies,
    due_items,
    evidence_of,
)

router = APIRouter()

MAX_LIMIT = 1000


def _log(service: Service) -> ActionLog:
    if service.actions is None:
        raise ApiError(503, "no_action_log", "this service keeps no action log")
    return service.actions


def _record(item: DueItem, at_ms: int, outcome: str) -> dict[str, Any]:
    shown = item.to_json()
    return {
        "at_ms": at_ms,
        "claim": item.claim,
        "entitlement": item.entitlement,
        "job": item.job,
        "rule": item.rule,
        "kind": item.due.kind,
        "outcome": outcome,
        "reason": item.due.reason,
        "detail": None if item.for_claim is None else f"for {item.for_claim}",
        "evidence": shown["evidence"],
        "policy": shown["policy"],
    }


def policies(service: Service) -> Policies:
    """The run-time policies the service holds now (DESIGN.md §7)."""
    return Policies(service.runtime, service.idle_acts, service.preemption)


def due_now(service: Service) -> tuple[int, list[DueItem]]:
    """What is due now (`views.actions.due_items`), recording withheld acts and reports
    whose state changed since the claim's last record under that rule (DESIGN.md §7)."""
    pool = service.ready_pool()
    log = service.actions
    now = pool.now_ms()
    items = due_items(pool, policies(service), log if log is not None else NoBook(), now)
    if log is not None:
        for item in items:
            kind, reason = item.due.kind, item.due.reason
            # No reading since start is every claim's state after a restart: shown, not logged.
            if kind == "withheld" and reason != "no_reading":
                log.append(_record(item, now, "withheld"), if_changed=True)
            elif kind == "report":
                log.append(_record(item, now, "reported"), if_not_done=True)
    return now, items


@router.get("/v1/actions/due", responses=ERRORS, tags=["run time"])
async def actions_due(
    who: Principal = Depends(operator_or_bridge),
    service: Service = Depends(served),
) -> Response:
    """What the `[runtime]` policy says is due now for every running claim, with its
    evidence (DESIGN.md §7): `notice`, `signal`, `requeue`, `cancel`, `report`, or
    `withheld` with the reason the evidence cannot carry an act. A bridge token sees its
    own subtree's claims, the ones it carries acts out for."""
    now, items = await run_in_threadpool(due_now, service)
    tree = service.ready_pool().tree
    return JSONResponse(
        {
            "at_ms": now,
            "policy": service.runtime.to_json(),
            "policies": {
                "over_reservation": service.runtime.to_json(),
                "idle": service.idle_acts.to_json(),
                "preemption": service.preemption.to_json(),
            },
            "due": [i.to_json() for i in items if who.may_act_on(tree, i.entitlement)],
        }
    )


def _text(value: object, where: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_TEXT or not value.isprintable():
        raise InvalidInput(where, f"must be printable text of at most {MAX_TEXT} characters")
    return value


def _report(service: Service, body: object, who: Principal) -> tuple[dict[str, Any], bool]:
    """Record a bridge's report (`POST /v1/actions`): the record, and whether it is new."""
    log = _log(service)
    obj = check_keys(body, BODY, ("claim", "kind", "outcome"), ("job", "detail", "energy", "rule"))
    claim = _text(obj["claim"], f"{BODY}.claim")
    rule = obj.get("rule", OVER_RESERVATION)
    if rule not in RULES:
        raise InvalidInput(f"{BODY}.rule", f"must be one of {', '.join(RULES)}")
    kind = obj["kind"]
    if kind not in (*ACTS, "run"):
        raise InvalidInput(f"{BODY}.kind", f"must be one of {', '.join((*ACTS, 'run'))}")
    outcome = obj["outcome"]
    allowed = ("recorded",) if kind == "run" else ("done", "failed")
    if outcome not in allowed:
        raise InvalidInput(f"{BODY}.outcome", f"must be one of {', '.join(allowed)} for {kind}")
    job = _text(obj["job"], f"{BODY}.job") if "job" in obj else None
    detail = _text(obj["detail"], f"{BODY}.detail") if "detail" in obj else None
    pool = service.ready_pool()
    state = pool.claim_state(claim)
    # A bridge's claim outside its subtree is answered as one that does not exist.
    if state is None or not who.may_act_on(pool.tree, state.admitted.entitlement):
        raise ClaimError("unknown_claim", f"no claim {claim!r} was admitted")
    if not state.running:
        raise ClaimError("already_released", f"claim {claim!r} is released")
    now = pool.now_ms()
    evidence: dict[str, Any]
    if kind == "run":
        if detail is None:
            raise InvalidInput(f"{BODY}.detail", "a run needs, in detail, which run it was")
        # Absent (or null): the run has no figure, which its release counts as unknown.
        energy = obj.get("energy")
        run = None if energy is None else Energy.from_json(energy, f"{BODY}.energy")
        evidence = {
            "energy_uj": None if run is None else run.uj,
            "grade": None if run is None else run.grade.value,
        }
        for earlier in log.read(lambda r: r["claim"] == claim and r["kind"] == "run", MAX_LIMIT):
            if earlier.get("detail") == detail:
                return earlier, False
    else:
        if "energy" in obj:
            raise InvalidInput(f"{BODY}.energy", "only a run carries an energy")

        evidence = evidence_of(pool, state, now)[0].to_json()
    record = {
        "at_ms": now,
        "claim": claim,
        "entitlement": state.admitted.entitlement,
        "job": job,
        "rule": rule,
        "kind": kind,
        "outcome": outcome,
        "reason": None,
        "detail": detail,
        "evidence": evidence,
        "policy": policies(service).of(rule).to_json(),
    }
    if log.append(record, if_not_done=kind != "run" and outcome == "done") is None:
        raise ClaimError(
            "act_recorded", f"{kind} is already recorded done for {claim!r} under {rule}"
        )
    if kind == "requeue" and outcome == "done":
        # The next run counts from its own start readings: the last run's are kept as a
        # `run` record by the bridge, and a new run's first reading must not look like a
        # decrease.
        pool.forget_live(claim)
    return record, True


@router.post("/v1/actions", responses=ERRORS, tags=["run time"])
async def report_action(
    request: Request,
    who: Principal = Depends(operator_or_bridge),
    service: Service = Depends(served),
) -> Response:
    """A bridge reports an act it carried out (`done`) or tried (`failed`), or a requeued
    job's earlier run and its figure (`run`, `recorded`; added to its release) (DESIGN.md
    §7); 409 `act_recorded` for an act already recorded done."""
    body = await json_body(request)
    record, new = await run_in_threadpool(_report, service, body, who)
    return JSONResponse({**record, "new": new})


@router.get("/v1/actions", responses=ERRORS, tags=["run time"])
def list_actions(
    request: Request,
    who: Principal = Depends(principal),
    service: Service = Depends(served),
) -> Response:
    """The action log, newest first (API.md "Run time"): filters `entitlement` (its
    subtree), `rule`, `kind`, `since_ms`, `claim`, `limit`; a tenant or bridge token sees its own
    subtree (a bridge reads a requeued job's earlier runs back at its release)."""
    query = request.query_params
    unknown = sorted(set(query) - {"entitlement", "kind", "since_ms", "claim", "limit", "rule"})
    if unknown:
        raise InvalidInput(unknown[0], "unknown query parameter")
    if not (who.operator or who.bridge or who.tenant is not None):
        raise ApiError(403, "forbidden", "this needs an operator, bridge or tenant token")
    log = _log(service)
    pool = service.fresh_pool()
    tree = pool.tree
    entitlement = query.get("entitlement")
    if entitlement is not None:
        if entitlement not in tree:
            raise InvalidInput("entitlement", f"no entitlement {entitlement!r}")
        require_scope(who, pool, entitlement)
    since = query_figure(query.get("since_ms"), "since_ms")
    limit_text = query.get("limit")
    limit = 100 if limit_text is None else check_figure(query_figure(limit_text, "limit"), "limit")
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput("limit", f"must be between 1 and {MAX_LIMIT}")
    out = visible_actions(
        log,
        tree,
        who,
        limit,
        entitlement,
        query.get("kind"),
        since,
        query.get("claim"),
        query.get("rule"),
    )
    return JSONResponse({"actions": out})


def visible_actions(
    log: ActionLog,
    tree: Tree,
    who: Principal,
    limit: int,
    entitlement: str | None = None,
    kind: str | None = None,
    since_ms: int | None = None,
    claim: str | None = None,
    rule: str | None = None,
) -> list[dict[str, Any]]:
    """API.md `GET /v1/actions`: the newest `limit` records of the action log `who` may
    see (its subtree), matching the filters, each claim id as `who` names it (DESIGN.md
    §7); the dashboard's recent acts are this same reading."""
    roots = [r for r in (who.subtree, entitlement) if r is not None]
    found = log.read(matching(tree, roots, kind, since_ms, claim, rule), limit)
    return [{**r, "claim": shown_id(who.tenant, r["claim"])} for r in found]
