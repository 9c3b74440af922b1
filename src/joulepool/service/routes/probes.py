"""Probes (API.md): liveness, readiness (§6.1: once replayed, and while writes can
succeed), Prometheus metrics; and the API reference, rendered from the schema."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response

from joulepool.service import models as m
from joulepool.service.apidocs import api_reference
from joulepool.service.deps import ERRORS, metrics, principal, served
from joulepool.service.metrics import Metrics
from joulepool.service.served import Service
from joulepool.service.tokens import Principal

router = APIRouter()


@router.get("/docs", response_class=HTMLResponse, include_in_schema=False)
def docs(request: Request) -> Response:
    """The API reference, rendered here from the schema: no CDN, no script."""
    state = request.app.state
    if state.reference is None:
        state.reference = api_reference(request.app.openapi())
    return HTMLResponse(state.reference)


@router.get("/healthz", tags=["probes"])
async def healthz() -> dict[str, str]:
    """Liveness: the process answers (API.md). On the event loop, so it never queues for
    a worker thread behind slow requests (docs/reliability.md §16)."""
    return {"status": "ok"}


@router.get("/readyz", tags=["probes"], responses={503: {"model": m.ErrorOut}})
def readyz(service: Service = Depends(served)) -> Response:
    """Ready once the ledger has been replayed (§6.1) and while writes can succeed: 503
    with a code naming the cause (`not_ready`, `disk_full`, `store_unavailable`,
    `config_mismatch`, `clock_behind_ledger`, `clock_jump`, `witness_fork`, ...) otherwise."""
    return JSONResponse(service.readiness())


@router.get("/v1/token", response_model=m.TokenOut, responses={401: ERRORS[401]}, tags=["tokens"])
async def token(who: Principal = Depends(principal)) -> Response:
    """The calling token's name and scope (docs/api.md, Tokens): how a client such as
    `pool slurm check-config --online` learns what its token may do without trying it."""
    return JSONResponse({"name": who.name, "scope": who.scope})


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    responses={
        401: ERRORS[401],
        403: {
            "model": m.ErrorOut,
            "content": {"application/json": {}},
            "description": "a bridge token",
        },
    },
    tags=["probes"],
)
def prometheus(who: Principal = Depends(principal), seen: Metrics = Depends(metrics)) -> Response:
    """Prometheus text exposition; it needs a token (API.md, Additions). An operator or
    `metrics` token reads every series; a tenant token reads its subtree's usage only; a
    bridge token none (403, docs/api.md "Tokens")."""
    from prometheus_client import CONTENT_TYPE_LATEST

    return Response(seen.exposition(who), media_type=CONTENT_TYPE_LATEST)
