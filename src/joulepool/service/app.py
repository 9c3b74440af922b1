"""The FastAPI application of `pool serve` (API.md).

Every request but the probes carries a bearer token; a tenant acts on its own subtree only.
Verdicts are 200 (Queue and Deny are verdicts, not errors); errors are JSON with a stable
code; no input yields a 500. Handlers are plain functions that FastAPI runs in its thread
pool, so concurrent submissions meet in `Pool`'s group commit and share one fsync.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import msgspec
from fastapi import Depends, FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from joulepool.admission import Admit
from joulepool.claim import Claim
from joulepool.claim_id import check_claim_id, lookup_ids, namespaced, shown_id
from joulepool.conformance.decisions import idle_policy_from_json
from joulepool.conformance.execute import run_case
from joulepool.deployment.witnesses import keep_receipt, load_receipts
from joulepool.errors import ClaimError, InvalidInput, LedgerRefused, PoolError, StoreError
from joulepool.grade import Energy, Grade
from joulepool.idle import IdlePolicy
from joulepool.ledger.entry import brief as brief_id
from joulepool.ledger.witness import verified_statement
from joulepool.periods import Schedule
from joulepool.pool import Pool
from joulepool.service import models as m
from joulepool.service.access_log import AccessLog, note
from joulepool.service.apidocs import api_reference
from joulepool.service.boundary import Boundary, principal_of
from joulepool.service.committer import Committer
from joulepool.service.ledger_report import ledger_report
from joulepool.service.limits import Limits
from joulepool.service.metrics import Metrics
from joulepool.service.timeline import Timeline
from joulepool.service.tokens import Principal, TokenBook
from joulepool.service.ui import UI_ASSETS, ui_file
from joulepool.service.verdicts import RECENT
from joulepool.tree import Tree

CBOR_SEQ = "application/cbor-seq"
MAX_ENTRIES_PER_READ = 100_000
PARSE_OFF_LOOP_BYTES = 65_536
"""A JSON body longer than this is parsed in a worker thread, not on the event loop."""


class ParseOffLoop(APIRoute):
    """A route whose large JSON body is parsed and validated off the event loop.

    FastAPI parses and validates a body on the loop, where a megabyte of JSON holds every
    other request, probes included, for a tenth of a second (17 MiB: seconds). A body past
    `PARSE_OFF_LOOP_BYTES` is parsed and validated here, in a worker thread, and the
    validated model is left where `Request.json()` looks first: FastAPI's own validation
    then takes the instance as it is, without a second pass.
    """

    def get_route_handler(self) -> Callable[[Request], Any]:
        """FastAPI's handler, preceded by the off-loop parse of a large body."""
        handler = super().get_route_handler()
        field = self.body_field
        if field is None or self.path == "/v1/claims":
            # A claim is a flat object: within the body limit it parses in microseconds.
            return handler

        async def route(request: Request) -> Response:
            if field is not None and is_json(request):
                body = await request.body()
                if len(body) > PARSE_OFF_LOOP_BYTES:
                    value, errors = await run_in_threadpool(validated, field, body)
                    if errors:
                        raise RequestValidationError(errors)
                    if value is not None:
                        vars(request)["_json"] = value
            response: Response = await handler(request)
            return response

        return route


def is_json(request: Request) -> bool:
    """Whether FastAPI will read this request's body as JSON (its content type says so)."""
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return kind == "application/json" or (
        kind.startswith("application/") and kind.endswith("+json")
    )


def validated(field: Any, body: bytes) -> tuple[Any, list[Any]]:
    """A body parsed and validated as FastAPI would: (model, []) or (None, its errors).

    A body that is not JSON at all is left to FastAPI, which names where it fails.
    """
    try:
        data = json.loads(body)
    except ValueError:
        return None, []
    value, errors = field.validate(data, {}, loc=("body",))
    return value, list(errors)


class ApiError(Exception):
    """An error answer: HTTP status, stable code, sentence."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail = status, code, detail


@dataclass
class Service:
    """What the application serves: a pool once replay is done, the tokens, the folder.

    `config_digest` is the digest of the pool.toml this replica decides under
    (`deployment.config_digest`); a store shared by replicas checks it in every append.
    """

    opener: Callable[[], Pool]
    tokens: TokenBook
    witnesses: Path | None = None
    pool: Pool | None = None
    committer: Committer | None = None
    failure: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    config_digest: bytes | None = None
    # pool.toml's `max_device_power_w`: the release ceiling (issue 17, `plausibility`).
    max_device_power_w: int | None = None
    # The code /readyz last answered 503 with, so a change is logged once, not every probe.
    unready: str | None = None
    stopping: bool = False

    def start(self) -> None:
        """Replay the ledger (§6.1); only then is the service ready. A store that cannot be
        reached (PostgreSQL down) is tried again, every few seconds, until it can."""
        delay = 0.5
        while True:
            try:
                pool = self.opener()
            except PoolError as exc:
                failure = f"{exc.code}: {exc}"
                if failure != self.failure:
                    log.error("not ready: %s", failure)
                self.failure = failure
                if exc.code == "store_unavailable" and not self.stopping:
                    time.sleep(delay)
                    delay = min(5.0, delay * 2)
                    continue
                return
            except Exception as exc:
                # Whatever went wrong, the service must say it will never be ready, not hang
                # on "still being replayed" with the replay thread gone.
                self.failure = f"internal_error: start-up failed: {type(exc).__name__}: {exc}"
                log.error("not ready: %s", self.failure)
                return
            break
        if self.stopping:
            pool.close()
            return
        self.failure = None
        self.committer = Committer(pool)
        self.pool = pool
        self._agree(pool)
        log.info("ready: %s, %d entries replayed", pool.store.name, pool.length)

    def _agree(self, pool: Pool) -> None:
        """On a shared store, record this replica's configuration, or learn it differs."""
        shared = pool.store.shared
        if shared is None or shared.config_digest is None:
            return
        try:
            shared.agree_config()
        except StoreError as exc:
            # Not fatal: /readyz keeps asking, and every append checks again.
            log.error("%s: %s", exc.code, exc)

    def reload(
        self,
        tree: Tree,
        period: Schedule,
        idle: IdlePolicy,
        required_evidence: int,
        max_device_power_w: int | None = None,
    ) -> None:
        """Put a changed pool.toml in force (SIGHUP); raises `PoolError` and changes nothing
        if it cannot. On a store shared by replicas, a pool.toml whose digest changed with
        this reload is recorded as the one the ledger is decided under, in the same step,
        under the commit lock: the other replicas decide nothing until they are reloaded
        with the same file (docs/reliability.md). A reload that changes nothing here
        records nothing, so a routine SIGHUP never overrides the other replicas."""
        from joulepool.deployment.config import config_digest

        pool = self.pool
        if pool is None:
            raise StoreError(
                "the ledger is not replayed yet (or failed to start): the configuration "
                "was not reloaded; send SIGHUP again once /readyz says ready"
            )
        digest = config_digest(tree, idle, required_evidence, period, max_device_power_w)
        store = pool.store
        before: Callable[[], None] | None = None
        shared = store.shared
        if shared is not None and digest != self.config_digest:
            adopt = shared.adopt_config

            def before() -> None:
                adopt(digest)

        old = shared.config_digest if shared is not None else None
        try:
            pool.reload(
                tree, period, idle_policy=idle, required_evidence=required_evidence, before=before
            )
        except BaseException:
            if shared is not None and shared.config_digest != old:
                # Recorded, but not put in force here: decide nothing rather than decide
                # under the old tree with the new digest.
                shared.config_digest = old
            raise
        if before is not None:
            log.warning(
                "configuration %s recorded for %s: replicas with another pool.toml decide "
                "nothing until reloaded with this one",
                digest.hex(),
                store.name,
            )
        self.config_digest = digest
        self.max_device_power_w = max_device_power_w

    def readiness(self) -> dict[str, Any]:
        """/readyz: ready once replayed and while the next write can be expected to
        succeed (the disk has room; PostgreSQL answers, within a bound, and records this
        replica's configuration). Otherwise `ApiError` 503 naming the cause, logged once."""
        pool = self.ready_pool()
        try:
            length = self._check_store(pool)
        except StoreError as exc:
            if exc.code != self.unready:
                log.error("not ready: %s: %s", exc.code, exc)
                self.unready = exc.code
            raise ApiError(503, exc.code, str(exc)) from None
        if self.unready is not None:
            log.warning("ready again: %s", pool.store.name)
            self.unready = None
        # Where this process's fold began: the snapshot it started from, 0 for a full replay.
        return {"status": "ready", "length": length, "started_from": pool.started_from}

    def _check_store(self, pool: Pool) -> int:
        """Raise the `StoreError` that would make the next write fail; else the length."""
        return pool.store.ready()

    def ready_committer(self) -> Committer:
        """The group committer, or 503 while replay runs (or after it failed)."""
        self.ready_pool()
        assert self.committer is not None
        return self.committer

    def stop(self) -> None:
        """Commit what is queued, then release the store."""
        self.stopping = True
        if self.committer is not None:
            self.committer.close()
        if self.pool is not None:
            self.pool.close()

    def ready_pool(self) -> Pool:
        """The pool, or 503 while replay runs (or after it failed)."""
        if self.pool is None:
            detail = self.failure or "the ledger is still being replayed"
            raise ApiError(503, "not_ready", detail)
        return self.pool

    def fresh_pool(self) -> Pool:
        """The pool, caught up with every entry other replicas committed before this read."""
        pool = self.ready_pool()
        pool.catch_up()
        return pool


log = logging.getLogger("joulepool.serve")
"""The service's log: `pool serve` shows the `joulepool` loggers through uvicorn's config."""


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


_store_failures = FailureLog()


_CLAIM_ERRORS = {
    "claim_exists": 409,
    "unknown_claim": 404,
    "already_released": 409,
    "implausible_actual": 422,
}


def _error(status: int, code: str, detail: str) -> JSONResponse:
    return JSONResponse({"error": code, "detail": detail}, status_code=status)


def _pool_error(exc: PoolError) -> JSONResponse:
    if isinstance(exc, ClaimError):
        return _error(_CLAIM_ERRORS.get(exc.code, 409), exc.code, str(exc))
    if isinstance(exc, InvalidInput):
        return _error(422, "invalid_input", str(exc))
    if isinstance(exc, StoreError | LedgerRefused):
        _store_failures(exc)
        return _error(503, exc.code, str(exc))
    return _error(500, exc.code, str(exc))


ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": m.ErrorOut, "description": "no token, or an unknown one"},
    403: {"model": m.ErrorOut, "description": "the token's scope does not cover this"},
    422: {"model": m.ErrorOut, "description": "malformed input, naming the field"},
    503: {"model": m.ErrorOut, "description": "not ready, or the ledger store is unavailable"},
}


def create_app(
    service: Service,
    *,
    limits: Limits | None = None,
    replay_in_background: bool = True,
    access_log: tuple[TextIO, str] | None = None,
) -> FastAPI:
    """The application over `service` (API.md), behind its trust boundary (`Boundary`), with
    one access-log line per request on `access_log`'s stream in its format, if given."""
    metrics = Metrics(lambda: service.pool, lambda: service.witnesses)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if replay_in_background:
            threading.Thread(target=service.start, name="replay", daemon=True).start()
        else:
            service.start()
        yield
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
    app.router.route_class = ParseOffLoop
    app.add_middleware(Boundary, tokens=lambda: service.tokens, limits=limits or Limits())
    if access_log is not None:
        # Added last, so outermost: the boundary's refusals are logged too.
        app.add_middleware(AccessLog, stream=access_log[0], fmt=access_log[1])
    app.state.service = service
    app.state.metrics = metrics

    @app.exception_handler(ApiError)
    async def _api_error(_r: Request, exc: ApiError) -> JSONResponse:
        return _error(exc.status, exc.code, exc.detail)

    @app.exception_handler(PoolError)
    async def _on_pool_error(_r: Request, exc: PoolError) -> JSONResponse:
        return _pool_error(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_r: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for err in exc.errors()[:5]:
            loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
            problems.append(f"{loc or 'body'}: {err.get('msg', 'invalid')}")
        return _error(422, "invalid_input", "; ".join(problems))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_r: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:
            # A body that is not even JSON (or not UTF-8) is malformed input like any other.
            return _error(422, "invalid_input", f"body: {exc.detail}")
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _error(exc.status_code, code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _bug(_r: Request, exc: Exception) -> JSONResponse:
        return _error(
            500, "internal_error", f"{type(exc).__name__}: the service failed; see its log"
        )

    # Dependencies are coroutines so FastAPI runs them on the loop, not in a worker thread.
    def acting(request: Request) -> Principal:
        # `Boundary` authenticated the request before its body was read, and refused a
        # `metrics` token anywhere but /metrics.
        found = principal_of(request.scope)
        if found is None:
            raise ApiError(401, "unauthorized", "send Authorization: Bearer <token>")
        return found

    async def principal(request: Request) -> Principal:
        return acting(request)

    async def operator(who: Principal = Depends(principal)) -> Principal:
        if not who.operator:
            raise ApiError(403, "forbidden", "this needs an operator token")
        return who

    def require_scope(who: Principal, pool: Pool, entitlement: str) -> None:
        if not who.may_act_on(pool.tree, entitlement):
            raise ApiError(
                403, "forbidden", f"entitlement {entitlement!r} is outside this token's scope"
            )

    # -- claims --------------------------------------------------------------------------

    @app.post(
        "/v1/claims",
        response_model=m.AdmitOut | m.QueueOut | m.DenyOut,
        responses={**ERRORS, 409: {"model": m.ErrorOut, "description": "claim_exists"}},
        tags=["claims"],
    )
    async def submit(body: m.ClaimIn, request: Request) -> Response:
        """Decide a claim (§4); an Admit is in the ledger before this answers."""
        # The principal is read without a dependency: this is the path every admission
        # takes, and FastAPI's dependency machinery costs more than the lookup.
        who = acting(request)
        committer = service.ready_committer()
        require_scope(who, committer.pool, body.entitlement)
        claim_id = body.id
        if who.tenant is not None:
            # A tenant's ids live in its own namespace, so no other team can see or squat
            # them (claim_id.py); `Pool` checks an operator's id as it records it.
            check_claim_id(body.id, "id")
            claim_id = namespaced(who.tenant, body.id)
        # The model has checked every field as strictly as `Claim.from_json` would.
        estimate = Energy(body.estimate.uj, Grade(body.estimate.grade))
        claim = Claim(
            claim_id,
            body.entitlement,
            body.gang_size,
            body.devices_per_member,
            estimate,
            body.class_,
        )
        started = time.perf_counter()
        decision = await committer.submit(claim)
        metrics.commit_seconds.observe(time.perf_counter() - started)
        out = decision.to_json()
        metrics.verdicts.record(committer.pool.tree, body.entitlement, out, committer.pool.now_ms())
        out["claim"] = body.id  # as the client named it, without the tenant's namespace
        if isinstance(decision.verdict, Admit):
            note(request.scope, body.id, "admit")
        else:
            note(
                request.scope,
                body.id,
                f"{decision.verdict.verdict}:{decision.verdict.reason.value}",
            )
        return Response(msgspec.json.encode(out), media_type="application/json")

    @app.post(
        "/v1/claims/{claim_id:path}/release",
        response_model=m.ReleaseOut,
        responses={
            **ERRORS,
            404: {"model": m.ErrorOut},
            409: {"model": m.ErrorOut},
            422: {"model": m.ErrorOut, "description": "invalid_input, or implausible_actual"},
        },
        tags=["claims"],
    )
    async def release(
        claim_id: str, body: m.ReleaseIn, request: Request, who: Principal = Depends(operator)
    ) -> Response:
        """Record a claim's end, charging its actual figure in place of its reservation (§6.2);
        a figure above the physical ceiling is 422 `implausible_actual` unless overridden."""
        from joulepool.views.plausibility import check_release, refusal

        committer = service.ready_committer()
        started = time.perf_counter()
        actual = Energy.from_json(body.actual.model_dump(), "actual")
        # The claim's state is read under the pool's lock: off the event loop, so a commit in
        # progress never stalls the admissions the loop is serving.
        finding = await run_in_threadpool(
            check_release, committer.pool, claim_id, actual.uj, service.max_device_power_w
        )
        if finding is not None:
            if finding.kind == "above_ceiling" and not body.override:
                raise refusal(finding)
            # An override, or a figure far above its reservation with no ceiling to judge it
            # by: charged as sent, and left in the log for whoever reads it (issue 17).
            log.warning(
                "release %s %s by %s: %s",
                "override" if body.override else "flagged",
                finding.kind,
                who.name,
                finding.words,
            )
        rel = await committer.release(claim_id, actual)
        note(request.scope, claim_id, "released" if finding is None else f"released:{finding.kind}")
        metrics.commit_seconds.observe(time.perf_counter() - started)
        return JSONResponse({"claim": rel.claim, "seq": rel.seq, "charged": rel.charged.to_json()})

    @app.get(
        "/v1/claims/{claim_id:path}",
        response_model=m.ClaimStateOut,
        responses={**ERRORS, 404: {"model": m.ErrorOut}},
        tags=["claims"],
    )
    def claim_state(claim_id: str, who: Principal = Depends(principal)) -> Response:
        """A claim's state; Queue and Deny leave no record (§6.2)."""
        pool = service.fresh_pool()
        # A claim the token may not see is answered exactly like one that does not exist.
        found = (pool.claim_state(i) for i in lookup_ids(who.tenant, claim_id))
        state = next(
            (
                s
                for s in found
                if s is not None
                and (who.operator or who.may_act_on(pool.tree, s.admitted.entitlement))
            ),
            None,
        )
        if state is None:
            raise ApiError(404, "unknown_claim", f"no claim {brief_id(claim_id)}")
        from joulepool.views.claims import claim_json

        out = claim_json(state, shown_id(who.tenant, state.claim))
        return JSONResponse(out)

    # -- entitlements --------------------------------------------------------------------

    def entitlement_json(pool: Pool, node: str, index: int | None = None) -> dict[str, Any]:
        from joulepool.views.usage import entitlement_reports

        return entitlement_reports(pool, [node], index)[0]

    @app.get(
        "/v1/entitlements",
        response_model=m.EntitlementsOut,
        responses=ERRORS,
        tags=["entitlements"],
    )
    def entitlements(who: Principal = Depends(principal)) -> Response:
        """The tree and its usage, as far as the token's scope reaches."""
        pool = service.fresh_pool()
        visible = [e.id for e in pool.tree if who.may_act_on(pool.tree, e.id)]
        from joulepool.views.usage import entitlement_reports

        return JSONResponse({"entitlements": entitlement_reports(pool, visible)})

    @app.get(
        "/v1/entitlements/{entitlement}",
        response_model=m.EntitlementOut,
        responses={**ERRORS, 404: {"model": m.ErrorOut}},
        tags=["entitlements"],
    )
    def entitlement(
        entitlement: str,
        period: str | None = Query(None, description="a budget period, as `pool usage --period`"),
        who: Principal = Depends(principal),
    ) -> Response:
        """One entitlement and its usage in the current budget period, or in `period`."""
        pool = visible_entitlement(entitlement, who)
        index = None if period is None else pool.schedule.parse_label(period, "period")
        return JSONResponse(entitlement_json(pool, entitlement, index))

    def visible_entitlement(entitlement: str, who: Principal) -> Pool:
        pool = service.fresh_pool()
        if entitlement not in pool.tree:
            if not who.operator:
                raise ApiError(
                    403, "forbidden", f"entitlement {entitlement!r} is outside this token's scope"
                )
            raise ApiError(404, "unknown_entitlement", f"no entitlement {entitlement!r}")
        require_scope(who, pool, entitlement)
        return pool

    @app.get(
        "/v1/entitlements/{entitlement}/periods",
        response_model=m.PeriodsOut,
        responses={**ERRORS, 404: {"model": m.ErrorOut}},
        tags=["entitlements"],
    )
    def entitlement_periods(entitlement: str, who: Principal = Depends(principal)) -> Response:
        """Each budget period's charged energy against the guarantee (DESIGN.md §3)."""
        return JSONResponse(visible_entitlement(entitlement, who).history(entitlement))

    # -- the ledger ----------------------------------------------------------------------

    @app.get("/v1/ledger", response_model=m.LedgerOut, responses=ERRORS, tags=["ledger"])
    def ledger(_who: Principal = Depends(operator)) -> Response:
        """The ledger's head, length and attestation (§6.8); operators only (API.md, Tokens):
        its length counts every tenant's admissions and releases."""
        return JSONResponse(ledger_report(service.fresh_pool(), service.witnesses))

    @app.get(
        "/v1/ledger/entries",
        response_class=Response,
        responses={**ERRORS, 200: {"content": {CBOR_SEQ: {}}, "description": "entries as stored"}},
        tags=["ledger"],
    )
    def ledger_entries(
        start: int = Query(0, alias="from", ge=0, le=2**62),
        _who: Principal = Depends(operator),
    ) -> Response:
        """Entries from index `from`, as stored: a CBOR sequence (DESIGN.md §4)."""
        pool = service.fresh_pool()
        end = min(pool.length, start + MAX_ENTRIES_PER_READ)
        body = (
            b"".join(raw for _, raw in zip(range(start, end), pool.entries(start), strict=False))
            if start < end
            else b""
        )
        return Response(body, media_type=CBOR_SEQ)

    # -- pure decisions over the ledger's own history --------------------------------------

    def pure(op: str, payload: dict[str, Any]) -> dict[str, Any]:
        result = run_case({"op": op, **payload})
        if "error" in result:
            raise ApiError(422, result["error"], str(result.get("detail", result["error"])))
        return result

    @app.post(
        "/v1/estimates",
        response_model=m.DerivedOut | m.DeclinedOut,
        responses=ERRORS,
        tags=["decisions"],
    )
    def estimates(body: m.EstimateIn, who: Principal = Depends(principal)) -> Response:
        """The estimate a class earned from this ledger's history (§2.6)."""
        pool = service.fresh_pool()
        if not who.operator:
            if body.entitlement is None:
                raise ApiError(
                    403, "forbidden", "a tenant token must name an entitlement in its scope"
                )
            require_scope(who, pool, body.entitlement)
        return JSONResponse(pool.estimate(body.class_, body.entitlement, body.required).to_json())

    @app.post(
        "/v1/preemption-order", response_model=m.PreemptionOut, responses=ERRORS, tags=["decisions"]
    )
    def preemption(body: m.PreemptionIn, _who: Principal = Depends(principal)) -> Response:
        """The preemption order of workloads (§5)."""
        return JSONResponse(pure("preemption_order", body.model_dump()))

    @app.post("/v1/idle", response_model=m.IdleOut, responses=ERRORS, tags=["decisions"])
    def idle(body: m.IdleIn, _who: Principal = Depends(principal)) -> Response:
        """Idle verdicts, under the given policy or the deployment's (§2.7)."""
        pool = service.ready_pool()
        payload = body.model_dump(exclude_none=True)
        if "policy" not in payload:
            policy = pool.idle_policy
            payload["policy"] = {
                k: v
                for k, v in (("window_us", policy.window_us), ("threshold_uw", policy.threshold_uw))
                if v is not None
            }
        idle_policy_from_json(payload["policy"])
        return JSONResponse(pure("idle", payload))

    @app.post(
        "/v1/attribution", response_model=m.AttributionOut, responses=ERRORS, tags=["decisions"]
    )
    def attribution(body: m.AttributionIn, _who: Principal = Depends(principal)) -> Response:
        """A shared device's total divided among its occupants (§2.5)."""
        return JSONResponse(pure("attribute", body.model_dump()))

    # -- witnesses -----------------------------------------------------------------------

    @app.post(
        "/v1/witness-receipts", response_model=m.WitnessCheckOut, responses=ERRORS, tags=["ledger"]
    )
    def post_receipt(body: m.WitnessIn, _who: Principal = Depends(operator)) -> Response:
        """Check a witness receipt against the ledger; a valid one is kept (§6.7, §6.8)."""
        from joulepool.ledger.witness import check_witness

        pool = service.fresh_pool()
        receipt = bytes.fromhex(body.receipt_hex)
        public_key = bytes.fromhex(body.public_key_hex)
        report = check_witness(
            receipt,
            body.witness,
            public_key,
            pool.steward,
            pool.key.public_key,
            pool.length,
            pool.head_at,
        )
        if report.error is not None:
            raise ApiError(422, report.error.value, f"the receipt is refused: {report.error.value}")
        if service.witnesses is not None and report.through is not None:
            with service.lock:
                keep_receipt(service.witnesses, body.witness, public_key, receipt, report.through)
        return JSONResponse(report.to_json())

    @app.get(
        "/v1/witness-receipts",
        response_model=m.WitnessReceiptsOut,
        responses=ERRORS,
        tags=["ledger"],
    )
    def list_receipts(_who: Principal = Depends(operator)) -> Response:
        """Every receipt kept (§6.8); operators only (API.md, Tokens): each names a length
        and a head of the whole ledger."""
        kept = load_receipts(service.witnesses) if service.witnesses else []
        out = []
        for k in kept:
            # A kept file damaged since it was kept vouches for nothing: it is not listed.
            statement = verified_statement(k.receipt, k.witness, k.public_key)
            if statement is None:
                continue
            out.append(
                {
                    "witness": k.witness,
                    "public_key_hex": k.public_key.hex(),
                    "receipt_hex": k.receipt.hex(),
                    "length": statement.length,
                    "head_hex": statement.head.hex(),
                }
            )
        return JSONResponse({"receipts": out})

    # -- the dashboard (issue 18) -----------------------------------------------------------

    timeline = Timeline()

    @app.get(
        "/v1/dashboard",
        response_model=m.DashboardOut,
        responses={**ERRORS, 422: {"model": m.ErrorOut}},
        tags=["dashboard"],
    )
    def dashboard_data(
        period: str | None = Query(None, description="a budget period, as `pool usage --period`"),
        verdicts: int = Query(50, ge=1, le=RECENT, description="recent verdicts to list"),
        who: Principal = Depends(principal),
    ) -> Response:
        """What `/ui` shows, as far as the token's scope reaches (DESIGN.md §3, §2.6, §6.8)."""
        from joulepool.service.dashboard import dashboard

        pool = service.fresh_pool()
        index = None if period is None else pool.schedule.parse_label(period, "period")
        out = dashboard(pool, who, timeline, metrics.verdicts, service.witnesses, index, verdicts)
        return JSONResponse(out)

    @app.get("/ui", response_class=HTMLResponse, tags=["dashboard"])
    def ui() -> Response:
        """The dashboard page: static, served from the package, no data until a token is
        given to it (the data comes from `GET /v1/dashboard`)."""
        return ui_file("index.html")

    @app.get(
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

    # -- probes --------------------------------------------------------------------------

    reference: list[str] = []

    @app.get("/docs", response_class=HTMLResponse, include_in_schema=False)
    def docs() -> Response:
        """The API reference, rendered here from the schema: no CDN, no script."""
        if not reference:
            reference.append(api_reference(app.openapi()))
        return HTMLResponse(reference[0])

    @app.get("/healthz", tags=["probes"])
    def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["probes"], responses={503: {"model": m.ErrorOut}})
    def readyz() -> Response:
        """Ready once the ledger has been replayed (§6.1) and while writes can succeed: 503
        with a code naming the cause (`not_ready`, `disk_full`, `store_unavailable`,
        `config_mismatch`, ...) otherwise."""
        return JSONResponse(service.readiness())

    @app.get(
        "/metrics",
        response_class=PlainTextResponse,
        responses={401: ERRORS[401]},
        tags=["probes"],
    )
    def prometheus(who: Principal = Depends(principal)) -> Response:
        """Prometheus text exposition; it needs a token (API.md, Additions). An operator or
        `metrics` token reads every series; a tenant token reads its subtree's usage only."""
        from prometheus_client import CONTENT_TYPE_LATEST

        return Response(metrics.exposition(who), media_type=CONTENT_TYPE_LATEST)

    return app
