"""Tiles served from what a live log keeps (c2sp.org/tlog-tiles, DESIGN.md §8): every hash
tile and entry bundle `TileIndex` serves is byte for byte the one `build_tiles` writes over
the same leaves, and its subtree hashes give the RFC 9162 proofs of the whole tree."""

from __future__ import annotations

import pytest

from joulepool.ledger.merkle import HashLevels, consistency_proof, inclusion_proof, root_of
from joulepool.ledger.tile_index import TileIndex
from joulepool.ledger.tiles import Tile, build_tiles


def _leaves(n: int) -> list[bytes]:
    return [f"entry {i}".encode() * (1 + i % 5) for i in range(n)]


def _index(leaves: list[bytes], size: int) -> TileIndex:
    index = TileIndex(lambda start, count: leaves[start : min(start + count, size)])
    index.follow(iter(leaves), size)
    return index


@pytest.mark.parametrize("size", [1, 255, 256, 257, 512 + 3, 65536 + 256 * 3 + 7])
def test_every_tile_served_is_the_one_written_for_the_same_leaves(size: int) -> None:
    leaves = _leaves(size)
    index = _index(leaves, size)
    written = dict(build_tiles(leaves))
    for path, data in written.items():
        tile = Tile.parse(path)
        if tile.level is None:
            assert index.entry_bundle(tile.index, tile.width) == data, path
        else:
            assert index.tile(tile.level, tile.index, tile.width) == data, path


def test_a_tile_past_the_tree_or_wider_than_it_is_not_served() -> None:
    leaves = _leaves(300)
    index = _index(leaves, 300)
    full = index.tile(0, 1, 44)  # 300 leaves: 44 in the second level-0 tile
    assert full is not None and index.tile(0, 1, 43) == full[: 43 * 32]
    assert index.tile(0, 1, 45) is None
    assert index.tile(0, 2, 1) is None
    assert index.tile(1, 0, 2) is None
    assert index.tile(2, 0, 1) is None
    assert index.entry_bundle(1, 45) is None


def test_proofs_from_the_index_are_those_of_the_whole_tree() -> None:
    size = 256 * 256 + 300
    leaves = _leaves(size)
    index = _index(leaves, size)
    levels = HashLevels.of_leaves(leaves)
    for n in (1, 256, 257, 65536, size):
        assert index.size >= n
    for leaf, at in ((0, size), (255, size), (65535, size), (size - 1, size), (70, 300)):
        assert inclusion_proof(leaf, at, index) == inclusion_proof(leaf, at, levels)
    for old, new in ((1, size), (256, size), (65536, size), (300, 65600), (size - 1, size)):
        assert consistency_proof(old, new, index) == consistency_proof(old, new, levels)
    from joulepool.ledger.merkle import range_hash

    assert range_hash(0, size, index) == root_of(leaves)
