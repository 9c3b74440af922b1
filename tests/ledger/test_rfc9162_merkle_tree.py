"""RFC 9162 §2.1 / RFC 6962 §2.1, known answers: the roots, inclusion and consistency proofs
of the Certificate Transparency reference tree (the eight leaves of RFC 6962's reference
implementation, as certificate-transparency-go's and transparency-dev/merkle's tests carry
them), the empty tree, and the edges §2.1.3 and §2.1.4 leave to the caller."""

from __future__ import annotations

import hashlib

import pytest

from joulepool.errors import InvalidInput
from joulepool.ledger.merkle import (
    EMPTY_ROOT,
    CompactRange,
    HashLevels,
    MerkleRefused,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    range_hash,
    root_of,
    verify_consistency,
    verify_inclusion,
)

LEAVES = [
    bytes.fromhex(h)
    for h in (
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    )
]
# ROOTS[n] is the root of the first n leaves.
ROOTS = [
    bytes.fromhex(h)
    for h in (
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    )
]
H = bytes.fromhex
INCLUSION = [
    (0, 8, [
        H("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"),
        H("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
        H("6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"),
    ]),
    (5, 8, [
        H("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
        H("ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0"),
        H("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
    ]),
    (0, 1, []),
]  # fmt: skip
CONSISTENCY = [
    (2, 5, [
        H("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
        H("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
    ]),
    (1, 1, []),
]  # fmt: skip

LEVELS = HashLevels.of_leaves(LEAVES)


def test_the_empty_tree_root_is_sha256_of_the_empty_string() -> None:
    assert EMPTY_ROOT == hashlib.sha256(b"").digest() == ROOTS[0]
    assert root_of([]) == EMPTY_ROOT
    assert CompactRange().root() == EMPTY_ROOT


def test_leaf_and_node_hashes_carry_the_0x00_and_0x01_prefixes() -> None:
    assert leaf_hash(b"") == hashlib.sha256(b"\x00").digest() == ROOTS[1]
    a, b = leaf_hash(LEAVES[0]), leaf_hash(LEAVES[1])
    assert node_hash(a, b) == hashlib.sha256(b"\x01" + a + b).digest() == ROOTS[2]


@pytest.mark.parametrize("size", range(9))
def test_roots_of_the_reference_tree(size: int) -> None:
    assert root_of(LEAVES[:size]) == ROOTS[size]
    assert CompactRange.from_leaves(LEAVES[:size]).root() == ROOTS[size]
    if size:
        assert range_hash(0, size, HashLevels.of_leaves(LEAVES[:size])) == ROOTS[size]


@pytest.mark.parametrize(("index", "size", "proof"), INCLUSION)
def test_inclusion_proofs_of_the_reference_tree(index: int, size: int, proof: list[bytes]) -> None:
    levels = HashLevels.of_leaves(LEAVES[:size])
    assert inclusion_proof(index, size, levels) == proof
    assert verify_inclusion(leaf_hash(LEAVES[index]), index, size, proof, ROOTS[size])


@pytest.mark.parametrize(("old", "new", "proof"), CONSISTENCY)
def test_consistency_proofs_of_the_reference_tree(old: int, new: int, proof: list[bytes]) -> None:
    assert consistency_proof(old, new, LEVELS) == proof
    assert verify_consistency(old, new, ROOTS[old], ROOTS[new], proof)


def test_every_proof_of_the_reference_tree_verifies_and_no_other_root_does() -> None:
    for size in range(1, 9):
        for index in range(size):
            proof = inclusion_proof(index, size, LEVELS)
            lh = leaf_hash(LEAVES[index])
            assert verify_inclusion(lh, index, size, proof, ROOTS[size])
            for other in range(1, 9):
                if other != size:
                    assert not verify_inclusion(lh, index, size, proof, ROOTS[other])
        for old in range(1, size + 1):
            proof = consistency_proof(old, size, LEVELS)
            assert verify_consistency(old, size, ROOTS[old], ROOTS[size], proof)
            if old < size:
                assert not verify_consistency(old, size, ROOTS[old - 1], ROOTS[size], proof)


def test_a_proof_at_size_one_is_empty() -> None:
    levels = HashLevels.of_leaves(LEAVES[:1])
    assert inclusion_proof(0, 1, levels) == []
    assert verify_inclusion(leaf_hash(LEAVES[0]), 0, 1, [], ROOTS[1])
    assert not verify_inclusion(leaf_hash(LEAVES[1]), 0, 1, [], ROOTS[1])
    assert not verify_inclusion(leaf_hash(LEAVES[0]), 0, 1, [ROOTS[1]], ROOTS[1])


def test_equal_sizes_are_consistent_with_an_empty_proof_and_equal_roots_only() -> None:
    assert consistency_proof(5, 5, LEVELS) == []
    assert verify_consistency(5, 5, ROOTS[5], ROOTS[5], [])
    assert not verify_consistency(5, 5, ROOTS[5], ROOTS[6], [])
    assert not verify_consistency(5, 5, ROOTS[5], ROOTS[5], [ROOTS[5]])


def test_an_empty_consistency_proof_between_different_sizes_fails() -> None:
    assert not verify_consistency(4, 8, ROOTS[4], ROOTS[8], [])


def test_a_proof_one_hash_too_long_fails() -> None:
    proof = inclusion_proof(5, 8, LEVELS)
    assert not verify_inclusion(leaf_hash(LEAVES[5]), 5, 8, [*proof, ROOTS[1]], ROOTS[8])
    cproof = consistency_proof(3, 8, LEVELS)
    assert not verify_consistency(3, 8, ROOTS[3], ROOTS[8], [*cproof, ROOTS[1]])


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: inclusion_proof(8, 8, LEVELS), "index"),
        (lambda: inclusion_proof(9, 8, LEVELS), "index"),
        (lambda: inclusion_proof(-1, 8, LEVELS), "index"),
        (lambda: inclusion_proof(0, 0, LEVELS), "size"),
        (lambda: consistency_proof(0, 8, LEVELS), "old_size"),
        (lambda: consistency_proof(6, 5, LEVELS), "old_size"),
        (lambda: consistency_proof(1, 0, LEVELS), "new_size"),
        (lambda: verify_inclusion(leaf_hash(b""), 8, 8, [], ROOTS[8]), "index"),
        (lambda: verify_inclusion(leaf_hash(b""), 0, 0, [], ROOTS[0]), "size"),
        (lambda: verify_inclusion(b"short", 0, 1, [], ROOTS[1]), "leaf_hash"),
        (lambda: verify_inclusion(leaf_hash(b""), 0, 2, [b"x" * 31], ROOTS[2]), "proof[0]"),
        (lambda: verify_inclusion(leaf_hash(b""), 0, 2, [ROOTS[1]], b""), "root"),
        (lambda: verify_consistency(0, 8, ROOTS[0], ROOTS[8], []), "old_size"),
        (lambda: verify_consistency(8, 4, ROOTS[8], ROOTS[4], []), "old_size"),
        (lambda: verify_consistency(1, 2, ROOTS[1][:31], ROOTS[2], [ROOTS[1]]), "old_root"),
        (lambda: verify_consistency(1, 2**64, ROOTS[1], ROOTS[2], [ROOTS[1]]), "new_size"),
        (lambda: inclusion_proof(True, 8, LEVELS), "index"),
    ],
)
def test_arguments_outside_the_rfc_domain_are_refused_naming_the_argument(
    call: object, field: str
) -> None:
    assert callable(call)
    with pytest.raises(MerkleRefused) as err:
        call()
    assert err.value.field == field
    assert isinstance(err.value, InvalidInput)


def test_a_compact_range_keeps_one_hash_per_set_bit_of_its_size() -> None:
    cr = CompactRange()
    for n, leaf in enumerate(LEAVES * 5, 1):
        cr.append(leaf)
        assert cr.size == n
        assert len(cr.hashes) == n.bit_count()


def test_a_compact_range_state_round_trips_and_matches_a_rebuild() -> None:
    leaves = [i.to_bytes(2, "big") for i in range(300)]
    live = CompactRange()
    for i, leaf in enumerate(leaves):
        live.append(leaf)
        if i % 37 == 0:
            size, hashes = live.state()
            restored = CompactRange.from_state(size, list(hashes))
            assert restored == live
            assert restored == CompactRange.from_leaves(leaves[: i + 1])
            restored.append(b"more")
            assert restored != live
    assert live.root() == range_hash(0, 300, HashLevels.of_leaves(leaves))


def test_a_copy_grows_on_its_own() -> None:
    cr = CompactRange.from_leaves(LEAVES[:3])
    other = cr.copy()
    other.append(LEAVES[3])
    assert cr.root() == ROOTS[3]
    assert other.root() == ROOTS[4]


@pytest.mark.parametrize(
    ("size", "hashes", "field"),
    [
        (3, [ROOTS[1]], "hashes"),
        (2, [ROOTS[1], ROOTS[2]], "hashes"),
        (1, [b"x" * 31], "hashes[0]"),
        (-1, [], "size"),
        (2**64, [], "size"),
        (1, b"x" * 32, "hashes"),
    ],
)
def test_a_kept_state_that_cannot_be_a_tree_is_refused(
    size: int, hashes: list[bytes], field: str
) -> None:
    with pytest.raises(MerkleRefused) as err:
        CompactRange.from_state(size, hashes)
    assert err.value.field == field


def test_hash_levels_answer_only_complete_subtrees() -> None:
    assert LEVELS(0, 8) == ROOTS[8]
    assert LEVELS(4, 6) == node_hash(leaf_hash(LEAVES[4]), leaf_hash(LEAVES[5]))
    for start, end in [(1, 3), (0, 3), (0, 16), (2, 2)]:
        with pytest.raises(MerkleRefused):
            LEVELS(start, end)
