"""The FastAPI application of `pool serve` (API.md): where the routes are wired together.

Every request but the probes carries a bearer token; a tenant acts on its own subtree only.
Verdicts are 200 (Queue and Deny are verdicts, not errors); errors are JSON with a stable
code; no input yields a 500. Claims and releases go to the service's `Committer`, which
decides them in arrival order and answers each once its entry is durable (DESIGN.md §5).

The routes live in `service/routes/`, one router per resource; what they share (the
service, who is acting, errors) in `service/deps.py`; the served state in `service/served.py`.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, TextIO

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from joulepool.errors import PoolError
from joulepool.service import models as m
from joulepool.service.access_log import AccessLog
from joulepool.service.body import with_request_schemas
from joulepool.service.boundary import Boundary
from joulepool.service.deps import ApiError, error, pool_error
from joulepool.service.limits import Limits
from joulepool.service.live_models import ProgressIn, ReadingIn
from joulepool.service.metrics import Metrics
from joulepool.service.routes import (
    actions,
    claims,
    dashboard,
    decisions,
    entitlements,
    ledger,
    live,
    probes,
    transparency,
    witnesses,
)
from joulepool.service.served import Service
from joulepool.service.timeline import Timeline

__all__ = ["Service", "create_app"]

DASHBOARD_WORKERS = 2
"""Threads answering `GET /v1/dashboard`, apart from the request threads: how many
dashboards are computed at once, however many tenants ask (docs/reliability.md §16)."""

ROUTERS = (
    transparency,
    claims,
    live,
    actions,
    entitlements,
    ledger,
    decisions,
    witnesses,
    dashboard,
    probes,
)
"""Every resource's router, in the order their routes are matched and documented."""


def create_app(
    service: Service,
    *,
    limits: Limits | None = None,
    replay_in_background: bool = True,
    access_log: tuple[TextIO, str] | None = None,
    tls_not_after_s: int | None = None,
) -> FastAPI:
    """The application over `service` (API.md), behind its trust boundary (`Boundary`), with
    one access-log line per request on `access_log`'s stream in its format, if given, and the
    served certificate's end among the metrics when served over TLS (docs/reliability.md §17)."""

    timeline = Timeline()
    dashboard_workers = ThreadPoolExecutor(DASHBOARD_WORKERS, thread_name_prefix="dashboard")

    def start() -> None:
        service.start()
        if service.pool is not None:
            # The dashboard's history is read now, beside the service, never by the first
            # request that asks for it (docs/reliability.md §16).
            timeline.build_in_background(service.pool)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if replay_in_background:
            threading.Thread(target=start, name="replay", daemon=True).start()
        else:
            start()
        yield
        dashboard_workers.shutdown(wait=False, cancel_futures=True)
        service.stop()

    app = FastAPI(
        title="joulepool pool/1 admission service",
        version="1",
        lifespan=lifespan,
        description="Energy-accounted admission (pool/1): verdicts, releases, usage and the signed ledger.",
        # A redirect would be built from the client's Host header, and would repeat a POST.
        redirect_slashes=False,
        # The reference is served from the package: a CDN is unreachable on many clusters.
        docs_url=None,
        redoc_url=None,
    )
    app.add_middleware(
        Boundary,
        tokens=lambda: service.tokens,
        limits=limits or Limits(),
        clock=service.token_clock_ms,
        claim_tokens=service.is_claim_token,
    )
    if access_log is not None:
        # Added last, so outermost: the boundary's refusals are logged too.
        app.add_middleware(AccessLog, stream=access_log[0], fmt=access_log[1])
    app.state.service = service
    app.state.metrics = Metrics(
        lambda: service.pool,
        lambda: service.witnesses,
        lambda: (service.last_reload_ok, service.last_reload_success_ms),
        lambda: service.witnessing,
        ready=lambda: _ready(service),
        tokens=lambda: service.tokens,
        tls_not_after_s=tls_not_after_s,
        actions=lambda: None if service.actions is None else service.actions.counts,
    )
    app.state.timeline = timeline
    app.state.dashboard_workers = dashboard_workers
    app.state.reference = None
    answer_errors(app)
    for resource in ROUTERS:
        app.include_router(resource.router)
    publish_request_schemas(app)
    return app


REQUEST_MODELS = (
    m.ClaimIn,
    m.ReleaseIn,
    m.EstimateIn,
    m.PreemptionIn,
    m.IdleIn,
    m.AttributionIn,
    m.WitnessIn,
    ReadingIn,
    ProgressIn,
)
"""The bodies the routes read (`service.body`), published in the OpenAPI schema."""


def _ready(service: Service) -> bool:
    """`pool_ready`: what /readyz would answer now, as 1 or 0 (docs/operations.md)."""
    try:
        service.readiness()
    except ApiError:
        return False
    return True


def publish_request_schemas(app: FastAPI) -> None:
    """`/openapi.json` with the request bodies' shapes, which the routes declare by name."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            with_request_schemas(build(), REQUEST_MODELS)
        assert app.openapi_schema is not None
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def answer_errors(app: FastAPI) -> None:
    """Every failure as API.md's error JSON with a stable code; no input yields a 500."""

    @app.exception_handler(ApiError)
    async def _api_error(_r: Request, exc: ApiError) -> JSONResponse:
        return error(exc.status, exc.code, exc.detail)

    @app.exception_handler(PoolError)
    async def _on_pool_error(_r: Request, exc: PoolError) -> JSONResponse:
        return pool_error(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_r: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for err in exc.errors()[:5]:
            loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
            problems.append(f"{loc or 'body'}: {err.get('msg', 'invalid')}")
        return error(422, "invalid_input", "; ".join(problems))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_r: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:
            # A body that is not even JSON (or not UTF-8) is malformed input like any other.
            return error(422, "invalid_input", f"body: {exc.detail}")
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error(exc.status_code, code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _bug(_r: Request, exc: Exception) -> JSONResponse:
        return error(
            500, "internal_error", f"{type(exc).__name__}: the service failed; see its log"
        )
