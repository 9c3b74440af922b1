"""Entitlements and their usage (API.md `/v1/entitlements`; DESIGN.md §3 budget periods)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse, Response

from joulepool.pool import Pool
from joulepool.service import models as m
from joulepool.service.deps import ERRORS, ApiError, principal, require_scope, served
from joulepool.service.served import Service
from joulepool.service.tokens import Principal

router = APIRouter()


@router.get(
    "/v1/entitlements",
    response_model=m.EntitlementsOut,
    responses=ERRORS,
    tags=["entitlements"],
)
def entitlements(
    who: Principal = Depends(principal), service: Service = Depends(served)
) -> Response:
    """The tree and its usage, as far as the token's scope reaches."""
    from joulepool.views.usage import entitlement_reports

    pool = service.fresh_pool()
    visible = [e.id for e in pool.tree if who.may_act_on(pool.tree, e.id)]
    return JSONResponse({"entitlements": entitlement_reports(pool, visible)})


@router.get(
    "/v1/entitlements/{entitlement}",
    response_model=m.EntitlementOut,
    responses={**ERRORS, 404: {"model": m.ErrorOut}},
    tags=["entitlements"],
)
def entitlement(
    entitlement: str,
    period: str | None = Query(None, description="a budget period, as `pool usage --period`"),
    who: Principal = Depends(principal),
    service: Service = Depends(served),
) -> Response:
    """One entitlement and its usage in the current budget period, or in `period`."""
    from joulepool.views.usage import entitlement_reports

    pool = visible_entitlement(service, entitlement, who)
    index = None if period is None else pool.schedule.parse_label(period, "period")
    return JSONResponse(entitlement_reports(pool, [entitlement], index)[0])


@router.get(
    "/v1/entitlements/{entitlement}/periods",
    response_model=m.PeriodsOut,
    responses={**ERRORS, 404: {"model": m.ErrorOut}},
    tags=["entitlements"],
)
def entitlement_periods(
    entitlement: str, who: Principal = Depends(principal), service: Service = Depends(served)
) -> Response:
    """Each budget period's charged energy against the guarantee (DESIGN.md §3)."""
    from joulepool.views.usage import history

    pool = visible_entitlement(service, entitlement, who)
    return JSONResponse(history(pool, entitlement))


def visible_entitlement(service: Service, entitlement: str, who: Principal) -> Pool:
    """The pool, once `entitlement` is known to be one the token may read (API.md, Tokens):
    an unknown one is 404 to an operator and 403 to a tenant, who may not learn it exists."""
    pool = service.fresh_pool()
    if entitlement not in pool.tree:
        if not who.operator:
            raise ApiError(
                403, "forbidden", f"entitlement {entitlement!r} is outside this token's scope"
            )
        raise ApiError(404, "unknown_entitlement", f"no entitlement {entitlement!r}")
    require_scope(who, pool, entitlement)
    return pool
