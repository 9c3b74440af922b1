"""Pure decisions over the ledger's own history and the caller's figures (API.md): an earned
estimate (§2.6), the preemption order (§5), idle verdicts (§2.7), attribution (§2.5).

Bodies are read by the operations `pool exec` runs (`execute.run_case`), so the HTTP API and
the conformance harness accept and refuse exactly the same figures.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from joulepool.checks import check_figure, check_text
from joulepool.conformance.decisions import idle_policy_from_json
from joulepool.conformance.execute import run_case
from joulepool.errors import InvalidInput
from joulepool.service import models as m
from joulepool.service.body import BODY, documented, fields, json_body
from joulepool.service.deps import ERRORS, ApiError, principal, require_scope, served
from joulepool.service.served import Service
from joulepool.service.tokens import Principal

router = APIRouter()


def pure(op: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    """`op`'s answer as `pool exec` gives it (CONFORMANCE.md); its error as a 422."""
    result = run_case({**payload, "op": op})
    if "error" in result:
        raise ApiError(422, result["error"], str(result.get("detail", result["error"])))
    return result


@router.post(
    "/v1/estimates",
    response_model=m.DerivedOut | m.DeclinedOut,
    responses=ERRORS,
    tags=["decisions"],
    openapi_extra=documented(m.EstimateIn),
)
async def estimates(
    request: Request, who: Principal = Depends(principal), service: Service = Depends(served)
) -> Response:
    """The estimate a class earned from this ledger's history (§2.6); `class` missing, null
    or empty declines `empty_class` with both counts (DESIGN.md §3)."""
    body = fields(await json_body(request), (), ("class", "entitlement", "required"))
    class_ = body.get("class")
    if class_ is not None and type(class_) is not str:
        raise InvalidInput(f"{BODY}.class", "must be a string")
    scope = body.get("entitlement")
    if scope is not None:
        check_text(scope, f"{BODY}.entitlement")
    required = body.get("required")
    if required is not None:
        check_figure(required, f"{BODY}.required")

    def answer() -> dict[str, Any]:
        pool = service.fresh_pool()
        if not who.operator:
            if scope is None:
                raise ApiError(403, "forbidden", "this token must name an entitlement in its scope")
            require_scope(who, pool, scope)
        return pool.estimate(class_, scope, required).to_json()

    return JSONResponse(await run_in_threadpool(answer))


@router.post(
    "/v1/preemption-order",
    response_model=m.PreemptionOut,
    responses=ERRORS,
    tags=["decisions"],
    openapi_extra=documented(m.PreemptionIn),
)
async def preemption(request: Request, _who: Principal = Depends(principal)) -> Response:
    """The preemption order of workloads (§5)."""
    body = fields(await json_body(request), ("workloads",))
    return JSONResponse(await run_in_threadpool(pure, "preemption_order", body))


@router.post(
    "/v1/idle",
    response_model=m.IdleOut,
    responses=ERRORS,
    tags=["decisions"],
    openapi_extra=documented(m.IdleIn),
)
async def idle(
    request: Request, _who: Principal = Depends(principal), service: Service = Depends(served)
) -> Response:
    """Idle verdicts, under the given policy or the deployment's (§2.7)."""
    body = dict(fields(await json_body(request), ("workloads",), ("policy",)))
    if "policy" in body:
        idle_policy_from_json(body["policy"], f"{BODY}.policy")
    else:
        policy = service.ready_pool().idle_policy
        body["policy"] = {
            k: v
            for k, v in (("window_us", policy.window_us), ("threshold_uw", policy.threshold_uw))
            if v is not None
        }
    return JSONResponse(await run_in_threadpool(pure, "idle", body))


@router.post(
    "/v1/attribution",
    response_model=m.AttributionOut,
    responses=ERRORS,
    tags=["decisions"],
    openapi_extra=documented(m.AttributionIn),
)
async def attribution(request: Request, _who: Principal = Depends(principal)) -> Response:
    """A shared device's total divided among its occupants (§2.5)."""
    body = fields(await json_body(request), ("total", "occupants"))
    return JSONResponse(await run_in_threadpool(pure, "attribute", body))
