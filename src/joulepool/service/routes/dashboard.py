"""The dashboard (API.md `/v1/dashboard`, `/ui`): its data, as far as a token reaches, and
its static page, served from the package."""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from joulepool.ledger.entry import brief as brief_id
from joulepool.service import models as m
from joulepool.service.deps import ERRORS, ApiError, principal, served
from joulepool.service.served import Service
from joulepool.service.timeline import Timeline, TimelineBuilding
from joulepool.service.tokens import Principal
from joulepool.service.ui import UI_ASSETS, ui_file
from joulepool.service.verdicts import RECENT

router = APIRouter()

RETRY_AFTER_S = 2
"""What a 503 `dashboard_building` asks a client to wait: the page's own poll interval."""


@router.get(
    "/v1/dashboard",
    response_model=m.DashboardOut,
    responses={**ERRORS, 422: {"model": m.ErrorOut}},
    tags=["dashboard"],
)
async def dashboard_data(
    request: Request,
    period: str | None = Query(None, description="a budget period, as `pool usage --period`"),
    verdicts: int = Query(50, ge=1, le=RECENT, description="recent verdicts to list"),
    who: Principal = Depends(principal),
    service: Service = Depends(served),
) -> Response:
    """What `/ui` shows, as far as the token's scope reaches (DESIGN.md §3, §2.6, §6.8);
    503 `dashboard_building` with Retry-After while the timeline's history is read, off
    the request path (docs/reliability.md §16)."""
    from joulepool.service.dashboard import dashboard

    state = request.app.state
    timeline: Timeline = state.timeline

    def answer() -> Response:
        pool = service.fresh_pool()
        index = None if period is None else pool.schedule.parse_label(period, "period")
        try:
            out = dashboard(
                pool,
                who,
                timeline,
                state.metrics.verdicts,
                service.witnesses,
                index,
                verdicts,
                service.actions,
            )
        except TimelineBuilding as building:
            timeline.build_in_background(pool)
            return JSONResponse(
                {"error": "dashboard_building", "detail": str(building)},
                status_code=503,
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        return JSONResponse(out)

    # On threads of the dashboard's own: many tenants asking at once wait for those, never
    # for the worker threads that probes, claims and releases are answered on.
    workers: Executor = state.dashboard_workers
    return await asyncio.get_running_loop().run_in_executor(workers, answer)


@router.get("/ui", response_class=HTMLResponse, tags=["dashboard"])
def ui() -> Response:
    """The dashboard page: static, served from the package, no data until a token is
    given to it (the data comes from `GET /v1/dashboard`)."""
    return ui_file("index.html")


@router.get(
    "/ui/{name}",
    response_class=Response,
    responses={
        200: {
            "content": {"text/javascript": {}, "text/css": {}, "image/svg+xml": {}},
            "description": "a file",
        },
        404: {"model": m.ErrorOut},
    },
    tags=["dashboard"],
)
def ui_asset(name: str) -> Response:
    """The dashboard's script and style sheet."""
    if name not in UI_ASSETS:
        raise ApiError(404, "not_found", f"no dashboard file {brief_id(name)}")
    return ui_file(name)
