"""Following the log as a tenant: keep the last verified checkpoint, accept a new one only
as a proven extension of it, and raise the alarm on a rollback or fork (DESIGN.md §8;
c2sp.org/tlog-checkpoint; RFC 9162 §2.1.4.2; docs/transparency.md).

Each round fetches `<url>/checkpoint`, verifies its signature, and compares it with the kept
one: the same size must have the same root; a smaller size is a rollback; a larger one must
come with a consistency proof from the kept size that verifies, read from the server's
`/v1/proof/consistency` or computed from its tiles (c2sp.org/tlog-tiles). Only then is the
kept checkpoint replaced, atomically. An alarm never touches the kept file: it is the
evidence, with the checkpoint that contradicts it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from joulepool.files import write_atomically
from joulepool.ledger.checkpoint import SignedCheckpoint
from joulepool.ledger.merkle import verify_consistency
from joulepool.ledger.note import MAX_NOTE_BYTES, VerifierKey, b64encode
from joulepool.ledger.tiles import MAX_ENTRY_BYTES, TILE_WIDTH, Fetch, TileReader
from joulepool.transparency.errors import BundleMalformed, ForkAlarm, Unreachable
from joulepool.transparency.http import DEFAULT_TIMEOUT_S, get_ok, join, request
from joulepool.transparency.logkeys import open_log_checkpoint
from joulepool.transparency.proof_bundle import note_bytes, parse_hashes, read_json

# The largest tile is a full entry bundle: 256 entries, each with its 2-byte length.
MAX_TILE_BYTES: Final = TILE_WIDTH * (2 + MAX_ENTRY_BYTES)
MAX_CONSISTENCY_ANSWER_BYTES: Final = MAX_NOTE_BYTES + 64 * 1024
STATE_MODE: Final = 0o644


@dataclass(frozen=True)
class Round:
    """One round's outcome: `first` (nothing was kept: the checkpoint is trusted on first
    use), `unchanged` (same size and root), or `grew` (proven consistent and now kept)."""

    outcome: str
    kept: SignedCheckpoint
    previous: SignedCheckpoint | None

    def summary(self) -> dict[str, object]:
        """The JSON `pool proof follow --json` prints per round (docs/transparency.md)."""
        out: dict[str, object] = {
            "outcome": self.outcome,
            "origin": self.kept.checkpoint.origin,
            "size": self.kept.checkpoint.size,
            "root_b64": b64encode(self.kept.checkpoint.root_hash),
        }
        if self.previous is not None:
            out["previous_size"] = self.previous.checkpoint.size
        if self.kept.cosigned_by:
            out["cosigned_by"] = [name for name, _ in self.kept.cosigned_by]
        return out


def tile_fetcher(
    base_url: str, token: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
) -> Fetch:
    """A `Fetch` over HTTP for `TileReader` (c2sp.org/tlog-tiles): a 404 is an absent tile
    (LookupError, so a partial tile falls back to its full one); any other failure is
    `Unreachable`."""

    def fetch(path: str) -> bytes:
        url = join(base_url, path)
        answer = request(url, MAX_TILE_BYTES, token=token, timeout_s=timeout_s)
        if answer.status == 404:
            raise LookupError(f"{url}: 404")
        if answer.status != 200:
            raise Unreachable(f"{url}: answered HTTP {answer.status}")
        return answer.body

    return fetch


def read_state(
    path: Path, keys: tuple[VerifierKey, ...], witnesses: tuple[VerifierKey, ...] = ()
) -> SignedCheckpoint | None:
    """The kept checkpoint, verified again by the tenant's keys, or None when the state file
    does not exist yet (docs/transparency.md, state file)."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_NOTE_BYTES + 1)
    except FileNotFoundError:
        return None
    # No quorum: it was met when the checkpoint was kept, and witnesses added since do not
    # make the evidence kept before them void.
    return open_log_checkpoint(raw, keys, f"state file {path}", witnesses=witnesses)


def fetch_checkpoint(
    url: str,
    keys: tuple[VerifierKey, ...],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    *,
    witnesses: tuple[VerifierKey, ...] = (),
    quorum: int = 0,
) -> SignedCheckpoint:
    """`GET <url>/checkpoint`, verified by the tenant's keys and cosigned by at least
    `quorum` of `witnesses` (API.md, Transparency; c2sp.org/tlog-cosignature)."""
    where = join(url, "checkpoint")
    note = get_ok(where, MAX_NOTE_BYTES, timeout_s=timeout_s)
    return open_log_checkpoint(note, keys, where, witnesses=witnesses, quorum=quorum)


def _describe(c: SignedCheckpoint) -> str:
    cp = c.checkpoint
    return f"{cp.origin} size {cp.size} root {b64encode(cp.root_hash)}"


def server_consistency_proof(
    url: str,
    old: SignedCheckpoint,
    new: SignedCheckpoint,
    keys: tuple[VerifierKey, ...],
    token: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[bytes]:
    """`GET /v1/proof/consistency?from=N&to=M` (API.md, Transparency), checked for shape; the
    checkpoint it carries, if signed for the same size with another root, is a fork."""
    n, m = old.checkpoint.size, new.checkpoint.size
    where = join(url, f"v1/proof/consistency?from={n}&to={m}")
    body = get_ok(where, MAX_CONSISTENCY_ANSWER_BYTES, token=token, timeout_s=timeout_s)
    doc = read_json(body, MAX_CONSISTENCY_ANSWER_BYTES, where)
    for field, want in (("from", n), ("to", m)):
        if doc.get(field) != want or type(doc.get(field)) is not int:
            raise BundleMalformed(f"{where} {field}", f"must be {want}")
    if "checkpoint" in doc:
        carried = open_log_checkpoint(note_bytes(doc["checkpoint"], "checkpoint"), keys, where)
        cc = carried.checkpoint
        if cc.size == m and (
            cc.root_hash != new.checkpoint.root_hash or cc.origin != new.checkpoint.origin
        ):
            raise ForkAlarm(
                f"two signed checkpoints at size {m} with different roots: "
                f"{_describe(new)} and {_describe(carried)}",
                new.note,
                carried.note,
            )
    return parse_hashes(doc.get("proof_b64"), f"{where} proof_b64")


def follow_round(
    url: str,
    keys: tuple[VerifierKey, ...],
    state: Path,
    *,
    token: str | None = None,
    tiles: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    witnesses: tuple[VerifierKey, ...] = (),
    quorum: int = 0,
) -> Round:
    """One round of following the log at `url` (DESIGN.md §8; docs/transparency.md):
    the kept checkpoint is replaced only by a signed one proven to extend it; a rollback or
    a fork raises `ForkAlarm` and leaves the kept one as it is. With `witnesses`, a new
    checkpoint must carry at least `quorum` of their cosignatures (c2sp.org/tlog-cosignature):
    a log showing a tenant a view no witness has checked is not followed."""
    kept = read_state(state, keys, witnesses)
    seen = fetch_checkpoint(url, keys, timeout_s, witnesses=witnesses, quorum=quorum)
    if kept is None:
        write_atomically(state, seen.note, STATE_MODE)
        return Round("first", seen, None)
    old, new = kept.checkpoint, seen.checkpoint
    if new.origin != old.origin:
        raise ForkAlarm(
            f"the log now signs origin {new.origin!r}, not the kept {old.origin!r}: "
            f"kept {_describe(kept)}, seen {_describe(seen)}",
            kept.note,
            seen.note,
        )
    if new.size < old.size:
        raise ForkAlarm(
            f"rollback: the log's checkpoint shrank from {old.size} to {new.size}: "
            f"kept {_describe(kept)}, seen {_describe(seen)}",
            kept.note,
            seen.note,
        )
    if new.size == old.size:
        if new.root_hash != old.root_hash:
            raise ForkAlarm(
                f"fork: two signed checkpoints at size {old.size} with different roots: "
                f"kept {_describe(kept)}, seen {_describe(seen)}",
                kept.note,
                seen.note,
            )
        return Round("unchanged", kept, kept)
    if old.size > 0:
        if tiles:
            proof = TileReader(tile_fetcher(url, token, timeout_s), new.size).consistency_proof(
                old.size, new.size
            )
        else:
            proof = server_consistency_proof(url, kept, seen, keys, token, timeout_s)
        if not verify_consistency(old.size, new.size, old.root_hash, new.root_hash, proof):
            raise ForkAlarm(
                f"fork: the checkpoint at size {new.size} does not extend the kept one at size "
                f"{old.size} (the consistency proof fails): "
                f"kept {_describe(kept)}, seen {_describe(seen)}",
                kept.note,
                seen.note,
            )
    write_atomically(state, seen.note, STATE_MODE)
    return Round("grew", seen, kept)
