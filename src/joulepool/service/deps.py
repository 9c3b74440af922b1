"""What every route shares (API.md): the service a request is served by, who is acting
and within which scope, and how errors answer (a stable code and a sentence, never a 500
for any input).

Dependencies are coroutines, so FastAPI runs them on the loop, not in a worker thread.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from fastapi import Depends, Request
from fastapi.responses import JSONResponse

from joulepool.errors import (
    ClaimError,
    ClockFault,
    InvalidInput,
    LedgerRefused,
    PoolError,
    StoreError,
)
from joulepool.service import models as m
from joulepool.service.boundary import principal_of
from joulepool.service.tokens import Principal

if TYPE_CHECKING:
    from joulepool.pool import Pool
    from joulepool.service.metrics import Metrics
    from joulepool.service.served import Service

log = logging.getLogger("joulepool.serve")


class ApiError(Exception):
    """An error answer: HTTP status, stable code, sentence."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail = status, code, detail


class FailureLog:
    """Store failures answered to clients, logged at error level, but each code at most
    once a second (with a count of what was left out), so an outage does not flood the log."""

    def __init__(self, every_s: float = 1.0) -> None:
        self._every_s = every_s
        self._last: dict[str, float] = {}
        self._skipped: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, exc: PoolError) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(exc.code, -self._every_s) < self._every_s:
                self._skipped[exc.code] = self._skipped.get(exc.code, 0) + 1
                return
            self._last[exc.code] = now
            skipped = self._skipped.pop(exc.code, 0)
        more = f" ({skipped} more like it since the last)" if skipped else ""
        log.error("%s: %s%s", exc.code, exc, more)


store_failures = FailureLog()


CLAIM_ERRORS = {
    "claim_exists": 409,
    "unknown_claim": 404,
    "already_released": 409,
    "implausible_actual": 422,
}


def error(status: int, code: str, detail: str) -> JSONResponse:
    """Every error answer: a stable code and a sentence (API.md)."""
    return JSONResponse({"error": code, "detail": detail}, status_code=status)


def pool_error(exc: PoolError) -> JSONResponse:
    """The answer to a `PoolError`: its status follows its kind, its code is its own."""
    if isinstance(exc, ClaimError):
        return error(CLAIM_ERRORS.get(exc.code, 409), exc.code, str(exc))
    if isinstance(exc, InvalidInput):
        return error(422, "invalid_input", str(exc))
    if isinstance(exc, StoreError | LedgerRefused | ClockFault):
        store_failures(exc)
        return error(503, exc.code, str(exc))
    return error(500, exc.code, str(exc))


ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": m.ErrorOut, "description": "no token, or an unknown one"},
    403: {"model": m.ErrorOut, "description": "the token's scope does not cover this"},
    422: {"model": m.ErrorOut, "description": "malformed input, naming the field"},
    503: {"model": m.ErrorOut, "description": "not ready, or the ledger store is unavailable"},
}


def service_of(request: Request) -> Service:
    """The service the application serves (`create_app` keeps it on the app's state)."""
    served: Service = request.app.state.service
    return served


async def served(request: Request) -> Service:
    """The service, as a route's dependency."""
    return service_of(request)


async def metrics(request: Request) -> Metrics:
    """The service's metrics, as a route's dependency."""
    found: Metrics = request.app.state.metrics
    return found


def acting(request: Request) -> Principal:
    """Who sent the request. `Boundary` authenticated it before its body was read, and
    refused a `metrics` token anywhere but /metrics."""
    found = principal_of(request.scope)
    if found is None:
        raise ApiError(401, "unauthorized", "send Authorization: Bearer <token>")
    return found


async def principal(request: Request) -> Principal:
    """Any token's holder (API.md, Tokens)."""
    return acting(request)


async def operator(who: Principal = Depends(principal)) -> Principal:
    """An operator token's holder; 403 for any other (API.md, Tokens)."""
    if not who.operator:
        raise ApiError(403, "forbidden", "this needs an operator token")
    return who


async def operator_or_bridge(who: Principal = Depends(principal)) -> Principal:
    """An operator's or a bridge token's holder; 403 for any other (docs/api.md, Tokens). A
    bridge's claim must still be found within its subtree (`routes.claims.visible_claim`)."""
    if not (who.operator or who.bridge):
        raise ApiError(403, "forbidden", "this needs an operator or a bridge token")
    return who


def require_scope(who: Principal, pool: Pool, entitlement: str) -> None:
    """403 unless `entitlement` is within the token's subtree (API.md, Tokens)."""
    if not who.may_act_on(pool.tree, entitlement):
        raise ApiError(
            403, "forbidden", f"entitlement {entitlement!r} is outside this token's scope"
        )


def query_figure(value: str | None, name: str) -> int | None:
    """A query parameter that is a non-negative integer (API.md: `since_ms`, `limit`,
    `cursor`, `min_age_s`), None when absent; anything else is 422 naming `name`."""
    if value is None:
        return None
    if not value.isascii() or not value.isdigit() or len(value) > 20:
        raise InvalidInput(name, "must be a non-negative integer")
    return int(value)
