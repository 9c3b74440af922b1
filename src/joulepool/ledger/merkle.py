"""The ledger's Merkle tree: RFC 9162 §2.1 (the RFC 6962 tree, SHA-256), DESIGN.md §8.

Leaf `i` is entry `i`'s exact bytes; its hash is SHA-256(0x00 || leaf), an interior node's
SHA-256(0x01 || left || right), and the tree over n > 1 leaves splits at k, the largest
power of two below n. The empty tree's root is SHA-256 of the empty string.

Three parts, none of which keeps the leaves:

- `CompactRange`: the roots of the perfect subtrees that make up a tree of any size (one
  per set bit of the size, so O(log n) hashes), appended to one leaf hash at a time and
  giving the root at any moment. Its state is its size and those hashes, to be kept in a
  snapshot and checked against a rebuild from the leaves.
- proof generation, RFC 9162 §2.1.3.1 and §2.1.4.1, over a `SubtreeHash`: any callable
  that returns the hash of a complete subtree (a range [start, end) whose length is a
  power of two and whose start is a multiple of it). A tile set, a table of stored nodes
  or a recomputation (`HashLevels`) can back it; nothing here assumes which.
- proof verification, RFC 9162 §2.1.3.2 and §2.1.4.2, transcribed step by step.

Arguments outside the RFC's domain (a negative size, an index at or past the size, an old
size of 0 or above the new one, a hash that is not 32 bytes) are refused with a
`MerkleRefused` naming the argument; a proof that simply does not verify is `False`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from typing import Final

from joulepool.errors import InvalidInput

HASH_SIZE: Final = 32
EMPTY_ROOT: Final = hashlib.sha256(b"").digest()
# Tree sizes and indices are uint64 wherever the tree is written down (tiles, checkpoints).
MAX_TREE_SIZE: Final = 2**64 - 1

SubtreeHash = Callable[[int, int], bytes]
"""The hash of the complete subtree [start, end): end - start a power of two dividing start."""


class MerkleRefused(InvalidInput):
    """A tree size, leaf index, hash or compact-range state outside RFC 9162 §2.1's domain."""

    code = "merkle_refused"


def leaf_hash(leaf: bytes) -> bytes:
    """The hash of one leaf, SHA-256(0x00 || leaf) (RFC 9162 §2.1.1)."""
    return hashlib.sha256(b"\x00" + leaf).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """The hash of an interior node, SHA-256(0x01 || left || right) (RFC 9162 §2.1.1)."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """k, the largest power of two smaller than n (n > 1), where RFC 9162 §2.1.1 splits."""
    return 1 << ((n - 1).bit_length() - 1)


def _check_size(field: str, size: int, *, least: int = 0) -> None:
    if isinstance(size, bool) or not isinstance(size, int):
        raise MerkleRefused(field, f"must be an integer, not {type(size).__name__}")
    if size < least or size > MAX_TREE_SIZE:
        raise MerkleRefused(field, f"{size} is outside [{least}, 2**64 - 1]")


def _check_hash(field: str, value: bytes) -> None:
    if not isinstance(value, bytes | bytearray) or len(value) != HASH_SIZE:
        raise MerkleRefused(field, f"must be a {HASH_SIZE}-byte SHA-256 hash")


def root_of_hashes(leaf_hashes: Sequence[bytes]) -> bytes:
    """The Merkle Tree Hash MTH(D[n]) of leaves given by their hashes (RFC 9162 §2.1.1)."""
    return CompactRange.from_hashes(leaf_hashes).root()


def root_of(leaves: Iterable[bytes]) -> bytes:
    """The Merkle Tree Hash MTH(D[n]) of a list of leaves (RFC 9162 §2.1.1)."""
    return CompactRange.from_leaves(leaves).root()


class CompactRange:
    """A tree of `size` leaves as the roots of its perfect subtrees, largest first.

    Implements RFC 9162 §2.1.1's MTH incrementally: the subtrees are those of the binary
    decomposition of `size` (leaves [0, 2^a), then the next 2^b, ... with a > b > ...), and
    the root folds them right to left, which is exactly where §2.1.1 splits.
    """

    __slots__ = ("_hashes", "_size")

    def __init__(self) -> None:
        self._size = 0
        self._hashes: list[bytes] = []

    @property
    def size(self) -> int:
        """How many leaves the range covers: the tree size n of RFC 9162 §2.1.1."""
        return self._size

    @property
    def hashes(self) -> tuple[bytes, ...]:
        """The perfect subtrees' roots (RFC 9162 §2.1.1), largest (leftmost) first: one per
        set bit of the size."""
        return tuple(self._hashes)

    def append_hash(self, leaf_hash_: bytes) -> None:
        """Add the next leaf by its hash (RFC 9162 §2.1.1)."""
        _check_hash("leaf_hash", leaf_hash_)
        if self._size == MAX_TREE_SIZE:
            raise MerkleRefused("size", "the tree is full at 2**64 - 1 leaves")
        merged = bytes(leaf_hash_)
        # Each trailing 1-bit of the old size is a subtree of the new leaf's height waiting
        # for a right sibling: the new leaf completes them one after another.
        carry = self._size
        while carry & 1:
            merged = node_hash(self._hashes.pop(), merged)
            carry >>= 1
        self._hashes.append(merged)
        self._size += 1

    def append(self, leaf: bytes) -> None:
        """Add the next leaf by its bytes (RFC 9162 §2.1.1)."""
        # A live pool calls this for every entry it seals, under its commit lock: the hashes
        # are inlined, with no check a hash of our own making could fail.
        if self._size == MAX_TREE_SIZE:
            raise MerkleRefused("size", "the tree is full at 2**64 - 1 leaves")
        sha256 = hashlib.sha256
        merged = sha256(b"\x00" + leaf).digest()
        hashes = self._hashes
        carry = self._size
        while carry & 1:
            merged = sha256(b"\x01" + hashes.pop() + merged).digest()
            carry >>= 1
        hashes.append(merged)
        self._size += 1

    def rewind(self, state: tuple[int, tuple[bytes, ...]]) -> None:
        """Go back to an earlier `state()` of this same range: the leaves appended since are
        taken back (a failed append, DESIGN.md §5). The hashes are the range's own, so no
        check is needed; a state of more leaves than it has is refused."""
        size, hashes = state
        if size > self._size:
            raise MerkleRefused("size", f"{size} leaves is not an earlier state of {self._size}")
        self._size = size
        self._hashes = list(hashes)

    def root(self) -> bytes:
        """MTH of the leaves so far; SHA-256 of the empty string for none (RFC 9162 §2.1.1)."""
        if not self._hashes:
            return EMPTY_ROOT
        root = self._hashes[-1]
        for left in reversed(self._hashes[:-1]):
            root = node_hash(left, root)
        return root

    def copy(self) -> CompactRange:
        """An independent range in the same state (RFC 9162 §2.1.1 subtrees)."""
        return CompactRange.from_state(self._size, self._hashes)

    def state(self) -> tuple[int, tuple[bytes, ...]]:
        """(size, hashes), the RFC 9162 §2.1.1 subtree roots: what a snapshot keeps;
        `from_state` reads it back."""
        return self._size, tuple(self._hashes)

    @classmethod
    def from_state(cls, size: int, hashes: Sequence[bytes]) -> CompactRange:
        """A range from a kept state, refused unless it has one 32-byte hash per set bit of
        the size, as RFC 9162 §2.1.1's decomposition has."""
        _check_size("size", size)
        if isinstance(hashes, str | bytes) or len(hashes) != size.bit_count():
            raise MerkleRefused(
                "hashes",
                f"a tree of {size} leaves has {size.bit_count()} perfect subtrees, "
                f"not {len(hashes)}",
            )
        for i, h in enumerate(hashes):
            _check_hash(f"hashes[{i}]", h)
        out = cls()
        out._size = size
        out._hashes = [bytes(h) for h in hashes]
        return out

    @classmethod
    def from_hashes(cls, leaf_hashes: Iterable[bytes]) -> CompactRange:
        """The range over these leaf hashes, appended in order (RFC 9162 §2.1.1)."""
        out = cls()
        for h in leaf_hashes:
            out.append_hash(h)
        return out

    @classmethod
    def from_leaves(cls, leaves: Iterable[bytes]) -> CompactRange:
        """The range over these leaves, appended in order (RFC 9162 §2.1.1)."""
        return cls.from_hashes(leaf_hash(leaf) for leaf in leaves)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CompactRange):
            return NotImplemented
        return self.state() == other.state()

    # It grows in place, so it is never a dict key.
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"CompactRange(size={self._size}, root={self.root().hex()})"


class HashLevels:
    """Every complete subtree's hash over a list of leaf hashes, kept level by level.

    A `SubtreeHash` by recomputation (RFC 9162 §2.1.1): level h holds the hash of each
    aligned run of 2^h leaves. About 2n hashes; for tests, tile building and small trees.
    """

    def __init__(self, leaf_hashes: Sequence[bytes]) -> None:
        level = [bytes(h) for h in leaf_hashes]
        for i, h in enumerate(level):
            _check_hash(f"leaf_hashes[{i}]", h)
        self.levels: list[list[bytes]] = [level]
        while len(level) > 1:
            level = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
            self.levels.append(level)

    @classmethod
    def of_leaves(cls, leaves: Iterable[bytes]) -> HashLevels:
        """The levels over these leaves' hashes (RFC 9162 §2.1.1)."""
        return cls([leaf_hash(leaf) for leaf in leaves])

    @property
    def size(self) -> int:
        """How many leaves: the tree size n of RFC 9162 §2.1.1."""
        return len(self.levels[0])

    def __call__(self, start: int, end: int) -> bytes:
        """The hash of the complete subtree [start, end) (RFC 9162 §2.1.1)."""
        width = end - start
        if width <= 0 or width & (width - 1) or start % width or end > self.size:
            raise MerkleRefused("range", f"[{start}, {end}) is not a complete subtree here")
        return self.levels[width.bit_length() - 1][start // width]


def range_hash(start: int, end: int, subtree: SubtreeHash) -> bytes:
    """MTH(D[start:end]) for a range that starts on a boundary of its own split (RFC 9162
    §2.1.1), from complete subtrees only: the ranges proofs need always decompose into
    aligned perfect subtrees, largest first, folded right to left."""
    if end - start <= 0:
        return EMPTY_ROOT
    parts: list[bytes] = []
    at = start
    while at < end:
        width = 1 << ((end - at).bit_length() - 1)
        if at % width:
            raise MerkleRefused("range", f"[{start}, {end}) does not split into complete subtrees")
        parts.append(subtree(at, at + width))
        at += width
    root = parts[-1]
    for left in reversed(parts[:-1]):
        root = node_hash(left, root)
    return root


def inclusion_proof(index: int, size: int, subtree: SubtreeHash) -> list[bytes]:
    """PATH(index, D[size]), the inclusion proof of leaf `index` (RFC 9162 §2.1.3.1)."""
    _check_size("size", size, least=1)
    _check_size("index", index)
    if index >= size:
        raise MerkleRefused("index", f"leaf {index} is not in a tree of {size} leaves")
    proof: list[bytes] = []
    start, end, m = 0, size, index
    # The recursion of §2.1.3.1 walks down from the root; the proof lists siblings bottom
    # up, so they are gathered top down and reversed.
    while end - start > 1:
        k = _split(end - start)
        if m < k:
            proof.append(range_hash(start + k, end, subtree))
            end = start + k
        else:
            proof.append(range_hash(start, start + k, subtree))
            start, m = start + k, m - k
    proof.reverse()
    return proof


def consistency_proof(old_size: int, new_size: int, subtree: SubtreeHash) -> list[bytes]:
    """PROOF(old_size, D[new_size]) (RFC 9162 §2.1.4.1); empty when the sizes are equal.

    An old size of 0 is refused: §2.1.4 defines the proof for 0 < m only.
    """
    _check_size("new_size", new_size, least=1)
    _check_size("old_size", old_size, least=1)
    if old_size > new_size:
        raise MerkleRefused("old_size", f"{old_size} is larger than the new size {new_size}")
    if old_size == new_size:
        return []
    proof: list[bytes] = []
    start, end, m, whole = 0, new_size, old_size, True
    # SUBPROOF(m, D[start:end], b), iteratively; nodes are gathered top down and reversed.
    while True:
        n = end - start
        if m == n:
            if not whole:
                proof.append(range_hash(start, end, subtree))
            break
        k = _split(n)
        if m <= k:
            proof.append(range_hash(start + k, end, subtree))
            end = start + k
        else:
            proof.append(range_hash(start, start + k, subtree))
            start, m, whole = start + k, m - k, False
    proof.reverse()
    return proof


def _check_proof(proof: Sequence[bytes]) -> None:
    if isinstance(proof, str | bytes):
        raise MerkleRefused("proof", "must be a list of hashes")
    for i, p in enumerate(proof):
        _check_hash(f"proof[{i}]", p)


def verify_inclusion(
    leaf_hash_: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> bool:
    """Whether `proof` shows leaf `index` with hash `leaf_hash_` in the tree of `size`
    leaves whose root is `root` (RFC 9162 §2.1.3.2, step by step)."""
    _check_hash("leaf_hash", leaf_hash_)
    _check_hash("root", root)
    _check_proof(proof)
    _check_size("size", size, least=1)
    _check_size("index", index)
    # Step 1.
    if index >= size:
        raise MerkleRefused("index", f"leaf {index} is not in a tree of {size} leaves")
    # Steps 2 and 3.
    fn, sn = index, size - 1
    r = bytes(leaf_hash_)
    # Step 4.
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    # Step 5.
    return sn == 0 and r == root


def verify_consistency(
    old_size: int,
    new_size: int,
    old_root: bytes,
    new_root: bytes,
    proof: Sequence[bytes],
) -> bool:
    """Whether `proof` shows the tree (old_size, old_root) is a prefix of (new_size,
    new_root) (RFC 9162 §2.1.4.2, step by step).

    Equal sizes verify with an empty proof and equal roots (no proof is needed, and a
    non-empty one is not the one §2.1.4.1 makes). An old size of 0 is refused, as §2.1.4
    defines consistency for 0 < old_size only.
    """
    _check_hash("old_root", old_root)
    _check_hash("new_root", new_root)
    _check_proof(proof)
    _check_size("new_size", new_size, least=1)
    _check_size("old_size", old_size, least=1)
    if old_size > new_size:
        raise MerkleRefused("old_size", f"{old_size} is larger than the new size {new_size}")
    if old_size == new_size:
        return not proof and old_root == new_root
    # Step 1.
    if not proof:
        return False
    path = list(proof)
    # Step 2.
    if old_size & (old_size - 1) == 0:
        path.insert(0, bytes(old_root))
    # Steps 3 and 4.
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    # Step 5.
    fr = sr = path[0]
    # Step 6.
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    # Step 7.
    return fr == old_root and sr == new_root and sn == 0
