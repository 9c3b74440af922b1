"""Key rotation: which steward key seals which entries (DESIGN.md §4, "key rotation").

A rotation statement is a COSE_Sign1 of the entry profile, signed by the outgoing key, with
the core `{pool_key_rotation: 1, steward, from_seq, public_key}`: entries from `from_seq` on
are sealed by the incoming key (`public_key`), entries before it by the outgoing one. A
verifier starts from the steward's first public key (its trust anchor) and takes the
statements in order; each must verify under the key it replaces and move `from_seq` strictly
forward, or the whole set is refused (`bad_rotation`) before any entry is read. Nothing is
trusted from a statement that fails: no key after it is in force.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from joulepool.errors import PoolError
from joulepool.ledger.cbor import CborRefused
from joulepool.ledger.cose import open_envelope, seal, verify_signature
from joulepool.ledger.entry import brief
from joulepool.ledger.keys import KeyPair

ROTATION_VERSION = 1
_FIELDS = frozenset({"pool_key_rotation", "steward", "from_seq", "public_key"})
PUBLIC_KEY_BYTES = 32
MAX_SEQ = (1 << 64) - 1


class RotationRefused(PoolError):
    """Rotation statement `index` (its position, from 0) was refused: `bad_rotation` (DESIGN.md §4)."""

    code = "bad_rotation"

    def __init__(self, index: int, detail: str) -> None:
        super().__init__(f"rotation statement {index}: bad_rotation ({detail})")
        self.index = index
        self.error = "bad_rotation"
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Rotation:
    """What a verified statement says: from entry `from_seq` on, `public_key` seals."""

    steward: str
    from_seq: int
    public_key: bytes


def seal_rotation(outgoing: KeyPair, from_seq: int, incoming_public_key: bytes) -> bytes:
    """The rotation statement handing the steward's entries from `from_seq` on to the
    incoming key, signed by the outgoing one (DESIGN.md §4)."""
    if outgoing.seed is None:
        raise PoolError("a rotation statement is signed by the outgoing key: it needs its secret")
    if len(incoming_public_key) != PUBLIC_KEY_BYTES:
        raise PoolError("the incoming key must be a 32-byte Ed25519 public key")
    core = {
        "pool_key_rotation": ROTATION_VERSION,
        "steward": outgoing.kid,
        "from_seq": from_seq,
        "public_key": incoming_public_key,
    }
    return seal(core, outgoing.kid, outgoing.signing_key)


def open_rotation(raw: bytes, steward: str, outgoing_public_key: bytes, index: int) -> Rotation:
    """Statement `index` verified under the key it replaces, or `RotationRefused` naming why
    (DESIGN.md §4). Every byte is hostile: nothing from a statement that fails is kept."""
    try:
        env = open_envelope(raw)
    except CborRefused as exc:
        raise RotationRefused(
            index, f"not a rotation statement: {exc.error}: {exc.detail}"
        ) from None
    if env.kid != steward:
        raise RotationRefused(index, f"signed as {brief(env.kid)}, not the steward {steward!r}")
    if not verify_signature(env, outgoing_public_key):
        raise RotationRefused(index, "its signature does not verify under the key it replaces")
    core = env.core
    if set(core) != _FIELDS:
        raise RotationRefused(
            index, f"its core has the keys {sorted(map(str, core))}, not {sorted(_FIELDS)}"
        )
    if type(core["pool_key_rotation"]) is not int or core["pool_key_rotation"] != ROTATION_VERSION:
        raise RotationRefused(
            index, f"pool_key_rotation is {brief(core['pool_key_rotation'])}, not 1"
        )
    if core["steward"] != steward:
        raise RotationRefused(index, f"it names the steward {brief(core['steward'])}")
    from_seq = core["from_seq"]
    if type(from_seq) is not int or not 0 <= from_seq <= MAX_SEQ:
        raise RotationRefused(index, f"from_seq is {brief(from_seq)}, not an entry index")
    public_key = core["public_key"]
    if type(public_key) is not bytes or len(public_key) != PUBLIC_KEY_BYTES:
        raise RotationRefused(index, "public_key is not a 32-byte Ed25519 public key")
    return Rotation(steward, from_seq, public_key)


class KeySchedule:
    """The steward's key in force at each entry: the trust anchor from entry 0, then each
    rotation's key from its `from_seq` (DESIGN.md §4)."""

    __slots__ = ("_keys", "_starts", "statements", "steward")

    def __init__(self, steward: str, first_key: bytes) -> None:
        self.steward = steward
        self._starts: list[int] = [0]
        self._keys: list[bytes] = [first_key]
        self.statements: list[bytes] = []

    @classmethod
    def verified(cls, steward: str, first_key: bytes, statements: Sequence[bytes]) -> KeySchedule:
        """The schedule the statements set, each verified in order under the key it
        replaces, or `RotationRefused` at the first that fails (DESIGN.md §4)."""
        schedule = cls(steward, first_key)
        for raw in statements:
            schedule.add(raw)
        return schedule

    def add(self, raw: bytes) -> Rotation:
        """Verify one more statement after those already taken and put it in force."""
        index = len(self.statements)
        rotation = open_rotation(raw, self.steward, self._keys[-1], index)
        if index and rotation.from_seq <= self._starts[-1]:
            raise RotationRefused(
                index,
                f"from_seq {rotation.from_seq} does not exceed the previous statement's "
                f"{self._starts[-1]}",
            )
        self._starts.append(rotation.from_seq)
        self._keys.append(rotation.public_key)
        self.statements.append(raw)
        return rotation

    @property
    def first_key(self) -> bytes:
        """The trust anchor: the key in force from entry 0."""
        return self._keys[0]

    @property
    def current_key(self) -> bytes:
        """The key that seals entries from the last statement's `from_seq` on."""
        return self._keys[-1]

    @property
    def keys(self) -> list[bytes]:
        """Every key the steward has held, oldest first."""
        return list(self._keys)

    def keys_over_time(self) -> list[tuple[int, bytes]]:
        """(the first entry it seals, key) for every key the steward has held, oldest first
        (DESIGN.md §4, key rotation)."""
        return list(zip(self._starts, self._keys, strict=True))

    @property
    def last_from_seq(self) -> int | None:
        """The last statement's `from_seq`, or None before any rotation."""
        return self._starts[-1] if self.statements else None

    def key_at(self, seq: int) -> bytes:
        """The public key that must verify entry `seq`."""
        return self._keys[bisect.bisect_right(self._starts, seq) - 1]

    def next_change(self, seq: int) -> int | None:
        """The first index after `seq` where another key takes over, or None."""
        i = bisect.bisect_right(self._starts, seq)
        return self._starts[i] if i < len(self._starts) else None
