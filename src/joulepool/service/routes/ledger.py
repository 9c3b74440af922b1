"""The ledger itself (API.md `/v1/ledger`): its head, length and attestation (§6.8), and its
entries as stored (DESIGN.md §4). Operators only: its length counts every tenant's entries."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse, Response

from joulepool.service import models as m
from joulepool.service.deps import ERRORS, operator, served
from joulepool.service.ledger_report import ledger_report
from joulepool.service.served import Service
from joulepool.service.tokens import Principal

CBOR_SEQ = "application/cbor-seq"
MAX_ENTRIES_PER_READ = 100_000

router = APIRouter()


@router.get("/v1/ledger", response_model=m.LedgerOut, responses=ERRORS, tags=["ledger"])
def ledger(_who: Principal = Depends(operator), service: Service = Depends(served)) -> Response:
    """The ledger's head, length and attestation (§6.8); operators only (API.md, Tokens):
    its length counts every tenant's admissions and releases."""
    return JSONResponse(ledger_report(service.fresh_pool(), service.witnesses))


@router.get(
    "/v1/ledger/entries",
    response_class=Response,
    responses={**ERRORS, 200: {"content": {CBOR_SEQ: {}}, "description": "entries as stored"}},
    tags=["ledger"],
)
def ledger_entries(
    start: int = Query(0, alias="from", ge=0, le=2**62),
    _who: Principal = Depends(operator),
    service: Service = Depends(served),
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
