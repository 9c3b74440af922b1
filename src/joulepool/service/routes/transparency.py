"""The ledger as a C2SP transparency log (API.md "Transparency", DESIGN.md §8,
docs/transparency.md): the signed checkpoint and hash tiles for anyone who holds the URL,
entry bundles for operators (they name every tenant's claims), and inclusion and
consistency proofs for tokens that may see what they prove."""

from __future__ import annotations

import base64
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response

from joulepool.errors import InvalidInput
from joulepool.ledger.merkle import consistency_proof, inclusion_proof
from joulepool.ledger.tiles import Tile, TileRefused
from joulepool.service import models as m
from joulepool.service.deps import ERRORS, ApiError, principal, served
from joulepool.service.routes.claims import visible_claim
from joulepool.service.served import Service
from joulepool.service.tokens import Principal

router = APIRouter()

TEXT = "text/plain; charset=utf-8"
TILE = "application/octet-stream"
_MAX_FIGURE_DIGITS = 20


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@router.get(
    "/checkpoint",
    response_class=Response,
    responses={200: {"content": {TEXT: {}}, "description": "c2sp.org/tlog-checkpoint"}},
    tags=["transparency"],
)
def checkpoint(service: Service = Depends(served)) -> Response:
    """The ledger's signed checkpoint (c2sp.org/tlog-checkpoint, DESIGN.md §8): origin, size
    (the ledger's length), RFC 9162 root, signed by the steward key in force. No token
    needed; signed at most a second before it is served. It carries the cosignature/v1 line
    of every `[[c2sp_witness]]` that cosigned exactly it (c2sp.org/tlog-cosignature)."""
    note = service.checkpoint_note()
    return Response(note, media_type=TEXT, headers={"Cache-Control": "max-age=1"})


@router.get(
    "/tile/{path:path}",
    response_class=Response,
    responses={
        200: {"content": {TILE: {}}, "description": "a hash tile or an entry bundle"},
        403: ERRORS[403],
        404: {"model": m.ErrorOut},
        422: ERRORS[422],
    },
    tags=["transparency"],
)
def tile(path: str, request: Request, service: Service = Depends(served)) -> Response:
    """A hash tile or entry bundle (c2sp.org/tlog-tiles, height 8). Hash tiles need no
    token; entry bundles, which hold every tenant's entries, need an operator token. A full
    tile never changes; a partial one (`.p/W`) is served at any width up to what the ledger
    holds. Past that: 404 `tile_not_found`."""
    try:
        wanted = Tile.parse("tile/" + path)
    except TileRefused as exc:
        raise ApiError(422, "invalid_input", f"tile path: {exc.detail}") from None
    if wanted.level is None:
        from joulepool.service.boundary import principal_of

        who = principal_of(request.scope)
        if who is None:
            raise ApiError(401, "unauthorized", "entry bundles need an operator token")
        if not who.operator:
            raise ApiError(
                403, "forbidden", "entry bundles name every tenant's claims: operators only"
            )
    published = service.published()
    index = published.index

    def read() -> bytes | None:
        if wanted.level is None:
            return index.entry_bundle(wanted.index, wanted.width)
        return index.tile(wanted.level, wanted.index, wanted.width)

    published.follow(published.pool.length)
    data = read()
    if data is None:
        # Past what this process has seen: a replica of a shared ledger looks again first.
        published.follow(service.fresh_pool().length)
        data = read()
    if data is None:
        raise ApiError(
            404, "tile_not_found", f"{wanted.path()} is past the ledger's {index.size} entries"
        )
    # A full tile never changes; an entry bundle was read with an operator's token, so no
    # shared cache may hand it to anyone else.
    scope = "private" if wanted.level is None else "public"
    cache = f"{scope}, max-age=31536000, immutable" if wanted.width == 256 else "no-cache"
    return Response(data, media_type=TILE, headers={"Cache-Control": cache})


@router.get(
    "/v1/claims/{claim_id:path}/proof",
    responses={**ERRORS, 404: {"model": m.ErrorOut}},
    tags=["transparency"],
)
def claim_proof(
    claim_id: str, who: Principal = Depends(principal), service: Service = Depends(served)
) -> Response:
    """A claim's entries (its admission, and its release once released) with RFC 9162
    inclusion proofs against the signed checkpoint given with them (DESIGN.md §8). A tenant
    token sees its own subtree's claims only, with the same 404 as `GET /v1/claims/{id}`."""
    from joulepool.claim_id import shown_id

    pool = service.fresh_pool()
    try:
        state = visible_claim(pool, who, claim_id)
    except ApiError as unknown:
        # Before this route, `GET /v1/claims/<root>/proof` was the state of a tenant's claim
        # named `proof`: where no claim `<root>` is, it still is.
        from joulepool.views.claims import claim_json

        try:
            named = visible_claim(pool, who, f"{claim_id}/proof")
        except ApiError:
            raise unknown from None
        return JSONResponse(claim_json(named, shown_id(who.tenant, named.claim)))
    published = service.published()
    signed = published.head(fresh=True)
    index = published.index
    seqs = [("admitted", state.admitted_seq)]
    if state.released_seq is not None:
        seqs.append(("released", state.released_seq))
    entries: list[dict[str, Any]] = []
    for kind, seq in seqs:
        raw = published.read(seq, 1)
        proof = inclusion_proof(seq, signed.size, index)
        entries.append(
            {
                "event": kind,
                "index": seq,
                "entry_b64": _b64(raw[0]),
                "inclusion_b64": [_b64(h) for h in proof],
            }
        )
    return JSONResponse(
        {"claim": shown_id(who.tenant, state.claim), "checkpoint": signed.text, "entries": entries}
    )


@router.get("/v1/ledger/keys", responses=ERRORS, tags=["transparency"])
def ledger_keys(
    _who: Principal = Depends(principal), service: Service = Depends(served)
) -> Response:
    """Every steward key as a signed-note verifier key, with the entry it signs from and,
    after the first, the rotation statement the key before it signed (DESIGN.md §4, §8): a
    checker who trusts the first key verifies each statement in turn to trust the next, and
    then the checkpoints that key signs. Any token."""
    from joulepool.deployment.checkpoints import verifier_keys

    published = service.published()
    keys = published.pool.keys
    statements: list[bytes | None] = [None, *keys.statements]
    listed = verifier_keys(keys, published.origin)
    return JSONResponse(
        {
            "origin": published.origin,
            "steward": keys.steward,
            "keys": [
                {
                    "from_seq": start,
                    "vkey": vkey.encode(),
                    "public_key_hex": vkey.public_key.hex(),
                    "statement_b64": None if raw is None else _b64(raw),
                }
                for (start, vkey), raw in zip(listed, statements, strict=True)
            ],
        }
    )


def _size_param(request: Request, name: str) -> int | None:
    """Query parameter `name` as a tree size, or None when absent; 422 naming it otherwise."""
    values = request.query_params.getlist(name)
    if not values:
        return None
    text = values[0]
    if len(values) > 1:
        raise InvalidInput(name, "is given more than once")
    if not text.isascii() or not text.isdigit() or len(text) > _MAX_FIGURE_DIGITS:
        shown = text[:24] + ("…" if len(text) > 24 else "")
        raise InvalidInput(name, f"{shown!r} is not a tree size: a whole number of entries")
    return int(text)


@router.get(
    "/v1/proof/consistency",
    responses=ERRORS,
    tags=["transparency"],
)
def consistency(
    request: Request,
    _from: str | None = Query(
        None, alias="from", description="the size of the tree held: a whole number, at least 1"
    ),
    _to: str | None = Query(
        None, alias="to", description="the size to prove to; default the current size"
    ),
    _who: Principal = Depends(principal),
    service: Service = Depends(served),
) -> Response:
    """An RFC 9162 §2.1.4 consistency proof from the tree of `from` entries to that of `to`
    (default: the current size), with a checkpoint of `to` signed now (DESIGN.md §8). Any
    token: the proof holds hashes only. `from` must be in [1, to]: RFC 9162 defines no proof
    from the empty tree."""
    # Read from the query string itself, strictly (the declared parameters document it):
    # a repeated one is refused, not the last taken.
    old = _size_param(request, "from")
    new = _size_param(request, "to")
    if old is None:
        raise InvalidInput("from", "is required: the size of the tree you hold")
    published = service.published()
    current = published.head(fresh=True)
    if new is None:
        new = current.size
    if new > current.size:
        raise InvalidInput("to", f"{new} is past the ledger's {current.size} entries")
    if old < 1:
        raise InvalidInput(
            "from", "must be at least 1: RFC 9162 §2.1.4 proves nothing from the empty tree"
        )
    if old > new:
        raise InvalidInput("from", f"{old} is larger than to ({new})")
    signed = current if new == current.size else published.head_at(new)
    proof = consistency_proof(old, new, published.index)
    return JSONResponse(
        {"from": old, "to": new, "checkpoint": signed.text, "proof_b64": [_b64(h) for h in proof]}
    )
