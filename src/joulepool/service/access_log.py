"""One access-log line per request of `pool serve` ("tokens and transport").

Each line says when, from which address (the socket's peer: `pool serve` trusts no
X-Forwarded-For), which token (by its name, never the token), the method, the path, the
status, how long the answer took, and, where there is one, the claim and its verdict. It is
written human (`2026-12-03T13:11:09.123Z 10.0.0.7 ops POST /v1/claims 200 0.8ms claim=job-1
verdict=admit`) or as one JSON object (`--log-format json`, `"client"`).

It sits outside the trust boundary, so refusals (401, 413, 408) are logged as well. The
admission path is performance-sensitive (benchmarks/serve.py): a line is built from values
the request already carries and written with one `write` on a line-buffered stream; nothing
is parsed, no logging framework runs.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from json.encoder import encode_basestring
from typing import Any, TextIO

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from joulepool.claim_id import printable
from joulepool.service.boundary import PRINCIPAL

ACCESS = "access"
"""Where a handler leaves `(claim, verdict)` for the access log, in the request's state."""
FORMATS = ("human", "json")


def note(scope: Scope, claim: str, verdict: str) -> None:
    """Record the claim a request acted on and the verdict or outcome, for its log line."""
    scope.setdefault("state", {})[ACCESS] = (claim, verdict)


_second: list[Any] = [None, ""]


def _instant(now: float) -> str:
    """`2026-12-03T13:11:09.123Z`; the text up to the second is made once a second, since
    formatting a date is most of what a line costs."""
    whole = int(now)
    if _second[0] != whole:
        _second[1] = datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%S.")
        _second[0] = whole
    return f"{_second[1]}{int(now * 1000) % 1000:03d}Z"


def _shown(text: str) -> str:
    return text if text.isprintable() else printable(text)


def line(
    fmt: str,
    now: float,
    client: str | None,
    who: str | None,
    method: str,
    path: str,
    status: int,
    took_ms: float,
    access: tuple[str, str] | None,
) -> str:
    """One access-log line, newline included."""
    if fmt == "json":
        # Built by hand, the strings escaped by json's own C encoder: json.dumps of a dict
        # costs twice as much, on every request.
        token = "null" if who is None else encode_basestring(who)
        peer = "null" if client is None else encode_basestring(client)
        text = (
            f'{{"time":"{_instant(now)}","client":{peer},"token":{token},'
            f'"method":{encode_basestring(method)},'
            f'"path":{encode_basestring(path)},"status":{status},"ms":{took_ms:.3f}'
        )
        if access is not None:
            text += (
                f',"claim":{encode_basestring(access[0])},"verdict":{encode_basestring(access[1])}'
            )
        return text + "}\n"
    # Paths and claim ids are the client's: a terminal shows their escapes, never obeys them.
    text = (
        f"{_instant(now)} {_shown(client) if client else '-'} {_shown(who) if who else '-'} {method} {_shown(path)} "
        f"{status} {took_ms:.1f}ms"
    )
    if access is not None:
        text += f" claim={_shown(access[0])} verdict={access[1]}"
    return text + "\n"


class AccessLog:
    """ASGI middleware: after each HTTP request, one line on `stream`."""

    def __init__(self, app: ASGIApp, stream: TextIO, fmt: str = "human") -> None:
        self.app, self.stream, self.fmt = app, stream, fmt
        self.dropped = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request through, noting its status, then write its line."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0

        async def noting(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, noting)
        finally:
            state: dict[str, Any] = scope.get("state") or {}
            who = state.get(PRINCIPAL)
            took_ms = (time.perf_counter() - started) * 1000
            peer = scope.get("client")
            text = line(
                self.fmt,
                time.time(),
                None if peer is None else str(peer[0]),
                None if who is None else who.name,
                scope["method"],
                scope["path"],
                status or 500,
                took_ms,
                state.get(ACCESS),
            )
            try:
                self.stream.write(text)
            except (OSError, ValueError):
                # A full disk under the log (or a closed stream) must never cost a client
                # its answer: the line is dropped, and the refusals say disk_full anyway.
                self.dropped += 1
