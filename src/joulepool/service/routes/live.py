"""Run time (API.md "Run time"; DESIGN.md §7): meter readings and progress of running
claims, and the claims list with their live figures. Soft state: nothing here appends."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from joulepool.claim_id import shown_id
from joulepool.errors import InvalidInput
from joulepool.live import parse_progress, parse_reading, parse_waiting
from joulepool.service import models as m
from joulepool.service.body import BODY, documented, json_body
from joulepool.service.boundary import CLAIM_PREFIX
from joulepool.service.deps import (
    ERRORS,
    ApiError,
    operator_or_bridge,
    principal,
    query_figure,
    require_scope,
    served,
)
from joulepool.service.live_models import ProgressIn, ReadingIn, WaitingIn
from joulepool.service.routes.claims import visible_claim
from joulepool.service.served import Service
from joulepool.service.tokens import Principal
from joulepool.views.live import DEFAULT_PAGE, check_filter, live_claim_json, page

router = APIRouter()

_CLAIM_ERRORS = {**ERRORS, 404: {"model": m.ErrorOut}, 409: {"model": m.ErrorOut}}


@router.post(
    "/v1/claims/{claim_id:path}/readings",
    responses=_CLAIM_ERRORS,
    tags=["run time"],
    openapi_extra=documented(ReadingIn),
)
async def readings(
    claim_id: str,
    request: Request,
    who: Principal = Depends(operator_or_bridge),
    service: Service = Depends(served),
) -> Response:
    """Keep a meter reading of a running claim: energy since its start readings, with its
    grade, and whose job it is (DESIGN.md §7); 409 `reading_out_of_order` or
    `reading_decreased` for one that goes back. An operator's or a bridge token's, a
    bridge's for its subtree's claims only (docs/api.md, Tokens)."""
    reading, job = parse_reading(await json_body(request), BODY)
    pool = service.ready_pool()
    if not who.operator:
        await run_in_threadpool(visible_claim, pool, who, claim_id)
    await run_in_threadpool(pool.record_reading, claim_id, reading, job)
    return JSONResponse({"claim": claim_id, "at_ms": reading.at_ms})


@router.post(
    "/v1/claims/{claim_id:path}/waiting",
    responses=_CLAIM_ERRORS,
    tags=["run time"],
    openapi_extra=documented(WaitingIn),
)
async def waiting(
    claim_id: str,
    request: Request,
    who: Principal = Depends(operator_or_bridge),
    service: Service = Depends(served),
) -> Response:
    """Keep that an admitted claim's job waits for resources: where, for how many GPUs and
    since when (DESIGN.md §7), what preemption (§5.2) reclaims capacity for. An operator's
    or a bridge token's, a bridge's for its subtree's claims only."""
    report, job = parse_waiting(await json_body(request), BODY)
    pool = service.ready_pool()
    if not who.operator:
        await run_in_threadpool(visible_claim, pool, who, claim_id)
    await run_in_threadpool(pool.record_waiting, claim_id, report, job)
    return JSONResponse({"claim": claim_id, "at_ms": report.at_ms})


@router.post(
    "/v1/claims/{claim_id:path}/progress",
    responses=_CLAIM_ERRORS,
    tags=["run time"],
    openapi_extra=documented(ProgressIn),
)
async def progress(
    claim_id: str,
    request: Request,
    who: Principal = Depends(principal),
    service: Service = Depends(served),
) -> Response:
    """Keep a running claim's completed units, cumulative (§5.1): the claim's own token or an
    operator's; 409 `progress_decreased` for fewer units than before."""
    if not (who.operator or who.scope == CLAIM_PREFIX + claim_id):
        raise ApiError(403, "forbidden", "progress needs the claim's own token or an operator's")
    pool = service.ready_pool()
    report = parse_progress(await json_body(request), pool.now_ms(), BODY)
    await run_in_threadpool(pool.record_progress, claim_id, report)
    return JSONResponse({"claim": claim_id, "units": report.units})


@router.get("/v1/claims", responses=ERRORS, tags=["run time"])
def list_claims(
    request: Request,
    who: Principal = Depends(principal),
    service: Service = Depends(served),
) -> Response:
    """Claims in ledger order with their live figures, a bounded page at a time (API.md
    "Run time"): `entitlement` (its subtree), `state`, `min_age_s`, `limit`, `cursor`; a
    tenant or `bridge:<entitlement>` token sees its own subtree only."""
    query = request.query_params
    known = {"entitlement", "state", "min_age_s", "limit", "cursor"}
    unknown = sorted(set(query) - known)
    if unknown:
        raise InvalidInput(unknown[0], "unknown query parameter")
    pool = service.fresh_pool()
    if not (who.operator or who.subtree is not None or who.bridge):
        raise ApiError(403, "forbidden", "this needs an operator, a tenant or a bridge token")
    entitlement = query.get("entitlement")
    if entitlement is not None and entitlement in pool.tree:
        require_scope(who, pool, entitlement)
    where = check_filter(
        pool,
        who.subtree,
        entitlement,
        query.get("state"),
        query_figure(query.get("min_age_s"), "min_age_s"),
    )
    limit = query_figure(query.get("limit"), "limit")
    cursor = query_figure(query.get("cursor"), "cursor") or 0
    found, after = page(pool, where, cursor, DEFAULT_PAGE if limit is None else limit)
    now_ms = pool.now_ms()
    acts = None if service.actions is None else service.actions.latest
    out = [live_claim_json(pool, s, shown_id(who.tenant, s.claim), now_ms, acts) for s in found]
    return JSONResponse({"claims": out, "next_cursor": after})
