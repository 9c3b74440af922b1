"""A deployment's ledger as a C2SP log: its checkpoint and its verifier keys (DESIGN.md §8).

The checkpoint (c2sp.org/tlog-checkpoint) signs `Pool.merkle_head()`, the RFC 9162 tree
over the entries as stored, whose size is the ledger's length, with the steward key in force
as an Ed25519 signed-note key named by the origin. The key in force changes at a rotation
(DESIGN.md §4): every key has its own verifier key, and `verifier_keys` lists each with
the entry from which it signs, so a checker who trusts the first key follows the rotation
statements to the current one (docs/transparency.md).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

from joulepool.errors import PoolError
from joulepool.files import write_atomically
from joulepool.ledger.checkpoint import Checkpoint, log_verifier_key, sign_checkpoint
from joulepool.ledger.keys import KeyPair
from joulepool.ledger.note import VerifierKey
from joulepool.ledger.rotation import KeySchedule
from joulepool.ledger.tiles import build_tiles
from joulepool.pool import Pool


@dataclass(frozen=True, slots=True)
class SignedHead:
    """A signed checkpoint and what it says: the tree's size and root (DESIGN.md §8)."""

    size: int
    root: bytes
    note: bytes

    @property
    def text(self) -> str:
        """The signed note as served (`text/plain; charset=utf-8`, API.md "Transparency")."""
        return self.note.decode("utf-8")


def sign_head(origin: str, size: int, root: bytes, key: KeyPair) -> SignedHead:
    """The c2sp.org/tlog-checkpoint note of a tree of `size` leaves with `root`, signed by
    `key` (the steward key in force), named by `origin` (DESIGN.md §8)."""
    if key.seed is None:
        raise PoolError("a checkpoint is signed by the steward's secret key, and none is here")
    return SignedHead(size, root, sign_checkpoint(Checkpoint(origin, size, root), key))


def current_checkpoint(pool: Pool, origin: str, key: KeyPair) -> SignedHead:
    """The checkpoint of the ledger as a decision sees it now (DESIGN.md §8)."""
    size, root = pool.merkle_head()
    return sign_head(origin, size, root, key)


def write_tiles(pool: Pool, origin: str, key: KeyPair, out: Path) -> tuple[SignedHead, int]:
    """Write the ledger's tiles and entry bundles (c2sp.org/tlog-tiles, `build_tiles`) under
    `out`, then `out/checkpoint` signed for the same size, last, so a mirror that sees the
    checkpoint finds every tile it needs (DESIGN.md §8). Returns it and the count of files.
    One pass over the entries; memory holds the right edge only."""
    size, root = pool.merkle_head()
    signed = sign_head(origin, size, root, key)
    files = 0
    made: set[Path] = set()
    for path, data in build_tiles(itertools.islice(pool.entries(0), size)):
        target = out / path
        if target.parent not in made:
            target.parent.mkdir(parents=True, exist_ok=True)
            made.add(target.parent)
        target.write_bytes(data)
        files += 1
    write_atomically(out / "checkpoint", signed.note, 0o644)
    return signed, files


def verifier_keys(keys: KeySchedule, origin: str) -> list[tuple[int, VerifierKey]]:
    """Every steward key as a c2sp.org/signed-note verifier key named by `origin`, with the
    entry index from which it signs (0 for the first; a rotation's `from_seq` after it),
    oldest first (DESIGN.md §4 key rotation, §8)."""
    out: list[tuple[int, VerifierKey]] = []
    for from_seq, public_key in keys.keys_over_time():
        out.append((from_seq, log_verifier_key(KeyPair(keys.steward, public_key, None), origin)))
    return out
