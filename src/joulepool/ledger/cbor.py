"""det-CBOR: the one encoding the ledger signs, and the strict decoder that checks it (§6.6).

DESIGN.md §4 fixes the profile: RFC 8949 §4.2.1 core deterministic encoding (definite
lengths, shortest integer and length forms, map keys sorted bytewise by their encoding, no
duplicates) over unsigned and negative integers, text strings, byte strings and maps. The
COSE_Sign1 envelope also needs arrays and its tag 18; nothing else is ever written or read.

A signature covers bytes, not values, so `decode_strict` refuses any input that is not the
one encoding of what it decodes to (§6.6). It tells two refusals apart, because replay
reports them under different names (DESIGN.md §4):

- `malformed`: the bytes are not one complete, well-formed CBOR item;
- `non_canonical`: they decode, but are not det-CBOR, or hold something outside the
  profile (a float, a bool, a null, a simple value, a tag).

cbor2 (C accelerated) does the work; this module only decides what it may accept.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from typing import Any, Final

import cbor2

from joulepool.checks import join_field
from joulepool.errors import InvalidInput, PoolError

MALFORMED: Final = "malformed"
NON_CANONICAL: Final = "non_canonical"

MAX_ITEM_BYTES: Final = 1 << 20
"""The largest item (a whole sealed entry) read or written: 1 MiB, far above any real entry."""

MAX_NESTING: Final = 8
"""The deepest an item may sit below the outermost one; the envelope needs 2, a core 1."""

COSE_SIGN1_TAG: Final = 18

_INT_LIMIT: Final = 1 << 64  # major types 0 and 1 reach 2**64 - 1 and -2**64, no further
_SCALARS: Final = frozenset((int, str, bytes))
_KEY_TYPES: Final = frozenset((int, str, bytes))
_MAPS: Final = (dict, cbor2.frozendict)
_ARRAYS: Final = (list, tuple)

# Every tag cbor2 6.3 gives a meaning to. Each is mapped back to a bare CBORTag so that no
# tag is interpreted before it is refused: otherwise bignums (2, 3) arrive as plain ints,
# tag 55799 vanishes, string and value references (25, 256, 28, 29) expand or build cycles,
# and a bad datetime (0) raises as if the bytes were not CBOR at all.
# tests/ledger/test_cbor.py probes every tag up to 65535 to keep this list complete.
_INTERPRETED_TAGS: Final = (
    0, 1, 2, 3, 4, 5, 25, 28, 29, 30, 35, 36, 37, 52, 54, 100, 256, 258, 260, 261, 1004,
    43000, 55799,
)  # fmt: skip


def _bare(tag: int) -> Callable[[Any, bool], cbor2.CBORTag]:
    def keep(value: Any, immutable: bool) -> cbor2.CBORTag:  # noqa: ARG001 (cbor2's signature)
        return cbor2.CBORTag(tag, value)

    return keep


_BARE_TAGS: Final = {tag: _bare(tag) for tag in _INTERPRETED_TAGS}

# Key tuples already seen in canonical order: replay meets the same few shapes of core
# again and again, and a set lookup is several times cheaper than re-checking the order.
_ORDERED_KEYS: set[tuple[object, ...]] = set()
_ORDERED_KEYS_MAX: Final = 1024


class CborRefused(PoolError):
    """Bytes refused by the det-CBOR decoder: `error` is "malformed" or "non_canonical" (§6.6)."""

    code = "cbor_refused"

    def __init__(self, error: str, detail: str) -> None:
        super().__init__(detail)
        self.error = error

    def __str__(self) -> str:
        return f"{self.error}: {self.detail}"


def encode(obj: object) -> bytes:
    """The det-CBOR encoding of `obj` (RFC 8949 §4.2.1, DESIGN.md §4).

    Accepts int (within CBOR's 64-bit range), str, bytes, mappings with int, str or bytes
    keys, lists and tuples (as arrays) and CBORTag 18 (the COSE_Sign1 envelope), nested no
    deeper than MAX_NESTING. Anything else, bool, None and float included, is refused with
    InvalidInput naming where it sits, rather than written in a form a verifier refuses.
    """
    flat = _flat_in_order(obj)
    canonical = _canonical(obj, 0, "") if flat is None else flat
    try:
        out: bytes = cbor2.dumps(canonical)
    except (cbor2.CBORError, UnicodeError, ValueError, TypeError, OverflowError) as exc:
        raise InvalidInput("", f"cannot be encoded as det-CBOR: {exc}") from exc
    if len(out) > MAX_ITEM_BYTES:
        raise InvalidInput("", f"encodes to {len(out)} bytes, above the {MAX_ITEM_BYTES} maximum")
    return out


def decode_strict(data: bytes, *, envelope: bool = False) -> object:
    """Decode one det-CBOR item that is exactly `data`, or raise CborRefused (§6.6, DESIGN.md §4).

    With `envelope=False` (a core, a key, a protected header) only integers, text, byte
    strings and maps are accepted; `envelope=True` also accepts arrays, and tag 18 as the
    outermost item. Refusals: `malformed` for bytes that are not one complete well-formed
    item (trailing bytes, truncation, a declared length past the end, nesting deeper than
    MAX_NESTING, input over MAX_ITEM_BYTES); `non_canonical` for bytes that decode but do
    not re-encode to themselves, or hold a float, bool, null, undefined, simple value or
    any other tag (bignums included).
    """
    if type(data) is not bytes:
        data = _as_bytes(data)
    if len(data) > MAX_ITEM_BYTES:
        return _decode_thoroughly(data, envelope)
    try:
        obj = cbor2.loads(data, semantic_decoders=_BARE_TAGS, max_depth=MAX_NESTING)
    except Exception:  # whatever the decoder raised, the thorough path names the refusal
        return _decode_thoroughly(data, envelope)
    if _plainly_canonical(obj, envelope) and cbor2.dumps(obj) == data:
        return obj
    return _decode_thoroughly(data, envelope)


def decode_wellformed(data: bytes) -> object:
    """Decode one complete well-formed CBOR item that is exactly `data`, canonical or not (§6.6).

    Raises CborRefused("malformed") for anything else; tags come back as bare CBORTag.
    This is the first check of DESIGN.md §4 (does it decode?), kept apart from the second
    (does it re-encode to itself?) so a caller can report them in that order.
    """
    data = _as_bytes(data)
    if len(data) > MAX_ITEM_BYTES:
        raise CborRefused(
            MALFORMED, f"{len(data)} bytes, above the {MAX_ITEM_BYTES}-byte maximum item"
        )
    stream = io.BytesIO(data)
    try:
        obj = cbor2.CBORDecoder(
            stream, semantic_decoders=_BARE_TAGS, max_depth=MAX_NESTING
        ).decode()
    except cbor2.CBORDecodeEOF as exc:
        raise CborRefused(MALFORMED, f"truncated: {exc}") from exc
    # A hostile input must come back as a refusal, whatever the decoder raised on it
    # (RecursionError and MemoryError included: both are Exceptions).
    except Exception as exc:
        raise CborRefused(MALFORMED, f"not well-formed CBOR: {exc}") from exc
    end = stream.tell()
    if end != len(data):
        raise CborRefused(MALFORMED, f"{len(data) - end} trailing byte(s) follow the first item")
    return obj


def decode_map_pairs(data: bytes) -> list[tuple[object, object]] | None:
    """The key/value pairs of the one well-formed CBOR map that is exactly `data`, as written.

    Repeated keys are all kept, and keys keep their CBOR types: a Python dict would merge
    `true` or `1.0` into the key 1, which CBOR does not (DESIGN.md §3, "Edge cases, pinned").
    None where `data` is well-formed but not a map; CborRefused("malformed") where it is not
    one well-formed item. Tags come back as bare CBORTag.
    """
    decode_wellformed(data)  # one complete well-formed item, or the refusal naming why
    first = data[0]
    if first >> 5 != 5:
        return None
    info = first & 0x1F
    count: int | None
    if info < 24:
        count, start = info, 1
    elif info <= 27:
        size = 1 << (info - 24)
        count, start = int.from_bytes(data[1 : 1 + size], "big"), 1 + size
    else:  # 31: indefinite length, ended by a break (28 to 30 are not well-formed)
        count, start = None, 1
    stream = io.BytesIO(data)
    stream.seek(start)
    decoder = cbor2.CBORDecoder(stream, semantic_decoders=_BARE_TAGS, max_depth=MAX_NESTING)
    pairs: list[tuple[object, object]] = []
    while (len(pairs) < count) if count is not None else data[stream.tell()] != 0xFF:
        key = decoder.decode()
        pairs.append((key, decoder.decode()))
    return pairs


def _as_bytes(data: object) -> bytes:
    if type(data) is bytes:
        return data
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise InvalidInput("data", f"must be bytes, got {type(data).__name__}")


def _decode_thoroughly(data: bytes, envelope: bool) -> object:
    """The reference path: slow, and names exactly why `data` is refused."""
    obj = decode_wellformed(data)
    problem = _profile_problem(obj, envelope, 0, "")
    if problem is not None:
        raise CborRefused(NON_CANONICAL, problem)
    try:
        cbor2.loads(
            data,
            semantic_decoders=_BARE_TAGS,
            max_depth=MAX_NESTING,
            allow_indefinite=False,
            allow_duplicate_keys=False,
        )
    except Exception as exc:
        raise CborRefused(NON_CANONICAL, str(exc)) from exc
    if cbor2.dumps(obj) != data:
        raise CborRefused(NON_CANONICAL, "an integer or a length is not in its shortest form")
    return obj


def _plainly_canonical(obj: object, envelope: bool) -> bool:
    """The fast test, for the common case of a flat map of scalars in order."""
    if type(obj) is dict:
        keys = tuple(obj)
        # A key tuple is remembered only once its key types and order have been checked.
        if (
            keys in _ORDERED_KEYS
            or (_KEY_TYPES.issuperset(map(type, keys)) and _keys_in_order(keys))
        ) and _SCALARS.issuperset(map(type, obj.values())):
            return True
    return _profile_problem(obj, envelope, 0, "") is None


def _profile_problem(obj: object, envelope: bool, depth: int, where: str) -> str | None:
    """Why a decoded item is outside the det-CBOR profile, or None (DESIGN.md §4)."""
    kind = type(obj)
    if kind is int or kind is str or kind is bytes:
        return None  # a decoded int is always in range: bignum tags stay bare CBORTag here
    if kind in _MAPS:
        assert isinstance(obj, Mapping)
        for key, value in obj.items():
            if type(key) not in _KEY_TYPES:
                return f"{_at(where)}a map key is {_describe(key)}"
            problem = _profile_problem(value, envelope, depth + 1, join_field(where, _named(key)))
            if problem is not None:
                return problem
        if not _keys_in_order(tuple(obj)):
            return f"{_at(where)}map keys are not in bytewise order of their encoding"
        return None
    if envelope and kind in _ARRAYS:
        assert isinstance(obj, list | tuple)
        for index, item in enumerate(obj):
            problem = _profile_problem(item, envelope, depth + 1, f"{where}[{index}]")
            if problem is not None:
                return problem
        return None
    if envelope and depth == 0 and kind is cbor2.CBORTag:
        assert isinstance(obj, cbor2.CBORTag)
        if obj.tag == COSE_SIGN1_TAG:
            return _profile_problem(obj.value, envelope, depth + 1, where)
    return f"{_at(where)}{_describe(obj)} is outside det-CBOR (DESIGN.md §4)"


def _named(key: object, limit: int = 48) -> str:
    """A map key as a step of a refusal's path: hostile text is quoted and cut, so that the
    refusal stays one short line (`pool ledger verify` prints it as one)."""
    if type(key) is str and len(key) <= limit and key.isprintable():
        return key
    text = repr(key)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _at(where: str) -> str:
    return f"at {where}: " if where else ""


def _describe(obj: object) -> str:
    if isinstance(obj, cbor2.CBORTag):
        names = {2: " (bignum)", 3: " (negative bignum)"}
        return f"tag {obj.tag}{names.get(obj.tag, '')}"
    if isinstance(obj, bool):
        return "a bool"
    if obj is None:
        return "null"
    if obj is cbor2.undefined:
        return "undefined"
    if isinstance(obj, cbor2.CBORSimpleValue):
        return f"simple value {obj.value}"
    if isinstance(obj, float):
        return "a float"
    if isinstance(obj, list | tuple):
        return "an array"
    if isinstance(obj, Mapping):
        return "a map"
    return f"a {type(obj).__name__}"


def _sort_key(key: object) -> tuple[Any, ...]:
    """The order of a key's det-CBOR encoding: major type, then length, then content."""
    if type(key) is int:
        return (0, key) if key >= 0 else (1, -1 - key)
    if type(key) is bytes:
        return (2, len(key), key)
    assert type(key) is str
    # Code-point order is UTF-8 byte order, so only the encoded length needs computing.
    return (3, len(key) if key.isascii() else len(key.encode()), key)


def _keys_in_order(keys: tuple[object, ...]) -> bool:
    """Whether keys of int, str or bytes are strictly ascending in det-CBOR order."""
    previous: tuple[Any, ...] | None = None
    for key in keys:
        current = _sort_key(key)
        if previous is not None and current <= previous:
            return False
        previous = current
    # Integer keys are never remembered: `true` and `1.0` hash and compare equal to 1 in
    # Python, so a remembered (1, 4) would pass a map keyed (true, 4) as canonical, which the
    # cache lookup in `_plainly_canonical` does before checking key types (DESIGN.md §4).
    if len(_ORDERED_KEYS) < _ORDERED_KEYS_MAX and int not in map(type, keys):
        _ORDERED_KEYS.add(keys)
    return True


# Key orders of flat maps already sorted: a ledger's cores come in a few shapes.
_FLAT_ORDERS: dict[tuple[str, ...], tuple[str, ...]] = {}
_FLAT_ORDERS_MAX = 64


def _flat_in_order(obj: object) -> dict[str, object] | None:
    """A map of text keys to plain int, text or bytes values, keys in det-CBOR order.

    Every ledger core has this shape: the fast path of `encode`, an order looked up
    instead of a recursive walk. Anything else (a nested value, a subclass, an int out of
    range, a key that is not valid text) is None, and `_canonical` checks it and says why.
    """
    if type(obj) is not dict:
        return None
    keys = tuple(obj)
    order = _FLAT_ORDERS.get(keys)
    if order is None:
        if not all(type(k) is str for k in keys):
            return None
        try:
            order = tuple(sorted(keys, key=_sort_key))
        except UnicodeError:
            return None
        if len(_FLAT_ORDERS) < _FLAT_ORDERS_MAX:
            _FLAT_ORDERS[keys] = order
    out: dict[str, object] = {}
    for key in order:
        value = obj[key]
        kind = type(value)
        if kind is int:
            if not -_INT_LIMIT <= value < _INT_LIMIT:
                return None
        elif kind is not str and kind is not bytes:
            return None
        out[key] = value
    return out


def _canonical(obj: object, depth: int, where: str) -> object:
    """`obj` checked against the profile, with every map's keys in det-CBOR order."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, float):
        raise InvalidInput(where, f"{_describe(obj)} is outside det-CBOR (DESIGN.md §4)")
    if isinstance(obj, int):
        if not -_INT_LIMIT <= obj < _INT_LIMIT:
            raise InvalidInput(where, "integer outside CBOR's range [-2**64, 2**64 - 1]")
        return int(obj)
    if isinstance(obj, str):
        return obj[:]  # a str subclass (a StrEnum such as Grade) becomes its plain value
    if isinstance(obj, bytes):
        return bytes(obj)
    if depth >= MAX_NESTING:
        raise InvalidInput(where, f"nested deeper than {MAX_NESTING} levels")
    if isinstance(obj, Mapping):
        items: list[tuple[object, object]] = []
        for key, value in obj.items():
            if isinstance(key, bool) or not isinstance(key, int | str | bytes):
                raise InvalidInput(where, f"a map key is {_describe(key)}; only int, str, bytes")
            plain_key = _canonical(key, depth + 1, where)
            items.append((plain_key, _canonical(value, depth + 1, join_field(where, str(key)))))
        try:
            in_order = _keys_in_order(tuple(k for k, _ in items))
            if not in_order:
                items.sort(key=lambda item: _sort_key(item[0]))
        except UnicodeError as exc:
            raise InvalidInput(where, f"a map key is not valid text: {exc}") from exc
        if not in_order and len({k for k, _ in items}) != len(items):
            raise InvalidInput(where, "two map keys are equal")
        return dict(items)
    if isinstance(obj, list | tuple):
        return [_canonical(item, depth + 1, f"{where}[{i}]") for i, item in enumerate(obj)]
    if isinstance(obj, cbor2.CBORTag) and obj.tag == COSE_SIGN1_TAG and depth == 0:
        return cbor2.CBORTag(COSE_SIGN1_TAG, _canonical(obj.value, depth + 1, where))
    raise InvalidInput(where, f"{_describe(obj)} is outside det-CBOR (DESIGN.md §4)")
