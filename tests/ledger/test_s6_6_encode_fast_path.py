"""The flat-map fast path of `encode` writes exactly what the checked path writes (§6.6).

Every ledger core is a flat map of text keys to integers, text and bytes, so `encode`
sorts such a map by a cached key order instead of walking it. Whatever the map holds,
the bytes, or the refusal, must be those of the general det-CBOR path.
"""

from __future__ import annotations

import cbor2
from hypothesis import given, settings
from hypothesis import strategies as st

from joulepool.errors import InvalidInput
from joulepool.ledger import cbor
from joulepool.ledger.cbor import decode_strict, encode

VALUES = st.one_of(
    st.integers(min_value=-(2**64) - 2, max_value=2**64 + 2),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False),
    st.dictionaries(st.text(max_size=3), st.integers(0, 9), max_size=2),
)
KEYS = st.text(max_size=6) | st.sampled_from(
    ["seq", "prev", "claim", "at_ms", "a", "aa", "é", "\udc80"]
)


def checked(obj: object) -> bytes | str:
    """What the general path makes of `obj`: its bytes, or the field its refusal names."""
    try:
        return bytes(cbor2.dumps(cbor._canonical(obj, 0, "")))
    except (InvalidInput, UnicodeError) as exc:
        return type(exc).__name__


def fast(obj: object) -> bytes | str:
    try:
        return encode(obj)
    except InvalidInput as exc:
        return type(exc).__name__


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(st.dictionaries(KEYS, VALUES, max_size=12))
def test_s6_6_a_flat_map_encodes_as_the_checked_path_encodes_it(core: dict[str, object]) -> None:
    expected = checked(core)
    got = fast(core)
    if isinstance(expected, bytes):
        assert got == expected
        assert decode_strict(got) == decode_strict(expected)
    else:
        assert got == "InvalidInput"


def test_s6_6_the_fast_path_sorts_by_encoded_length_then_bytes() -> None:
    raw = encode({"bb": 1, "a": 2, "é": 3, "c": 4})
    assert list(cbor2.loads(raw)) == ["a", "c", "bb", "é"]
