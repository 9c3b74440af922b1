"""Entry boundaries in a CBOR sequence, found from headers alone (RFC 8742, DESIGN.md §4)."""

import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from joulepool.ledger.sequence import (
    INCOMPLETE,
    LONGEST_SEALED,
    StructureError,
    entry_prefix,
    envelope_end,
    item_end,
    not_torn,
    split,
)
from tests.support.ledgers import twenty

ITEMS = [
    0,
    23,
    24,
    255,
    256,
    2**32,
    2**64 - 1,
    -1,
    -(2**64),
    b"",
    b"x" * 300,
    "é",
    [1, [2, [3]]],
    {"a": 1, "b": [b"\x00"]},
    cbor2.CBORTag(18, [b"p", {}, b"c", b"s" * 64]),
    1.5,
    True,
    None,
]


@pytest.mark.parametrize("item", ITEMS, ids=[repr(i)[:20] for i in ITEMS])
def test_each_item_ends_where_cbor2_says(item: object) -> None:
    data = cbor2.dumps(item)
    assert item_end(data, 0, len(data)) == len(data)
    for cut in range(len(data)):
        assert item_end(data, 0, cut) == INCOMPLETE


def test_indefinite_lengths_are_skipped_whole() -> None:
    data = bytes.fromhex("9f0102ff") + bytes.fromhex("5f41614162ff") + bytes.fromhex("bf6161f5ff")
    offsets, tail = split(data)
    assert offsets == [0, 4, 10]
    assert tail is None


def test_split_reports_a_torn_tail_with_its_offset() -> None:
    a, b = cbor2.dumps([1, 2]), cbor2.dumps(b"y" * 100)
    offsets, tail = split(a + b[:-3])
    assert offsets == [0]
    assert tail is not None and tail.torn and tail.offset == len(a) and tail.length == len(b) - 3


def test_split_reports_bytes_no_write_could_complete_as_not_torn() -> None:
    offsets, tail = split(cbor2.dumps(1) + b"\x1c")  # additional information 28 is reserved
    assert offsets == [0]
    assert tail is not None and not tail.torn


def test_a_declared_length_beyond_any_entry_is_refused_not_buffered() -> None:
    with pytest.raises(StructureError):
        item_end(b"\x5b\x00\x00\x01\x00\x00\x00\x00\x00", 0, 9)


def test_deep_nesting_is_refused() -> None:
    data = b"\x81" * 100 + b"\x00"
    with pytest.raises(StructureError, match="nested"):
        item_end(data, 0, len(data))


@given(
    st.lists(
        st.recursive(
            st.integers() | st.binary() | st.text(),
            lambda c: st.lists(c) | st.dictionaries(st.text(), c),
            max_leaves=8,
        ),
        max_size=8,
    )
)
def test_split_finds_every_item_of_a_sequence(items: list[object]) -> None:
    parts = [cbor2.dumps(i) for i in items]
    offsets, tail = split(b"".join(parts))
    assert tail is None
    expected, pos = [], 0
    for p in parts:
        expected.append(pos)
        pos += len(p)
    assert offsets == expected


@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_crash_the_scanner(data: bytes) -> None:
    offsets, tail = split(data)
    assert all(0 <= o < len(data) for o in offsets)
    assert tail is None or 0 <= tail.offset <= len(data)


def _general_end(data: bytes) -> int | None:
    try:
        end = item_end(data, 0, len(data))
    except StructureError:
        return None
    return None if end == INCOMPLETE else end


def test_the_envelope_shortcut_ends_every_entry_where_the_general_scanner_does() -> None:
    # Every single-byte change and every cut of real entries: wherever the shortcut answers,
    # its answer is the general scanner's; where it declines, the general scanner decides.
    answered = 0
    for raw in twenty()[:3]:
        assert envelope_end(raw, 0) == len(raw)
        variants = [raw[:cut] for cut in range(len(raw))]
        for i in range(len(raw)):
            for value in {0x00, 0x17, 0x18, 0x40, 0x57, 0x58, 0x59, 0xA0, 0xD2, 0xFF, raw[i] ^ 1}:
                variants.append(raw[:i] + bytes((value,)) + raw[i + 1 :])
        for data in variants:
            fast = envelope_end(data, 0)
            if fast is not None:
                answered += 1
                assert fast == _general_end(data), data.hex()
    assert answered > 100  # the shortcut is taken, not merely declining


def test_a_sequence_of_entries_and_other_items_splits_alike_either_way() -> None:
    entries = twenty()
    mixed = [*entries[:2], cbor2.dumps({"not": "an entry"}), *entries[2:4]]
    offsets, tail = split(b"".join(mixed))
    assert tail is None
    assert offsets == [sum(map(len, mixed[:i])) for i in range(len(mixed))]


def test_s6_1_every_prefix_of_an_entry_can_be_a_torn_write() -> None:
    entry = twenty()[3]
    for cut in range(len(entry)):
        assert entry_prefix(entry[:cut]), cut
        assert not_torn(entry[:cut], LONGEST_SEALED, 3, None) is None, cut
        assert not_torn(entry[:cut], LONGEST_SEALED, 3, 3) is None, cut


def test_s6_1_each_reason_a_tail_is_not_a_torn_write() -> None:
    ledger = twenty()
    cut = ledger[5][:40]
    # Covered by the high-water record: entry 5 was acknowledged.
    assert "acknowledged" in (not_torn(cut, LONGEST_SEALED, 5, 6) or "")
    # Longer than any entry, whether read whole or only its first bytes.
    assert "longer than any entry" in (not_torn(cut, 39, 5, None) or "")
    assert "70000 bytes" in (not_torn(cut, LONGEST_SEALED, 5, None, 70_000) or "")
    # Not the way an entry begins: a flipped tag, a flipped array header, a bad map.
    for at, flip in ((0, 0x01), (1, 0x02), (2, 0x40)):
        bad = bytearray(cut)
        bad[at] ^= flip
        assert "do not begin" in (not_torn(bytes(bad), LONGEST_SEALED, 5, None) or ""), at
    # A whole entry inside: the tail is entries, not an unfinished one.
    damaged = ledger[5][:-1] + ledger[6]
    assert "whole entry starts" in (not_torn(damaged, LONGEST_SEALED, 5, None) or "")
