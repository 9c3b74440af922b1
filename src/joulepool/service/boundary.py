"""The trust boundary of `pool serve`: who is asking, and how much they may send (API.md).

FastAPI reads and parses a whole body before it resolves any dependency, so a token
checked as a dependency is checked after an anonymous client has made the service read,
buffer and parse whatever it sent. This ASGI middleware runs first, on every request:

1. the bearer token, unless the path is public: no token or an unknown one is 401
   before a byte of the body is read, a `metrics` token anywhere but `/metrics` 403, and
   a bridge token anywhere but the claim routes a workload manager's bridge calls 403;
2. the declared `Content-Length`: over the limit is 413 `body_too_large` at once;
3. the body itself, read here with a deadline and a running count, so a chunked body
   that passes the limit, or one trickled slower than the deadline, is refused (413, 408)
   before the application sees any of it.

Every refusal closes the connection, so a client cannot go on streaming into it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from joulepool.service.limits import Limits
from joulepool.service.tokens import Principal, TokenBook

PUBLIC_PATHS = frozenset(
    {
        "/healthz",
        "/readyz",
        "/docs",
        "/openapi.json",
        "/ui",
        "/ui/app.js",
        "/ui/app.css",
        "/ui/favicon.svg",
    }
)
"""Paths any client may read without a token: the probes, the API's own description and the
dashboard's static files (they hold no figure: the page asks `GET /v1/dashboard` with the
token it is given, which a browser cannot send when it opens a page)."""

PUBLIC_LOG = ("/checkpoint", "/tile/")
"""The ledger's checkpoint and hash tiles (DESIGN.md §8): public to whoever holds the URL.
Entry bundles (`/tile/entries/`) are not: a token there is checked, and its route asks for
an operator (docs/transparency.md)."""

METRICS_PATH = "/metrics"
"""The one path a `metrics` token may read (API.md "Additions")."""

CLAIMS_PREFIX = "/v1/claims/"
PROGRESS_SUFFIX = "/progress"
CLAIM_PREFIX = "claim:"
"""The scope of a claim token's principal: `claim:<ledger id>` (API.md "Run time")."""

BRIDGE_ROUTES = frozenset(
    {
        ("POST", "/v1/claims"),
        ("GET", "/v1/claims"),
        ("POST", "/v1/estimates"),
        ("POST", "/v1/actions"),
        ("GET", "/v1/actions/due"),
        ("GET", "/v1/actions"),
        ("GET", "/v1/entitlements"),
        ("GET", "/v1/token"),
    }
)
"""What a bridge token may call besides one claim's routes (docs/api.md, Tokens): admit
(with the class estimate job_submit.lua asks first), list claims, read the acts due and
report what it carried out, read the action log (a requeued job's earlier runs), read
entitlements (check-config maps accounts to them) and its own scope. Each route still
confines it to its subtree."""

BRIDGE_CLAIM_POSTS = ("/release", "/readings", "/waiting")
"""What a bridge token may post to one claim: its release, its meter readings, and that
its job waits for resources."""

PRINCIPAL = "principal"
"""Where the middleware leaves the authenticated principal, in the request's state."""


def bearer(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, or None (API.md "Tokens")."""
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            token = token.strip()
            if scheme.lower() == "bearer" and token:
                return token
            return None
    return None


class Boundary:
    """ASGI middleware: authentication before the body, then a bounded, timed body read."""

    def __init__(
        self,
        app: ASGIApp,
        tokens: Callable[[], TokenBook],
        limits: Limits,
        clock: Callable[[], int | None] = lambda: None,
        claim_tokens: Callable[[str, str], bool] | None = None,
    ) -> None:
        # `clock`: the instant an `expires` is judged at (`TokenBook.principal`).
        self.app, self.tokens, self.limits, self.clock = app, tokens, limits, clock
        # Whether a token is a claim's own (API.md "Run time"): it may report that claim's
        # progress and do nothing else.
        self.claim_tokens = claim_tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Let a request through only once it is authenticated and its body is in hand."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        path = scope["path"]
        if path not in PUBLIC_PATHS and not _public_log(path, headers):
            token = bearer(headers)
            if token is None:
                await refuse(send, 401, "unauthorized", "send Authorization: Bearer <token>")
                return
            who = self.tokens().principal(token, self.clock()) or self._claim_principal(
                scope, token
            )
            if who is None:
                await refuse(send, 401, "unauthorized", "unknown token")
                return
            if who.metrics_only and scope["path"] != METRICS_PATH:
                await refuse(send, 403, "forbidden", "a metrics token reads /metrics only")
                return
            if who.bridge and not bridge_may(scope["method"], path):
                await refuse(
                    send,
                    403,
                    "forbidden",
                    "a bridge token admits, reads, reports and releases its subtree's claims only",
                )
                return
            scope.setdefault("state", {})[PRINCIPAL] = who
        limit = self.limits.max_body_bytes
        declared = content_length(headers)
        if declared is not None and declared > limit:
            await refuse(send, 413, "body_too_large", too_large(limit, f"{declared} declared"))
            return
        if declared == 0 or scope["method"] in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        try:
            async with asyncio.timeout(self.limits.body_timeout_s):
                body = await read_body(receive, limit)
        except TimeoutError:
            detail = f"the body did not arrive within {self.limits.body_timeout_s:g} s"
            await refuse(send, 408, "body_timeout", detail)
            return
        if body is None:
            await refuse(send, 413, "body_too_large", too_large(limit, "more sent"))
            return
        await self.app(scope, replay(body, receive), send)

    def _claim_principal(self, scope: Scope, token: str) -> Principal | None:
        claim = progress_claim(scope)
        if claim is None or self.claim_tokens is None or not self.claim_tokens(claim, token):
            return None
        return Principal(f"claim {claim}", CLAIM_PREFIX + claim)


def bridge_may(method: str, path: str) -> bool:
    """Whether a bridge token may send `method` to `path` at all (docs/api.md, Tokens):
    an allow-list, so a route added later is closed to bridges until it is named here."""
    if (method, path) in BRIDGE_ROUTES:
        return True
    if method == "GET":
        # `/ui/` holds the dashboard's static files only, no figure: answered as to anyone.
        return path.startswith((CLAIMS_PREFIX, "/v1/entitlements/", "/ui/"))
    return method == "POST" and path.startswith(CLAIMS_PREFIX) and path.endswith(BRIDGE_CLAIM_POSTS)


def progress_claim(scope: Scope) -> str | None:
    """The claim id of a `POST /v1/claims/{id}/progress`, or None for any other request."""
    path: str = scope["path"]
    if scope["method"] != "POST" or not path.startswith(CLAIMS_PREFIX):
        return None
    if not path.endswith(PROGRESS_SUFFIX) or len(path) <= len(CLAIMS_PREFIX + PROGRESS_SUFFIX):
        return None
    return path[len(CLAIMS_PREFIX) : -len(PROGRESS_SUFFIX)]


def _public_log(path: str, headers: list[tuple[bytes, bytes]]) -> bool:
    """The checkpoint and hash tiles need no token (DESIGN.md §8); an entry bundle does, and
    one sent with a hash tile request is still checked, so a bad token is a 401 anywhere."""
    if path == PUBLIC_LOG[0]:
        return True
    return (
        path.startswith(PUBLIC_LOG[1])
        and not path.startswith("/tile/entries/")
        and bearer(headers) is None
    )


def principal_of(scope: Scope) -> Principal | None:
    """The principal `Boundary` authenticated for this request, if any."""
    state: dict[str, Any] = scope.get("state") or {}
    found = state.get(PRINCIPAL)
    return found if isinstance(found, Principal) else None


def content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """The declared body length; None when absent (the server refuses a malformed one)."""
    for name, value in headers:
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() else None
    return None


async def read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None as soon as it passes `limit` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)  # the client went away; the app sees an empty body
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands the application the body already read, then the client's."""
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


def too_large(limit: int, got: str) -> str:
    """The sentence of a 413: the limit, and what was sent."""
    return f"a request body is at most {limit} bytes ({got}); see pool serve --max-body-bytes"


async def refuse(send: Send, status: int, code: str, detail: str) -> None:
    """An error answer in API.md's shape, closing the connection."""
    body = json.dumps({"error": code, "detail": detail}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="pool"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
