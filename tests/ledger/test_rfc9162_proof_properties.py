"""RFC 9162 §2.1.3 and §2.1.4, as properties over trees of every shape: each inclusion and
consistency proof generated verifies (§2.1.3.2, §2.1.4.2), flipping any bit of a proof, a
hash or a root makes it fail, and a compact range's root is the recomputed root at every
size, however it was restored on the way."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from joulepool.ledger.merkle import (
    CompactRange,
    HashLevels,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    range_hash,
    verify_consistency,
    verify_inclusion,
)

PROPERTY = settings(max_examples=150, deadline=None, derandomize=True, database=None)

leaves_st = st.lists(st.binary(max_size=12), min_size=1, max_size=80)


def recursive_root(hashes: list[bytes]) -> bytes:
    """MTH as RFC 9162 §2.1.1 writes it, recursively: the oracle for everything else."""
    if len(hashes) == 1:
        return hashes[0]
    k = 1 << ((len(hashes) - 1).bit_length() - 1)
    return node_hash(recursive_root(hashes[:k]), recursive_root(hashes[k:]))


def flip(data: bytes, bit: int) -> bytes:
    at = (bit // 8) % len(data)
    return data[:at] + bytes([data[at] ^ (1 << (bit % 8))]) + data[at + 1 :]


@PROPERTY
@given(leaves=leaves_st)
def test_the_compact_range_root_is_the_recursive_root_at_every_size(leaves: list[bytes]) -> None:
    hashes = [leaf_hash(x) for x in leaves]
    cr = CompactRange()
    for n, h in enumerate(hashes, 1):
        cr.append_hash(h)
        assert cr.root() == recursive_root(hashes[:n])


@PROPERTY
@given(leaves=leaves_st, cut=st.integers(min_value=0))
def test_a_range_restored_from_its_state_grows_like_one_never_stopped(
    leaves: list[bytes], cut: int
) -> None:
    cut %= len(leaves) + 1
    first = CompactRange.from_leaves(leaves[:cut])
    restored = CompactRange.from_state(*first.state())
    for leaf in leaves[cut:]:
        restored.append(leaf)
    assert restored == CompactRange.from_leaves(leaves)
    assert restored.root() == recursive_root([leaf_hash(x) for x in leaves])


@PROPERTY
@given(leaves=leaves_st, data=st.data())
def test_every_inclusion_proof_verifies_and_any_flipped_bit_fails(
    leaves: list[bytes], data: st.DataObject
) -> None:
    size = data.draw(st.integers(min_value=1, max_value=len(leaves)), label="size")
    index = data.draw(st.integers(min_value=0, max_value=size - 1), label="index")
    levels = HashLevels.of_leaves(leaves)
    root = recursive_root(levels.levels[0][:size])
    lh = leaf_hash(leaves[index])
    proof = inclusion_proof(index, size, levels)
    assert verify_inclusion(lh, index, size, proof, root)
    bit = data.draw(st.integers(min_value=0, max_value=255), label="bit")
    assert not verify_inclusion(flip(lh, bit), index, size, proof, root)
    assert not verify_inclusion(lh, index, size, proof, flip(root, bit))
    if proof:
        at = data.draw(st.integers(min_value=0, max_value=len(proof) - 1), label="at")
        tampered = [*proof[:at], flip(proof[at], bit), *proof[at + 1 :]]
        assert not verify_inclusion(lh, index, size, tampered, root)
        assert not verify_inclusion(lh, index, size, proof[:-1], root)
    assert not verify_inclusion(lh, index, size, [*proof, root], root)


@PROPERTY
@given(leaves=leaves_st, data=st.data())
def test_every_consistency_proof_verifies_and_any_flipped_bit_fails(
    leaves: list[bytes], data: st.DataObject
) -> None:
    new = data.draw(st.integers(min_value=1, max_value=len(leaves)), label="new")
    old = data.draw(st.integers(min_value=1, max_value=new), label="old")
    levels = HashLevels.of_leaves(leaves)
    hashes = levels.levels[0]
    old_root, new_root = recursive_root(hashes[:old]), recursive_root(hashes[:new])
    proof = consistency_proof(old, new, levels)
    assert verify_consistency(old, new, old_root, new_root, proof)
    bit = data.draw(st.integers(min_value=0, max_value=255), label="bit")
    assert not verify_consistency(old, new, flip(old_root, bit), new_root, proof)
    assert not verify_consistency(old, new, old_root, flip(new_root, bit), proof)
    if proof:
        at = data.draw(st.integers(min_value=0, max_value=len(proof) - 1), label="at")
        tampered = [*proof[:at], flip(proof[at], bit), *proof[at + 1 :]]
        assert not verify_consistency(old, new, old_root, new_root, tampered)
        assert not verify_consistency(old, new, old_root, new_root, proof[:-1])
        assert not verify_consistency(old, new, old_root, new_root, [*proof, new_root])


@PROPERTY
@given(leaves=leaves_st, data=st.data())
def test_a_rewritten_leaf_breaks_consistency_with_the_old_head(
    leaves: list[bytes], data: st.DataObject
) -> None:
    new = data.draw(st.integers(min_value=2, max_value=max(2, len(leaves))), label="new")
    leaves = (leaves * 2)[:new] if len(leaves) < new else leaves
    old = data.draw(st.integers(min_value=1, max_value=new - 1), label="old")
    victim = data.draw(st.integers(min_value=0, max_value=old - 1), label="victim")
    honest = [leaf_hash(x) for x in leaves[:new]]
    old_root = recursive_root(honest[:old])
    forged = list(leaves[:new])
    forged[victim] = forged[victim] + b"!"
    levels = HashLevels.of_leaves(forged)
    proof = consistency_proof(old, new, levels)
    assert not verify_consistency(old, new, old_root, range_hash(0, new, levels), proof)
