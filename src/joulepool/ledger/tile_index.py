"""The ledger's hash tiles, served from what a live log keeps (c2sp.org/tlog-tiles,
DESIGN.md §8).

Kept in memory: the root of every complete run of 256^L leaves for L ≥ 1 (a tile of level L
lists 256 of them; 32 bytes per 256 entries in all, 250 KiB at 2,000,000 entries) and the
leaf hashes of the last, incomplete level-0 tile. Read from the ledger on demand: the 256
entries of a complete level-0 tile or entry bundle, through `read(start, count)`. So every
tile, entry bundle, subtree hash and proof costs at most one read of 256 entries and a few
hundred hashes, whatever the size, and memory grows by 1/256 of a hash per entry.

The index follows the ledger lazily (`follow`): it is handed the entries past its size
before it answers at a larger size. Entries below a size a checkpoint was signed at never
change (the ledger only grows, §6.1), so nothing here is ever taken back.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable

from joulepool.ledger.merkle import HASH_SIZE, MerkleRefused, leaf_hash
from joulepool.ledger.tiles import (
    TILE_HEIGHT,
    TILE_WIDTH,
    build_entry_bundle,
    fold,
    subtree_in_tile,
    tile_width,
)

Read = Callable[[int, int], list[bytes]]
"""`read(start, count)`: the ledger's entries [start, start + count), as stored."""

_CACHED_TILES = 16


class TileIndex:
    """Hash tiles, entry bundles and complete subtree hashes of a ledger (c2sp.org/tlog-tiles;
    a `SubtreeHash` for RFC 9162 §2.1.3.1 / §2.1.4.1 proofs)."""

    def __init__(self, read: Read) -> None:
        self._read = read
        self._lock = threading.RLock()
        self._size = 0
        self._edge: list[bytes] = []
        # _roots[k]: the roots of the complete runs of 256^(k+1) leaves, concatenated.
        self._roots: list[bytearray] = []
        self._leaves: OrderedDict[int, list[bytes]] = OrderedDict()

    @property
    def size(self) -> int:
        """How many leaves the index covers: the largest tree size it serves (RFC 9162 §2.1.1)."""
        return self._size

    def follow(self, entries: Iterable[bytes], upto: int) -> None:
        """Take the entries from index `size` on, until `upto` leaves are covered
        (c2sp.org/tlog-tiles: tiles only ever grow to the right)."""
        with self._lock:
            if upto <= self._size:
                return
            for raw in entries:
                self._append(leaf_hash(raw))
                if self._size >= upto:
                    return
            raise MerkleRefused("size", f"the ledger ended at {self._size}, before {upto}")

    def _append(self, leaf: bytes) -> None:
        self._edge.append(leaf)
        self._size += 1
        if len(self._edge) == TILE_WIDTH:
            self._push(0, fold(self._edge))
            self._edge = []

    def _push(self, k: int, root: bytes) -> None:
        if k == len(self._roots):
            self._roots.append(bytearray())
        level = self._roots[k]
        level += root
        count = len(level) // HASH_SIZE
        if count % TILE_WIDTH == 0:
            last = level[(count - TILE_WIDTH) * HASH_SIZE :]
            self._push(
                k + 1,
                fold([bytes(last[i : i + HASH_SIZE]) for i in range(0, len(last), HASH_SIZE)]),
            )

    def _leaf_tile(self, index: int) -> list[bytes]:
        """The 256 leaf hashes of complete level-0 tile `index`, read from the ledger."""
        cached = self._leaves.get(index)
        if cached is not None:
            self._leaves.move_to_end(index)
            return cached
        entries = self._read(index * TILE_WIDTH, TILE_WIDTH)
        if len(entries) != TILE_WIDTH:
            raise MerkleRefused(
                "tile", f"level-0 tile {index}: the ledger gave {len(entries)} entries"
            )
        hashes = [leaf_hash(raw) for raw in entries]
        self._leaves[index] = hashes
        if len(self._leaves) > _CACHED_TILES:
            self._leaves.popitem(last=False)
        return hashes

    def _hashes(self, level: int, index: int, width: int) -> list[bytes]:
        """Hashes [0, width) of tile `index` at `level` (c2sp.org/tlog-tiles)."""
        if level == 0:
            if index == self._size >> TILE_HEIGHT:
                return self._edge[:width]
            return self._leaf_tile(index)[:width]
        roots = self._roots[level - 1]
        at = index * TILE_WIDTH * HASH_SIZE
        return [
            bytes(roots[i : i + HASH_SIZE]) for i in range(at, at + width * HASH_SIZE, HASH_SIZE)
        ]

    def tile(self, level: int, index: int, width: int) -> bytes | None:
        """The bytes of hash tile `index` at `level` with `width` hashes (256: full), or None
        where the tree of `size` leaves does not have that many there (c2sp.org/tlog-tiles:
        a partial tile is a prefix of the full one, so any width up to what exists is served)."""
        with self._lock:
            if level > 0 and level > len(self._roots):
                return None
            if width > tile_width(self._size, level, index):
                return None
            return b"".join(self._hashes(level, index, width))

    def entry_bundle(self, index: int, width: int) -> bytes | None:
        """Entry bundle `index` with `width` entries, read from the ledger, or None where the
        ledger does not hold them yet (c2sp.org/tlog-tiles, Entry bundles)."""
        with self._lock:
            if width > tile_width(self._size, 0, index):
                return None
        start = index * TILE_WIDTH
        entries = self._read(start, width)
        if len(entries) != width:
            return None
        return build_entry_bundle(entries, start)

    def __call__(self, start: int, end: int) -> bytes:
        """The hash of the complete subtree [start, end) (RFC 9162 §2.1.1), from at most one
        tile's hashes."""
        level, index, at, count = subtree_in_tile(start, end, self._size)
        with self._lock:
            hashes = self._hashes(level, index, at + count)
        return fold(hashes[at:])
