"""The ledger as static tiles (c2sp.org/tlog-tiles), DESIGN.md §8.

Tiles have height 8: a full tile holds 256 hashes. At level 0 they are leaf hashes; at
level L ≥ 1 entry i of tile N is the root of the full level L-1 tile 256·N + i, that is of
256^L consecutive leaves. The rightmost tile of a level is partial when the tree does not
fill it, holding (size // 256^L) mod 256 hashes; an empty tile does not exist. Entry
bundles carry the leaves themselves, each as a big-endian uint16 length and its bytes, so
a leaf is at most 65,535 bytes (`EntryTooLarge` otherwise).

Paths: `tile/<L>/<N>[.p/<W>]` and `tile/entries/<N>[.p/<W>]`, N written in groups of three
digits, every group but the last prefixed `x` (1234067 → `x001/x234/067`).

`build_tiles` yields every tile and bundle of a tree in one pass, keeping only the right
edge (at most 255 hashes a level); `TileReader` computes the root and RFC 9162 proofs for
any size up to the one the tiles were published for, from a `fetch(path) -> bytes` it is
handed. Tiles fetched are parsed strictly: a tile of the wrong length is refused.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from joulepool.errors import InvalidInput
from joulepool.ledger.merkle import (
    EMPTY_ROOT,
    HASH_SIZE,
    MAX_TREE_SIZE,
    MerkleRefused,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    range_hash,
)

TILE_HEIGHT: Final = 8
TILE_WIDTH: Final = 1 << TILE_HEIGHT
MAX_LEVEL: Final = 63
MAX_ENTRY_BYTES: Final = 0xFFFF
# uint64 indices take at most 20 digits: seven groups of three.
_MAX_GROUPS: Final = 7
_MAX_PATH: Final = 64
_PATH: Final = re.compile(r"tile/(entries|[0-9]+)/((?:x[0-9]{3}/)*[0-9]{3})(?:\.p/([0-9]+))?")

Fetch = Callable[[str], bytes]
"""Returns the bytes stored at a tile path; raises LookupError or OSError when absent."""


class TileRefused(InvalidInput):
    """A tile path, tile, entry bundle or tile read outside c2sp.org/tlog-tiles."""

    code = "tile_refused"


class TileMissing(TileRefused):
    """A tile or entry bundle the computation needs could not be fetched."""

    code = "tile_missing"


class EntryTooLarge(TileRefused):
    """A leaf longer than an entry bundle's uint16 length can say (c2sp.org/tlog-tiles)."""

    code = "entry_too_large"

    def __init__(self, index: int, length: int) -> None:
        super().__init__(
            "entry", f"entry {index} is {length} bytes; a tile entry is at most {MAX_ENTRY_BYTES}"
        )
        self.index = index
        self.length = length


def encode_index(index: int) -> str:
    """A tile index as path elements, e.g. 1234067 → `x001/x234/067` (c2sp.org/tlog-tiles)."""
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index <= MAX_TREE_SIZE:
        raise TileRefused("index", "must be an integer in [0, 2**64 - 1]")
    digits = str(index)
    digits = "0" * (-len(digits) % 3) + digits
    groups = [digits[i : i + 3] for i in range(0, len(digits), 3)]
    return "/".join([*("x" + g for g in groups[:-1]), groups[-1]])


@dataclass(frozen=True)
class Tile:
    """A tile's coordinates: its level (None for an entry bundle), index and width
    (1..256, 256 being a full tile) (c2sp.org/tlog-tiles)."""

    level: int | None
    index: int
    width: int = TILE_WIDTH

    def __post_init__(self) -> None:
        if self.level is not None and (
            isinstance(self.level, bool)
            or not isinstance(self.level, int)
            or not 0 <= self.level <= MAX_LEVEL
        ):
            raise TileRefused("level", f"must be an integer in [0, {MAX_LEVEL}]")
        encode_index(self.index)
        if isinstance(self.width, bool) or not isinstance(self.width, int):
            raise TileRefused("width", "must be an integer")
        if not 1 <= self.width <= TILE_WIDTH:
            raise TileRefused("width", f"must be in [1, {TILE_WIDTH}]")

    def path(self) -> str:
        """`tile/<L>/<N>[.p/<W>]` or `tile/entries/<N>[.p/<W>]` (c2sp.org/tlog-tiles)."""
        level = "entries" if self.level is None else str(self.level)
        partial = "" if self.width == TILE_WIDTH else f".p/{self.width}"
        return f"tile/{level}/{encode_index(self.index)}{partial}"

    @classmethod
    def parse(cls, path: str) -> Tile:
        """Read a tile path strictly: decimal without leading zeroes, canonical index
        groups, a partial width in 1..255 (c2sp.org/tlog-tiles)."""
        if not isinstance(path, str) or len(path) > _MAX_PATH:
            raise TileRefused("path", "is not a tile path")
        match = _PATH.fullmatch(path)
        if match is None:
            raise TileRefused("path", f"{path!r} is not tile/<L>/<N>[.p/<W>]")
        level_text, index_text, width_text = match.groups()
        level: int | None = None
        if level_text != "entries":
            if len(level_text) > 2 or (len(level_text) > 1 and level_text[0] == "0"):
                raise TileRefused("level", f"{level_text!r} is not a level in [0, {MAX_LEVEL}]")
            level = int(level_text)
            if level > MAX_LEVEL:
                raise TileRefused("level", f"{level} is above {MAX_LEVEL}")
        groups = index_text.split("/")
        if len(groups) > _MAX_GROUPS:
            raise TileRefused("index", "is larger than 2**64 - 1")
        index = int("".join(g.lstrip("x") for g in groups))
        if index > MAX_TREE_SIZE or encode_index(index) != index_text:
            raise TileRefused("index", f"{index_text!r} is not the canonical encoding")
        width = TILE_WIDTH
        if width_text is not None:
            if len(width_text) > 3 or width_text[0] == "0":
                raise TileRefused("width", f"{width_text!r} is not a partial width in [1, 255]")
            width = int(width_text)
            if width >= TILE_WIDTH:
                raise TileRefused("width", f"{width} is not a partial width in [1, 255]")
        return cls(level, index, width)


def tile_width(size: int, level: int, index: int) -> int:
    """How many hashes tile `index` of `level` holds in a tree of `size` leaves: 256 when
    full, the partial width at the right edge, 0 where it does not exist
    (c2sp.org/tlog-tiles)."""
    entries = size >> (TILE_HEIGHT * level)
    full = entries >> TILE_HEIGHT
    if index < full:
        return TILE_WIDTH
    if index == full:
        return entries % TILE_WIDTH
    return 0


def build_entry_bundle(entries: Iterable[bytes], first: int = 0) -> bytes:
    """An entry bundle: each entry as its big-endian uint16 length and bytes; `first` is
    the first entry's index, for the error (c2sp.org/tlog-tiles, Entry bundles)."""
    out = bytearray()
    for i, entry in enumerate(entries):
        if len(entry) > MAX_ENTRY_BYTES:
            raise EntryTooLarge(first + i, len(entry))
        out += len(entry).to_bytes(2, "big")
        out += entry
    return bytes(out)


def parse_entry_bundle(data: bytes, width: int = TILE_WIDTH) -> list[bytes]:
    """Exactly `width` entries from a bundle, nothing left over (c2sp.org/tlog-tiles)."""
    if not 1 <= width <= TILE_WIDTH:
        raise TileRefused("width", f"must be in [1, {TILE_WIDTH}]")
    if len(data) > width * (2 + MAX_ENTRY_BYTES):
        raise TileRefused("entry bundle", "is longer than its entries can be")
    entries: list[bytes] = []
    at = 0
    while at < len(data):
        if len(entries) == width:
            raise TileRefused("entry bundle", f"has bytes after its {width} entries")
        if at + 2 > len(data):
            raise TileRefused("entry bundle", f"entry {len(entries)}'s length is cut off")
        length = int.from_bytes(data[at : at + 2], "big")
        at += 2
        if at + length > len(data):
            raise TileRefused("entry bundle", f"entry {len(entries)} is cut off")
        entries.append(bytes(data[at : at + length]))
        at += length
    if len(entries) != width:
        raise TileRefused("entry bundle", f"has {len(entries)} entries, not {width}")
    return entries


def parse_hash_tile(data: bytes, width: int = TILE_WIDTH) -> list[bytes]:
    """The `width` hashes of a hash tile, refused unless exactly 32·width bytes
    (c2sp.org/tlog-tiles)."""
    if not 1 <= width <= TILE_WIDTH:
        raise TileRefused("width", f"must be in [1, {TILE_WIDTH}]")
    if len(data) != width * HASH_SIZE:
        raise TileRefused("tile", f"is {len(data)} bytes; {width} hashes are {width * HASH_SIZE}")
    return [bytes(data[i : i + HASH_SIZE]) for i in range(0, len(data), HASH_SIZE)]


def fold(hashes: list[bytes]) -> bytes:
    """The root over a power-of-two run of equal complete subtrees (RFC 9162 §2.1.1)."""
    level = hashes
    while len(level) > 1:
        level = [node_hash(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


def subtree_in_tile(start: int, end: int, size: int) -> tuple[int, int, int, int]:
    """Where the complete subtree [start, end) of a tree of `size` leaves lies in the tiles
    (c2sp.org/tlog-tiles, RFC 9162 §2.1.1): (level, tile index, its first hash there, how
    many hashes fold to it), since a subtree between tile levels is a power-of-two run of one
    tile's hashes. `MerkleRefused` for a range that is no complete subtree of the tree."""
    width = end - start
    if width <= 0 or width & (width - 1) or start % width or end > size:
        raise MerkleRefused("range", f"[{start}, {end}) is not a complete subtree here")
    height = width.bit_length() - 1
    level, rest = divmod(height, TILE_HEIGHT)
    index, at = divmod(start >> (TILE_HEIGHT * level), TILE_WIDTH)
    return level, index, at, 1 << rest


def build_tiles(leaves: Iterable[bytes]) -> Iterator[tuple[str, bytes]]:
    """Every (path, bytes) of the tree over `leaves`: full entry bundles and tiles as they
    fill, then the right edge's partial ones, bundle first and levels upward
    (c2sp.org/tlog-tiles). The same leaves always give the same sequence."""
    pending: list[list[bytes]] = [[]]
    full: list[int] = [0]
    bundle: list[bytes] = []
    bundles = 0
    for i, leaf in enumerate(leaves):
        if len(leaf) > MAX_ENTRY_BYTES:
            raise EntryTooLarge(i, len(leaf))
        bundle.append(leaf)
        pending[0].append(leaf_hash(leaf))
        if len(bundle) == TILE_WIDTH:
            yield Tile(None, bundles).path(), build_entry_bundle(bundle, i + 1 - TILE_WIDTH)
            bundle = []
            bundles += 1
        level = 0
        while len(pending[level]) == TILE_WIDTH:
            hashes = pending[level]
            yield Tile(level, full[level]).path(), b"".join(hashes)
            pending[level] = []
            full[level] += 1
            if level + 1 == len(pending):
                pending.append([])
                full.append(0)
            pending[level + 1].append(fold(hashes))
            level += 1
    if bundle:
        yield (
            Tile(None, bundles, len(bundle)).path(),
            build_entry_bundle(bundle, bundles * TILE_WIDTH),
        )
    for level, hashes in enumerate(pending):
        if hashes:
            yield Tile(level, full[level], len(hashes)).path(), b"".join(hashes)


class TileReader:
    """The tree of `size` leaves read from its tiles through `fetch` (c2sp.org/tlog-tiles):
    complete subtree hashes, the root and RFC 9162 §2.1.3.1 / §2.1.4.1 proofs at any size
    up to `size`, and the entries. Tiles are fetched once and parsed strictly; nothing
    read is trusted until a proof built from it verifies against a signed checkpoint."""

    def __init__(self, fetch: Fetch, size: int) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= MAX_TREE_SIZE:
            raise TileRefused("size", "must be an integer in [0, 2**64 - 1]")
        self.fetch = fetch
        self.size = size
        self._tiles: dict[tuple[int | None, int], list[bytes]] = {}

    def _read(self, level: int | None, index: int) -> list[bytes]:
        cached = self._tiles.get((level, index))
        if cached is not None:
            return cached
        width = tile_width(self.size, 0 if level is None else level, index)
        if width == 0:
            raise TileRefused("index", f"tile {index} is past a tree of {self.size} leaves")
        path = Tile(level, index, width).path()
        try:
            data, got = self.fetch(path), width
        except (LookupError, OSError) as exc:
            if width == TILE_WIDTH:
                raise TileMissing("tile", f"{path} could not be fetched ({exc})") from None
            # A log may delete a partial tile once the full one exists; the full tile's
            # first hashes are the partial's (c2sp.org/tlog-tiles).
            path = Tile(level, index).path()
            try:
                data, got = self.fetch(path), TILE_WIDTH
            except (LookupError, OSError):
                raise TileMissing(
                    "tile", f"{path} (nor its partial) could not be fetched"
                ) from None
        if not isinstance(data, bytes | bytearray):
            raise TileRefused("tile", f"{path}: fetch returned no bytes")
        try:
            parsed = parse_entry_bundle(data, got) if level is None else parse_hash_tile(data, got)
        except TileRefused as exc:
            raise TileRefused(exc.field, f"{path}: {exc.detail}") from None
        self._tiles[(level, index)] = parsed[:width]
        return parsed[:width]

    def subtree(self, start: int, end: int) -> bytes:
        """The hash of the complete subtree [start, end), from one tile (RFC 9162 §2.1.1)."""
        level, index, at, count = subtree_in_tile(start, end, self.size)
        return fold(self._read(level, index)[at : at + count])

    def _check_size(self, field: str, size: int) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= self.size:
            raise TileRefused(field, f"must be an integer in [0, {self.size}], the tiles' size")

    def root(self, size: int | None = None) -> bytes:
        """MTH of the first `size` leaves (default all) (RFC 9162 §2.1.1)."""
        size = self.size if size is None else size
        self._check_size("size", size)
        if size == 0:
            return EMPTY_ROOT
        return range_hash(0, size, self.subtree)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """PATH(index, D[size]) from tiles (RFC 9162 §2.1.3.1)."""
        size = self.size if size is None else size
        self._check_size("size", size)
        return inclusion_proof(index, size, self.subtree)

    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[bytes]:
        """PROOF(old_size, D[new_size]) from tiles (RFC 9162 §2.1.4.1)."""
        new_size = self.size if new_size is None else new_size
        self._check_size("new_size", new_size)
        return consistency_proof(old_size, new_size, self.subtree)

    def leaf_hash(self, index: int) -> bytes:
        """Leaf `index`'s hash, from its level-0 tile (c2sp.org/tlog-tiles)."""
        return self.subtree(index, index + 1)

    def entry(self, index: int) -> bytes:
        """Leaf `index`'s bytes, from its entry bundle (c2sp.org/tlog-tiles)."""
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self.size:
            raise TileRefused("index", f"must be an integer in [0, {self.size})")
        return self._read(None, index >> TILE_HEIGHT)[index % TILE_WIDTH]
