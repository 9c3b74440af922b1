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
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from joulepool.service.limits import ConnectionLimits


def bounded_protocol(limits: ConnectionLimits) -> type[HttpToolsProtocol]:
    """An HTTP protocol class for uvicorn's `http=` that enforces `limits` (module doc)."""
    waiting: OrderedDict[int, BoundedProtocol] = OrderedDict()

    class BoundedProtocol(HttpToolsProtocol):
        """uvicorn's httptools protocol, with a headers deadline, a size bound and a cap."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._header_bytes = 0
            self._headers_done = True
            self._deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                victim = next(iter(waiting.values()), None)
                if victim is None:
                    # Every connection is busy with a request: this one waits its turn.
                    transport.abort()
                    return
                victim.give_up(408, "too many connections: this one sent no request in time")
            self._expect_headers()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_waiting()
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

        def _expect_headers(self) -> None:
            self._headers_done = False
            self._header_bytes = 0
            if self._deadline is None:
                self._deadline = self.loop.call_later(limits.header_timeout_s, self._too_slow)
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

    return BoundedProtocol
