"""Bounded HTTP for the transparency clients: GET and POST with the standard library, no
proxy from the environment, a time limit, and a byte limit on every answer read.

A log, tile server or witness is a stranger: an answer longer than the caller's bound is
refused after reading one byte more than the bound, never buffered whole.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from email.message import Message
from typing import IO, Final, Protocol

from joulepool.transparency.errors import Unreachable

DEFAULT_TIMEOUT_S: Final = 10.0
# The whole answer, not one wait, within this many timeouts.
TOTAL_FACTOR: Final = 6
_CHUNK: Final = 64 * 1024
USER_AGENT: Final = "joulepool-transparency"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # urllib would follow a redirect to any host with the bearer token still attached, and
    # to ftp: a 3xx is answered as it is, which `get_ok` reports.
    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: Message,
        newurl: str,
    ) -> None:
        del req, fp, code, msg, headers, newurl


# A proxy in the environment would be a third party between the tenant and the log; the
# URL given is the one meant.
_OPENER: Final = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


@dataclass(frozen=True)
class Answer:
    """An HTTP answer: status, media type (no parameters, lowercase) and body."""

    status: int
    content_type: str
    body: bytes


def check_url(url: str, field: str = "url") -> str:
    """An http(s) URL with a host and no fragment (RFC 3986; API.md serves over http(s)), or
    `Unreachable` naming `field`."""
    if not isinstance(url, str) or len(url) > 2048 or not url.isprintable():
        raise Unreachable(f"{field}: must be a printable URL of at most 2048 characters")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.fragment:
        raise Unreachable(f"{field}: {url!r} is not an http(s) URL with a host")
    return url


def join(base: str, path: str) -> str:
    """`path` under `base`, whether or not `base` ends in a slash (c2sp.org/tlog-tiles and
    API.md paths are relative to the log's base URL)."""
    return base.rstrip("/") + "/" + path.lstrip("/")


class _Readable(Protocol):
    def read1(self, amt: int, /) -> bytes: ...


def _read(response: _Readable, limit: int, url: str, deadline: float) -> bytes:
    # Chunks as they arrive, against one deadline: the socket's timeout bounds each wait
    # only, and a server sending a byte a second would otherwise hold a round for hours.
    # One byte past the bound tells an answer that is too long without reading it all.
    chunks: list[bytes] = []
    got = 0
    while got <= limit:
        if time.monotonic() > deadline:
            raise Unreachable(f"{url}: the answer took longer than its time limit")
        chunk = response.read1(min(_CHUNK, limit + 1 - got))
        if not isinstance(chunk, bytes):
            raise Unreachable(f"{url}: answered no bytes")
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    if got > limit:
        raise Unreachable(f"{url}: the answer is longer than {limit} bytes")
    return b"".join(chunks)


def request(
    url: str,
    limit: int,
    *,
    body: bytes | None = None,
    token: str | None = None,
    content_type: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Answer:
    """GET `url` (or POST `body` to it) and read at most `limit` bytes of the answer,
    whatever its status, all within `TOTAL_FACTOR` times `timeout_s`; `Unreachable` if no
    HTTP answer came in time (RFC 9110)."""
    check_url(url)
    deadline = time.monotonic() + TOTAL_FACTOR * timeout_s
    headers = {"User-Agent": USER_AGENT}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if content_type is not None:
        headers["Content-Type"] = content_type
    # check_url allowed http and https only.
    req = urllib.request.Request(  # noqa: S310
        url, data=body, headers=headers, method="GET" if body is None else "POST"
    )
    try:
        with _OPENER.open(req, timeout=timeout_s) as response:
            return Answer(
                response.status, _media_type(response), _read(response, limit, url, deadline)
            )
    except urllib.error.HTTPError as exc:
        with exc:
            return Answer(exc.code, _media_type(exc), _read(exc, limit, url, deadline))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise Unreachable(f"{url}: {type(exc).__name__}: {reason}") from None


def _media_type(response: object) -> str:
    headers = getattr(response, "headers", None)
    raw = headers.get("Content-Type", "") if headers is not None else ""
    return str(raw).split(";", 1)[0].strip().lower()


def get_ok(
    url: str, limit: int, *, token: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
) -> bytes:
    """The body of a 200 answer to GET `url` (RFC 9110 §15.3.1), or `Unreachable` naming the
    status."""
    answer = request(url, limit, token=token, timeout_s=timeout_s)
    if answer.status != 200:
        hint = answer.body[:200].decode("utf-8", "replace").strip()
        raise Unreachable(f"{url}: answered HTTP {answer.status}" + (f": {hint}" if hint else ""))
    return answer.body
