"""c2sp.org/tlog-tiles: paths written and read strictly, the tiles of a tree of every size
around the tile boundaries (full tiles, right-edge partials, level-1 and level-2 tiles),
entry bundles bounded by their uint16 lengths, and roots and RFC 9162 proofs computed from
fetched tiles agreeing with the tree itself; missing, short or tampered tiles are refused
or fail to verify."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joulepool.ledger.merkle import (
    EMPTY_ROOT,
    CompactRange,
    HashLevels,
    MerkleRefused,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    root_of,
    verify_consistency,
    verify_inclusion,
)
from joulepool.ledger.sequence import LONGEST_SEALED
from joulepool.ledger.tiles import (
    MAX_ENTRY_BYTES,
    EntryTooLarge,
    Tile,
    TileMissing,
    TileReader,
    TileRefused,
    build_entry_bundle,
    build_tiles,
    encode_index,
    parse_entry_bundle,
    parse_hash_tile,
    tile_width,
)


def leaves_of(n: int) -> list[bytes]:
    return [i.to_bytes(4, "big") * (i % 4) for i in range(n)]


@pytest.mark.parametrize(
    ("index", "encoded"),
    [
        (0, "000"),
        (7, "007"),
        (999, "999"),
        (1000, "x001/000"),
        (1234067, "x001/x234/067"),
        (2**64 - 1, "x018/x446/x744/x073/x709/x551/615"),
    ],
)
def test_tile_indices_are_written_in_groups_of_three(index: int, encoded: str) -> None:
    assert encode_index(index) == encoded


@pytest.mark.parametrize(
    ("tile", "path"),
    [
        (Tile(0, 0), "tile/0/000"),
        (Tile(1, 1234067, 8), "tile/1/x001/x234/067.p/8"),
        (Tile(63, 5, 255), "tile/63/005.p/255"),
        (Tile(None, 1000), "tile/entries/x001/000"),
        (Tile(None, 3, 1), "tile/entries/003.p/1"),
    ],
)
def test_tile_paths_round_trip(tile: Tile, path: str) -> None:
    assert tile.path() == path
    assert Tile.parse(path) == tile


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("tile/00/000", "level"),
        ("tile/64/000", "level"),
        ("tile/100/000", "level"),
        ("tile/0/0", "path"),
        ("tile/0/1234", "path"),
        ("tile/0/x000/001", "index"),
        ("tile/0/x1/000", "path"),
        ("tile/0/000.p/0", "width"),
        ("tile/0/000.p/01", "width"),
        ("tile/0/000.p/256", "width"),
        ("tile/0/000.p/", "path"),
        ("tile/entries/000.p/300", "width"),
        ("/tile/0/000", "path"),
        ("tile/0/000/", "path"),
        ("tile/-1/000", "path"),
        ("tile/x/000", "path"),
        ("tile/0/x999/x999/x999/x999/x999/x999/999", "index"),
        ("tile/0/x018/x446/x744/x073/x709/x551/616", "index"),
        ("tile/0/" + "x000/" * 30 + "000", "path"),
        ("tile/0/\u0661\u0662\u0663", "path"),
    ],
)
def test_malformed_tile_paths_are_refused_by_name(path: str, field: str) -> None:
    with pytest.raises(TileRefused) as err:
        Tile.parse(path)
    assert err.value.field == field


def test_tile_widths_follow_the_size() -> None:
    assert tile_width(0, 0, 0) == 0
    assert tile_width(1, 0, 0) == 1
    assert tile_width(256, 0, 0) == 256
    assert tile_width(256, 0, 1) == 0
    assert tile_width(256, 1, 0) == 1
    assert tile_width(70000, 0, 273) == 70000 % 256
    assert tile_width(70000, 1, 0) == 256
    assert tile_width(70000, 1, 1) == 70000 // 256 - 256
    assert tile_width(70000, 2, 0) == 1
    assert tile_width(70000, 3, 0) == 0


def expected_paths(size: int) -> set[str]:
    paths = set()
    level: int | None
    for level in [None, *range(4)]:
        for index in range(size // 256 + 1):
            width = tile_width(size, 0 if level is None else level, index)
            if width:
                paths.add(Tile(level, index, width).path())
    return paths


@pytest.mark.parametrize("size", [0, 1, 2, 255, 256, 257, 511, 512, 1000, 65535, 65536, 65793])
def test_a_tree_has_exactly_its_full_and_right_edge_tiles(size: int) -> None:
    leaves = leaves_of(size)
    tiles = dict(build_tiles(leaves))
    assert set(tiles) == expected_paths(size)
    reader = TileReader(tiles.__getitem__, size)
    assert reader.root() == root_of(leaves)
    if size:
        assert reader.entry(size - 1) == leaves[-1]
        assert reader.leaf_hash(0) == leaf_hash(leaves[0])


def test_a_level_one_hash_is_the_root_of_256_leaves() -> None:
    leaves = leaves_of(600)
    tiles = dict(build_tiles(leaves))
    level1 = parse_hash_tile(tiles["tile/1/000.p/2"], 2)
    assert level1 == [root_of(leaves[:256]), root_of(leaves[256:512])]
    assert parse_hash_tile(tiles["tile/0/002.p/88"], 88) == [leaf_hash(x) for x in leaves[512:]]
    assert parse_entry_bundle(tiles["tile/entries/001"]) == leaves[256:512]


def test_building_is_deterministic_and_the_same_from_any_iterable() -> None:
    leaves = leaves_of(1000)
    first = list(build_tiles(leaves))
    assert first == list(build_tiles(iter(leaves)))
    assert first == list(build_tiles(tuple(leaves)))


def test_an_entry_over_65535_bytes_is_refused_naming_its_index() -> None:
    leaves = [b"a", b"b" * MAX_ENTRY_BYTES, b"c" * (MAX_ENTRY_BYTES + 1)]
    with pytest.raises(EntryTooLarge) as err:
        list(build_tiles(leaves))
    assert (err.value.index, err.value.length, err.value.field) == (2, MAX_ENTRY_BYTES + 1, "entry")
    with pytest.raises(EntryTooLarge) as err:
        build_entry_bundle(leaves, first=512)
    assert err.value.index == 514


def test_an_entry_of_65535_bytes_round_trips() -> None:
    bundle = build_entry_bundle([b"", b"z" * MAX_ENTRY_BYTES])
    assert bundle[:4] == b"\x00\x00\xff\xff"
    assert parse_entry_bundle(bundle, 2) == [b"", b"z" * MAX_ENTRY_BYTES]


@pytest.mark.parametrize(
    ("data", "width", "field"),
    [
        (b"\x00", 1, "entry bundle"),
        (b"\x00\x05abc", 1, "entry bundle"),
        (b"\x00\x01a\x00", 1, "entry bundle"),
        (b"\x00\x01a", 2, "entry bundle"),
        (b"\x00\x01a\x00\x01b", 1, "entry bundle"),
        (b"", 1, "entry bundle"),
        (b"\x00\x00", 0, "width"),
        (b"\x00\x00", 257, "width"),
        (b"\x00\x00" * 3, 2, "entry bundle"),
        (b"\xff" * (2 * (2 + MAX_ENTRY_BYTES) + 1), 2, "entry bundle"),
    ],
)
def test_malformed_entry_bundles_are_refused(data: bytes, width: int, field: str) -> None:
    with pytest.raises(TileRefused) as err:
        parse_entry_bundle(data, width)
    assert err.value.field == field


@pytest.mark.parametrize(("length", "width"), [(0, 1), (31, 1), (33, 1), (64, 1), (8192, 255)])
def test_a_hash_tile_of_the_wrong_length_is_refused(length: int, width: int) -> None:
    with pytest.raises(TileRefused):
        parse_hash_tile(b"\0" * length, width)


def test_proofs_from_tiles_equal_proofs_from_the_tree_and_verify() -> None:
    size = 65793
    leaves = leaves_of(size)
    tiles = dict(build_tiles(leaves))
    reader = TileReader(tiles.__getitem__, size)
    levels = HashLevels.of_leaves(leaves)
    for s in [1, 2, 255, 256, 257, 4096, 65535, 65536, 65537, size]:
        root = CompactRange.from_leaves(leaves[:s]).root()
        assert reader.root(s) == root
        for i in sorted({0, s // 2, s - 1}):
            proof = reader.inclusion_proof(i, s)
            assert proof == inclusion_proof(i, s, levels)
            assert verify_inclusion(leaf_hash(leaves[i]), i, s, proof, root)
        proof = reader.consistency_proof(s, size)
        assert proof == consistency_proof(s, size, levels)
        assert verify_consistency(s, size, root, reader.root(), proof)


def test_a_missing_tile_is_named() -> None:
    tiles = dict(build_tiles(leaves_of(300)))
    del tiles["tile/0/001.p/44"]
    reader = TileReader(tiles.__getitem__, 300)
    assert reader.root(256) == root_of(leaves_of(256))
    with pytest.raises(TileMissing, match=r"tile/0/001"):
        reader.inclusion_proof(299)


def test_a_checkpoint_older_than_the_tiles_reads_full_tiles_where_partials_are_gone() -> None:
    leaves = leaves_of(600)
    served = dict(build_tiles(leaves[:300])) | dict(build_tiles(leaves))
    # The log grew from 300 to 600 and deleted the partials whose full tiles now exist.
    for path in ["tile/0/001.p/44", "tile/entries/001.p/44"]:
        del served[path]
    assert "tile/1/000.p/1" in served
    reader = TileReader(served.__getitem__, 300)
    assert reader.root() == root_of(leaves[:300])
    assert reader.entry(299) == leaves[299]
    assert verify_inclusion(
        leaf_hash(leaves[299]), 299, 300, reader.inclusion_proof(299), root_of(leaves[:300])
    )


def test_a_short_tile_is_refused_naming_its_path() -> None:
    tiles = dict(build_tiles(leaves_of(300)))
    tiles["tile/0/001.p/44"] = tiles["tile/0/001.p/44"][:-1]
    with pytest.raises(TileRefused, match=r"tile/0/001\.p/44"):
        TileReader(tiles.__getitem__, 300).root()


def test_a_tampered_tile_gives_proofs_that_fail_against_the_signed_root() -> None:
    leaves = leaves_of(600)
    honest_root = root_of(leaves)
    tiles = dict(build_tiles(leaves))
    tile = bytearray(tiles["tile/0/001"])
    tile[5] ^= 1
    tiles["tile/0/001"] = bytes(tile)
    reader = TileReader(tiles.__getitem__, 600)
    assert reader.root() == honest_root  # the level-1 tile is what the root is read from
    proof = reader.inclusion_proof(400)
    assert not verify_inclusion(leaf_hash(leaves[400]), 400, 600, proof, honest_root)


def test_reading_past_the_tiles_size_is_refused() -> None:
    tiles = dict(build_tiles(leaves_of(10)))
    reader = TileReader(tiles.__getitem__, 10)
    with pytest.raises(TileRefused) as err:
        reader.root(11)
    assert err.value.field == "size"
    with pytest.raises(TileRefused) as err:
        reader.entry(10)
    assert err.value.field == "index"
    with pytest.raises(MerkleRefused) as merr:
        reader.inclusion_proof(10, 10)
    assert merr.value.field == "index"
    assert TileReader(tiles.__getitem__, 0).root() == EMPTY_ROOT


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(size=st.integers(min_value=1, max_value=1200), data=st.data())
def test_any_tree_read_back_from_its_tiles_proves_what_the_tree_proves(
    size: int, data: st.DataObject
) -> None:
    leaves = leaves_of(size)
    tiles = dict(build_tiles(leaves))
    reader = TileReader(tiles.__getitem__, size)
    old = data.draw(st.integers(min_value=1, max_value=size), label="old")
    index = data.draw(st.integers(min_value=0, max_value=old - 1), label="index")
    old_root = root_of(leaves[:old])
    assert reader.root(old) == old_root
    assert verify_inclusion(
        leaf_hash(leaves[index]), index, old, reader.inclusion_proof(index, old), old_root
    )
    assert verify_consistency(
        old, size, old_root, reader.root(), reader.consistency_proof(old, size)
    )
    assert reader.entry(index) == leaves[index]


def test_every_entry_the_ledger_seals_fits_an_entry_bundle() -> None:
    assert LONGEST_SEALED <= MAX_ENTRY_BYTES


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(
    level=st.one_of(st.none(), st.integers(min_value=0, max_value=63)),
    index=st.integers(min_value=0, max_value=2**64 - 1),
    width=st.integers(min_value=1, max_value=256),
)
def test_every_tile_path_reads_back_as_its_tile(level: int | None, index: int, width: int) -> None:
    tile = Tile(level, index, width)
    assert Tile.parse(tile.path()) == tile


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.text(alphabet="tile/entrsx0123456789.p", max_size=40))
def test_arbitrary_paths_read_as_their_one_encoding_or_are_refused(path: str) -> None:
    try:
        tile = Tile.parse(path)
    except TileRefused as exc:
        assert exc.field
    else:
        assert tile.path() == path
