"""Claims (API.md `/v1/claims`): decide one (§4), release one (§6.2), read one's state."""

from __future__ import annotations

import dataclasses
import time

import msgspec
from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from joulepool.admission import Admit
from joulepool.claim import Claim
from joulepool.claim_id import check_claim_id, lookup_ids, namespaced, shown_id
from joulepool.errors import InvalidInput
from joulepool.grade import Energy
from joulepool.ledger.entry import brief as brief_id
from joulepool.pool import ClaimState, Pool
from joulepool.service import models as m
from joulepool.service.access_log import note
from joulepool.service.body import BODY, documented, fields, json_body
from joulepool.service.deps import (
    ERRORS,
    ApiError,
    acting,
    log,
    operator_or_bridge,
    principal,
    require_scope,
    served,
    service_of,
)
from joulepool.service.metrics import Metrics
from joulepool.service.served import Service
from joulepool.service.tokens import Principal

router = APIRouter()


@router.post(
    "/v1/claims",
    response_model=m.AdmitOut | m.QueueOut | m.DenyOut,
    responses={**ERRORS, 409: {"model": m.ErrorOut, "description": "claim_exists"}},
    tags=["claims"],
    openapi_extra=documented(m.ClaimIn),
)
async def submit(request: Request) -> Response:
    """Decide a claim (§4); an Admit is in the ledger before this answers."""
    # The principal is read without a dependency: this is the path every admission
    # takes, and FastAPI's dependency machinery costs more than the lookup.
    claim = Claim.from_json(await json_body(request), BODY)
    who = acting(request)
    service = service_of(request)
    metrics: Metrics = request.app.state.metrics
    committer = service.ready_committer()
    require_scope(who, committer.pool, claim.entitlement)
    sent = claim.id
    if who.tenant is not None:
        # A tenant's ids live in its own namespace, so no other team can see or squat
        # them (claim_id.py); `Pool` checks an operator's id as it records it.
        check_claim_id(sent, "id")
        claim = dataclasses.replace(claim, id=namespaced(who.tenant, sent))
    elif who.bridge:
        # A bridge's ids are recorded as sent, as an operator's are (the Slurm bridge's
        # `slurm-<cluster>-<uuid>` stay what sacct and the admin comment show), but plain:
        # a `/` would name a tenant's namespace, which only the service writes in.
        check_claim_id(sent, "id")
    started = time.perf_counter()
    decision = await committer.submit(claim)
    metrics.commit_seconds.observe(time.perf_counter() - started)
    out = decision.to_json()
    metrics.verdicts.record(committer.pool.tree, claim.entitlement, out, committer.pool.now_ms())
    out["claim"] = sent  # as the client named it, without the tenant's namespace
    if request.query_params.get("with") == "claim_token" and (who.operator or who.bridge):
        # For the workload manager to hand the job (API.md "Run time"): it may report that
        # claim's progress and nothing else, whatever the verdict.
        token = service.claim_token(claim.id)
        if token is not None:
            out["claim_token"] = token
    if isinstance(decision.verdict, Admit):
        note(request.scope, sent, "admit")
    else:
        note(
            request.scope,
            sent,
            f"{decision.verdict.verdict}:{decision.verdict.reason.value}",
        )
    return Response(msgspec.json.encode(out), media_type="application/json")


@router.post(
    "/v1/claims/{claim_id:path}/release",
    response_model=m.ReleaseOut,
    responses={
        **ERRORS,
        404: {"model": m.ErrorOut},
        409: {"model": m.ErrorOut},
        422: {"model": m.ErrorOut, "description": "invalid_input, or implausible_actual"},
    },
    tags=["claims"],
    openapi_extra=documented(m.ReleaseIn),
)
async def release(
    claim_id: str,
    request: Request,
    who: Principal = Depends(operator_or_bridge),
    service: Service = Depends(served),
) -> Response:
    """Record a claim's end, charging its actual figure in place of its reservation (§6.2);
    a figure above the physical ceiling is 422 `implausible_actual` unless overridden. An
    operator's or a bridge token's (docs/api.md, Tokens): a bridge's only within its
    subtree, and a claim outside it is answered as one that does not exist."""
    from joulepool.views.plausibility import check_release, refusal

    body = fields(await json_body(request), ("actual",), ("override",))
    actual = Energy.from_json(body["actual"], f"{BODY}.actual")
    override = body.get("override", False)
    if type(override) is not bool:
        raise InvalidInput(f"{BODY}.override", "must be true or false")
    metrics: Metrics = request.app.state.metrics
    committer = service.ready_committer()
    started = time.perf_counter()
    if not who.operator:
        await run_in_threadpool(visible_claim, committer.pool, who, claim_id)
    # The claim's state is read under the pool's lock: off the event loop, so a commit in
    # progress never stalls the admissions the loop is serving.
    finding = await run_in_threadpool(
        check_release, committer.pool, claim_id, actual.uj, service.max_device_power_w
    )
    if finding is not None:
        # Doubted, with a physical bound or without one (10x its reservation): charged only
        # when the caller confirms it, as `pool release` asks a person to. A figure charged
        # is charged for good, and an unattended caller has nobody to ask.
        if not override:
            raise refusal(finding)
        log.warning(
            "release override %s by %s: claim %r: %s",
            finding.kind,
            who.name,
            claim_id,
            finding.words,
        )
    rel = await committer.release(claim_id, actual)
    committer.pool.forget_live(claim_id)
    note(
        request.scope,
        claim_id,
        "released" if finding is None else f"released:override:{finding.kind}",
    )
    metrics.commit_seconds.observe(time.perf_counter() - started)
    return JSONResponse({"claim": rel.claim, "seq": rel.seq, "charged": rel.charged.to_json()})


@router.get(
    "/v1/claims/{claim_id:path}",
    response_model=m.ClaimStateOut,
    responses={**ERRORS, 404: {"model": m.ErrorOut}},
    tags=["claims"],
)
def claim_state(
    claim_id: str, who: Principal = Depends(principal), service: Service = Depends(served)
) -> Response:
    """A claim's state, with `"live"` while it runs (API.md "Run time"); Queue and Deny
    leave no record (§6.2)."""
    pool = service.fresh_pool()
    state = visible_claim(pool, who, claim_id)
    from joulepool.views.live import live_claim_json

    return JSONResponse(
        live_claim_json(
            pool,
            state,
            shown_id(who.tenant, state.claim),
            pool.now_ms(),
            None if service.actions is None else service.actions.latest,
        )
    )


def visible_claim(pool: Pool, who: Principal, claim_id: str) -> ClaimState:
    """The state of claim `claim_id` as `who` names it, or 404 `unknown_claim`: a claim the
    token may not see is answered exactly like one that does not exist (API.md, Tokens).
    A bridge token names ledger ids as they are, as an operator does, within its subtree."""
    found = (pool.claim_state(i) for i in lookup_ids(who.tenant, claim_id))
    state = next(
        (
            s
            for s in found
            if s is not None and (who.operator or who.may_act_on(pool.tree, s.admitted.entitlement))
        ),
        None,
    )
    if state is None:
        raise ApiError(404, "unknown_claim", f"no claim {brief_id(claim_id)}")
    return state
