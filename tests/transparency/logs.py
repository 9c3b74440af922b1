"""A log for the transparency clients' tests, served over real HTTP on 127.0.0.1.

`Log` holds ledger entries sealed by the real sealing code and signs checkpoints of them
with the pure C2SP layer; `LogServer` answers the contract of API.md (Transparency) from
it: `GET /checkpoint`, `GET /tile/...`, `GET /v1/proof/consistency`. A test changes the
log between rounds (grows it, rolls it back, rewrites it) as a misbehaving server would.
`StaticServer` serves a folder of files written by `tiles.build_tiles`, as a CDN would.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from joulepool.events import Event
from joulepool.grade import Grade
from joulepool.ledger.checkpoint import Checkpoint, log_verifier_key, sign_checkpoint
from joulepool.ledger.keys import KeyPair
from joulepool.ledger.merkle import HashLevels, consistency_proof, inclusion_proof, root_of
from joulepool.ledger.note import b64encode
from joulepool.ledger.tiles import build_tiles
from joulepool.transparency.proof_bundle import bundle_json
from tests.support.ledgers import STEWARD, admitted, released, seal_all

ORIGIN = "pool.example/ledger"
VKEY = log_verifier_key(STEWARD, ORIGIN).encode()


def events(n: int, salt: int = 0) -> list[Event]:
    """n events: claim c<i> admitted, then released two entries later; `salt` changes the
    figures so two ledgers of the same length differ from their first entry."""
    out: list[Event] = []
    i = 0
    while len(out) < n:
        out.append(admitted(f"c{i}", "abc"[i % 3], 100 + i + salt, Grade.HwShunt))
        if len(out) < n:
            out.append(released(f"c{i}", 50 + i + salt))
        i += 1
    return out


def entries(n: int, salt: int = 0) -> list[bytes]:
    """n sealed ledger entries (see `events`)."""
    return seal_all(events(n, salt))


def note_of(
    leaves: list[bytes], key: KeyPair = STEWARD, origin: str = ORIGIN, name: str | None = None
) -> bytes:
    """The signed checkpoint of `leaves` by `key` (the steward's) under `name` (the origin)."""
    return sign_checkpoint(Checkpoint(origin, len(leaves), root_of(leaves)), key, name)


def bundle_of(leaves: list[bytes], claim: str, indices: dict[str, int]) -> bytes:
    """The bundle GET /v1/claims/{claim}/proof answers for `indices` (kind → index)."""
    levels = HashLevels.of_leaves(leaves)
    rows = [
        (kind, i, leaves[i], inclusion_proof(i, len(leaves), levels)) for kind, i in indices.items()
    ]
    return bundle_json(claim, note_of(leaves), rows)


def write_tiles(folder: Path, leaves: list[bytes], note: bytes | None = None) -> None:
    """The tiles of `leaves` and `checkpoint` under `folder`, as `pool ledger tiles` does."""
    for path, data in build_tiles(leaves):
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    (folder / "checkpoint").write_bytes(note if note is not None else note_of(leaves))


@dataclass
class Log:
    """What the log server serves: its leaves and the note it signs for them (None: the
    steward's signature of the leaves; set it to serve another note)."""

    leaves: list[bytes] = field(default_factory=list)
    note: bytes | None = None
    # When set, /v1/proof/consistency answers this instead of a real proof.
    proof_override: list[bytes] | None = None
    # The Authorization header of each request for a consistency proof, in order.
    authorizations: list[str | None] = field(default_factory=list)

    def checkpoint(self) -> bytes:
        return self.note if self.note is not None else note_of(self.leaves)


class _LogHandler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def _send(self, status: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        log = self.server.log  # type: ignore[attr-defined]
        if url.path == "/checkpoint":
            self._send(200, log.checkpoint())
        elif url.path.startswith("/tile/"):
            tiles = dict(build_tiles(log.leaves))
            data = tiles.get(url.path[1:])
            self._send(200, data, "application/octet-stream") if data else self._send(404, b"")
        elif url.path == "/v1/proof/consistency":
            log.authorizations.append(self.headers.get("Authorization"))
            query = urllib.parse.parse_qs(url.query)
            n, m = int(query["from"][0]), int(query.get("to", [len(log.leaves)])[0])
            levels = HashLevels.of_leaves(log.leaves)
            proof = log.proof_override
            if proof is None:
                proof = consistency_proof(n, m, levels)
            doc = {
                "from": n,
                "to": m,
                "checkpoint": note_of(log.leaves[:m]).decode(),
                "proof_b64": [b64encode(p) for p in proof],
            }
            self._send(200, json.dumps(doc).encode(), "application/json")
        else:
            self._send(404, b"not found\n")


@contextmanager
def serving(log: Log) -> Iterator[str]:
    """A real HTTP server for `log` on 127.0.0.1; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _LogHandler)
    server.log = log  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def static_files(folder: Path) -> Iterator[str]:
    """Python's own static file server over `folder` on 127.0.0.1; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
