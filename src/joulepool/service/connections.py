"""Connections `pool serve` will hold: a cap, a deadline for headers, a bound on their size.

uvicorn bounds a keep-alive connection's idle time, but not how long a client may take
to send a request's headers, nor how large they may grow (its httptools parser keeps
them all), nor how many connections it holds: 2,000 clients trickling a header each kept
2,000 descriptors for as long as they liked, and past the descriptor limit every new
request failed. This protocol adds the three, on top of uvicorn's own:

- **headers deadline**: from a connection's first byte (or its opening) to the end of a
  request's headers, at most `header_timeout_s`; past it, 408 and the connection is closed;
- **header size**: at most `max_header_bytes` of request line and headers; past it, 431;
- **connection cap**: at most `max_connections` open. A new connection past the cap
  closes the oldest connection still waiting for its headers, so a flood of slow
  clients cannot lock out a prompt one; when every connection is busy with a request,
  the newcomer is closed instead.

Over TLS a connection is counted from its accept, not from the end of its handshake
(docs/reliability.md §17): with uvicorn's `ssl=`, the loop held a connection in handshake
for 60 s before the HTTP protocol ever saw it, outside the cap, the deadline and the
eviction, so 1,100 silent TCP connections under 1,024 descriptors failed every HTTPS
request. `pool serve` therefore serves plain TCP and does TLS itself, in `TlsGate`: the
handshake must end within `header_timeout_s` of the accept (the same deadline then covers
the request's headers), and a connection still in handshake is the first to be evicted.
"""

from __future__ import annotations

import asyncio
import ssl
from asyncio.sslproto import SSLProtocol
from collections import OrderedDict
from typing import Any, Protocol, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from joulepool.service.limits import ConnectionLimits


class Evictable(Protocol):
    """A connection that may be closed to make room: it sent no request yet, or is idle."""

    def give_up(self, status: int, detail: str) -> None: ...


class Held:
    """The connections one server holds, counted from their accept (module doc)."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.open = 0
        # Oldest first: connections in handshake, waiting for headers, or idle.
        self.waiting: OrderedDict[int, Evictable] = OrderedDict()

    def opened(self) -> bool:
        """Count a new connection; False when it must be closed at once (all are busy)."""
        self.open += 1
        if self.open > self.limits.max_connections:
            victim = next(iter(self.waiting.values()), None)
            if victim is None:
                return False
            victim.give_up(408, "too many connections: this one sent no request in time")
        return True

    def closed(self) -> None:
        """A counted connection is gone."""
        self.open -= 1


def bounded_protocol(
    limits: ConnectionLimits, tls: ssl.SSLContext | None = None
) -> type[asyncio.BaseProtocol]:
    """A protocol class for uvicorn's `http=` that enforces `limits` (module doc); with `tls`,
    one that does the TLS handshake itself, counted and bounded from the accept."""
    held = Held(limits)
    waiting = held.waiting

    class BoundedProtocol(HttpToolsProtocol):
        """uvicorn's httptools protocol, with a headers deadline, a size bound and a cap."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._header_bytes = 0
            self._headers_done = True
            self._deadline: asyncio.TimerHandle | None = None
            # Set by a TlsGate: the gate counted the connection at its accept.
            self.gate: TlsGate | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if self.gate is not None:
                waiting.pop(id(self.gate), None)  # the handshake is over
                self._expect_headers(since=self.gate.accepted)
                return
            if not held.opened():
                # Every connection is busy with a request: this one waits its turn.
                transport.abort()
                return
            self._expect_headers()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_waiting()
            if self.gate is None:
                held.closed()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if (
                self._headers_done
                and not self.pipeline
                and (self.cycle is None or self.cycle.response_complete)
            ):
                self._expect_headers()  # the next request on a kept-alive connection
            if not self._headers_done:
                self._header_bytes += len(data)
            super().data_received(data)
            # Until its headers are complete, every byte a request sent is header: this
            # bounds what the parser holds to the limit and one read.
            if not self._headers_done and self._header_bytes > limits.max_header_bytes:
                self.give_up(431, f"request line and headers over {limits.max_header_bytes} bytes")

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and not self.pipeline:
                # Idle between requests: the first to go when a newcomer needs the room.
                waiting[id(self)] = self

        def on_headers_complete(self) -> None:
            self._stop_waiting()
            super().on_headers_complete()

        def _expect_headers(self, since: float | None = None) -> None:
            self._headers_done = False
            self._header_bytes = 0
            if self._deadline is None:
                start = self.loop.time() if since is None else since
                self._deadline = self.loop.call_at(start + limits.header_timeout_s, self._too_slow)
            waiting[id(self)] = self

        def _stop_waiting(self) -> None:
            self._headers_done = True
            waiting.pop(id(self), None)
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _too_slow(self) -> None:
            self._deadline = None
            if not self._headers_done:
                self.give_up(408, f"headers not received within {limits.header_timeout_s:g} s")

        def give_up(self, status: int, detail: str) -> None:
            """Answer `status` (no request reached the application) and close."""
            self._stop_waiting()
            if self.transport.is_closing():
                return
            reason = {408: "Request Timeout", 431: "Request Header Fields Too Large"}[status]
            code = {408: "header_timeout", 431: "headers_too_large"}[status]
            body = f'{{"error": "{code}", "detail": "{detail}"}}'.encode()
            self.transport.write(
                f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
                + body
            )
            self.transport.close()

    if tls is None:
        return BoundedProtocol
    context: ssl.SSLContext = tls

    class TlsGate(SSLProtocol):
        """The TLS layer of one connection, counted and bounded from its accept (module doc).

        uvicorn builds it as it would build its HTTP protocol (`http=`), over a plain TCP
        server; it builds the `BoundedProtocol` that speaks HTTP once the handshake is over.
        """

        def __init__(self, **uvicorn: Any) -> None:
            loop = uvicorn.get("_loop") or asyncio.get_running_loop()
            self.http = BoundedProtocol(**uvicorn)
            self.http.gate = self
            self.accepted = loop.time()
            self.raw: asyncio.Transport | None = None
            options: dict[str, Any] = {
                # Nobody awaits the handshake: a failed one is the connection's end, no more.
                "waiter": None,
                "server_side": True,
                # One deadline from the accept: the handshake, then the request's headers.
                "ssl_handshake_timeout": limits.header_timeout_s,
                # A peer that never answers our close_notify holds a descriptor this long.
                "ssl_shutdown_timeout": limits.header_timeout_s,
            }
            super().__init__(loop, self.http, context, **options)

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.raw = cast(asyncio.Transport, transport)
            self.accepted = self.http.loop.time()
            super().connection_made(transport)
            if not held.opened():
                self.raw.abort()
                return
            waiting[id(self)] = self

        def connection_lost(self, exc: BaseException | None) -> None:
            waiting.pop(id(self), None)
            held.closed()
            super().connection_lost(exc)

        def give_up(self, status: int, detail: str) -> None:  # noqa: ARG002
            """Close a connection still in its handshake: there is no HTTP to answer in."""
            waiting.pop(id(self), None)
            if self.raw is not None and not self.raw.is_closing():
                self.raw.abort()

    return TlsGate
