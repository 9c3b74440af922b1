"""Witness receipts (API.md `/v1/witness-receipts`): checked against the ledger and kept
(§6.7, §6.8); operators only."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from joulepool.checks import check_hex, check_text
from joulepool.deployment.witnesses import keep_receipt, load_receipts
from joulepool.ledger.witness import verified_statement
from joulepool.service import models as m
from joulepool.service.body import BODY, documented, fields, json_body
from joulepool.service.deps import ERRORS, ApiError, operator, served
from joulepool.service.served import Service
from joulepool.service.tokens import Principal

router = APIRouter()


@router.post(
    "/v1/witness-receipts",
    response_model=m.WitnessCheckOut,
    responses=ERRORS,
    tags=["ledger"],
    openapi_extra=documented(m.WitnessIn),
)
async def post_receipt(
    request: Request, _who: Principal = Depends(operator), service: Service = Depends(served)
) -> Response:
    """Check a witness receipt against the ledger; a valid one is kept (§6.7, §6.8)."""
    # A receipt may be megabytes of hex: it is checked off the event loop.
    body = await json_body(request)
    return JSONResponse(await run_in_threadpool(check_and_keep, service, body))


def check_and_keep(service: Service, given: object) -> dict[str, object]:
    """The receipt's report; 422 with its refusal's code when it does not verify (§6.8)."""
    from joulepool.ledger.witness import check_witness

    body = fields(given, ("witness", "public_key_hex", "receipt_hex"))
    witness = check_text(body["witness"], f"{BODY}.witness")
    public_key = check_hex(body["public_key_hex"], f"{BODY}.public_key_hex", 32)
    receipt = check_hex(body["receipt_hex"], f"{BODY}.receipt_hex")
    pool = service.fresh_pool()
    report = check_witness(
        receipt,
        witness,
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
            keep_receipt(service.witnesses, witness, public_key, receipt, report.through)
    return report.to_json()


@router.get(
    "/v1/witness-receipts",
    response_model=m.WitnessReceiptsOut,
    responses=ERRORS,
    tags=["ledger"],
)
def list_receipts(
    _who: Principal = Depends(operator), service: Service = Depends(served)
) -> Response:
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
