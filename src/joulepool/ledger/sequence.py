"""Finding entry boundaries in a CBOR sequence without decoding it (RFC 8742, DESIGN.md §4).

A ledger file is its entries one after another, nothing between them. To stream a large
ledger, to tell a torn final write from a corrupt entry, and to hand whole entries to
verifiers in other processes, the store needs each item's extent before anything decodes
it. This scanner reads only headers, so a hostile length costs nothing to skip.
"""

from __future__ import annotations

from dataclasses import dataclass

INCOMPLETE = -1
MAX_DEPTH = 16
MAX_ENTRY_BYTES = 1 << 20
"""No pool/1 entry comes near this; a longer item is refused rather than buffered."""
LONGEST_SEALED = (1 << 16) - 1
"""The longest entry joulepool seals: a claim whose entry would be longer is refused as
invalid input. It is the most a c2sp.org/tlog-tiles entry bundle can carry (a big-endian
uint16 length; DESIGN.md §8), so every sealed entry is a leaf the tiles can serve. A torn
write is a prefix of one entry, so a tail longer than the longest entry a ledger could
hold is never a torn write."""


class StructureError(ValueError):
    """The bytes at an offset are not the start of any well-formed CBOR item."""


def item_end(buf: bytes | memoryview, pos: int, end: int, depth: int = 0) -> int:
    """The offset just past the CBOR item at `pos`, or INCOMPLETE if `end` cuts it short.

    Raises `StructureError` for bytes that no continuation could make well formed.
    """
    if depth > MAX_DEPTH:
        raise StructureError(f"nested deeper than {MAX_DEPTH}")
    if pos >= end:
        return INCOMPLETE
    initial = buf[pos]
    major = initial >> 5
    info = initial & 31
    pos += 1
    if info < 24:
        arg = info
    elif info <= 27:
        size = 1 << (info - 24)
        if pos + size > end:
            return INCOMPLETE
        arg = int.from_bytes(buf[pos : pos + size], "big")
        pos += size
    elif info == 31 and major in (2, 3, 4, 5):
        return _indefinite_end(buf, pos, end, major, depth)
    else:
        raise StructureError(f"reserved or misplaced additional information {info} (major {major})")
    if major in (2, 3):
        if arg > MAX_ENTRY_BYTES:
            raise StructureError(f"a string of {arg} bytes is longer than any entry")
        pos += arg
        return pos if pos <= end else INCOMPLETE
    if major in (4, 5):
        count = arg if major == 4 else 2 * arg
        if count > MAX_ENTRY_BYTES:
            raise StructureError(f"a container of {arg} items is larger than any entry")
        for _ in range(count):
            pos = item_end(buf, pos, end, depth + 1)
            if pos == INCOMPLETE:
                return INCOMPLETE
        return pos
    if major == 6:
        return item_end(buf, pos, end, depth + 1)
    return pos


def _indefinite_end(buf: bytes | memoryview, pos: int, end: int, major: int, depth: int) -> int:
    items = 0
    while True:
        if pos >= end:
            return INCOMPLETE
        if buf[pos] == 0xFF:
            if major == 5 and items % 2:
                raise StructureError("an indefinite map ends after a key with no value")
            return pos + 1
        if major in (2, 3) and buf[pos] >> 5 != major:
            raise StructureError("an indefinite string holds a chunk of another type")
        pos = item_end(buf, pos, end, depth + 1)
        if pos == INCOMPLETE:
            return INCOMPLETE
        items += 1


@dataclass(frozen=True, slots=True)
class Tail:
    """What follows the last whole entry: a torn write, or bytes that are no entry at all."""

    offset: int
    length: int
    torn: bool
    detail: str


def envelope_end(buf: bytes | memoryview, pos: int) -> int | None:
    """The offset just past a whole pool/1 envelope at `pos`, read off its one fixed shape.

    None for anything else (another shape, or cut short), which `item_end` then reads in
    general. Every entry has this shape (DESIGN.md §4), so scanning a ledger costs a few
    byte comparisons an entry instead of a descent through six items.
    """
    try:
        if buf[pos] != 0xD2 or buf[pos + 1] != 0x84:  # tag 18, array(4)
            return None
        head = buf[pos + 2]  # the protected header: a short byte string
        if not 0x40 <= head < 0x58:
            return None
        p = pos + 3 + head - 0x40
        if buf[p] != 0xA0:  # the empty unprotected map
            return None
        head = buf[p + 1]  # the payload
        if 0x40 <= head < 0x58:
            p += 2 + head - 0x40
        elif head == 0x58:
            p += 3 + buf[p + 2]
        elif head == 0x59:
            p += 4 + (buf[p + 2] << 8 | buf[p + 3])
        else:
            return None
        if buf[p] != 0x58 or buf[p + 1] != 0x40:  # the 64-byte signature
            return None
    except IndexError:
        return None
    p += 66
    return p if p <= len(buf) else None


def split(buf: bytes | memoryview, start: int = 0) -> tuple[list[int], Tail | None]:
    """Start offsets of the whole items in `buf[start:]`, and the tail problem if any.

    A tail that a longer write could have completed is torn; one that no write could is not.
    """
    end = len(buf)
    offsets: list[int] = []
    pos = start
    while pos < end:
        nxt = envelope_end(buf, pos)
        if nxt is not None:
            offsets.append(pos)
            pos = nxt
            continue
        try:
            nxt = item_end(buf, pos, end)
        except StructureError as exc:
            return offsets, Tail(pos, end - pos, False, str(exc))
        if nxt == INCOMPLETE:
            return offsets, Tail(pos, end - pos, True, "the final entry is incomplete")
        offsets.append(pos)
        pos = nxt
    return offsets, None


def entry_prefix(buf: bytes | memoryview) -> bool:
    """Whether `buf` is the start of a pool/1 envelope as far as it goes (DESIGN.md §4).

    The first bytes of a torn write are the first bytes of an entry: tag 18, an array of
    four, a short protected header, the empty unprotected map, the payload's header, and
    the signature's header where they are reached.
    """
    end = len(buf)
    expected = (0xD2, 0x84)
    for i, byte in enumerate(expected[:end]):
        if buf[i] != byte:
            return False
    if end <= 2:
        return True
    head = buf[2]
    if not 0x40 <= head < 0x58:
        return False
    p = 3 + head - 0x40
    if p >= end:
        return True
    if buf[p] != 0xA0:
        return False
    p += 1
    if p >= end:
        return True
    head = buf[p]
    if 0x40 <= head < 0x58:
        p += 1 + head - 0x40
    elif head in (0x58, 0x59):
        size = 1 if head == 0x58 else 2
        if p + 1 + size > end:
            return True
        p += 1 + size + int.from_bytes(buf[p + 1 : p + 1 + size], "big")
    else:
        return False
    signature = (0x58, 0x40)
    return all(buf[p + i] == byte for i, byte in enumerate(signature) if p + i < end)


def whole_entry_within(buf: bytes | memoryview) -> int | None:
    """The offset of the first complete pool/1 envelope that starts inside `buf` after its
    first byte, or None. A torn write holds part of one entry, never a whole one."""
    data = bytes(buf)
    pos = data.find(b"\xd2\x84", 1)
    while pos >= 0:
        if envelope_end(data, pos) is not None:
            return pos
        pos = data.find(b"\xd2\x84", pos + 1)
    return None


def not_torn(
    tail: bytes, longest: int, index: int, acknowledged: int | None, size: int | None = None
) -> str | None:
    """Why the bytes `tail`, found after entry `index - 1`, cannot be a torn write, or None
    when they can (standard §6.1: a torn write loses only what was never acknowledged).

    `longest` is the longest entry this ledger could hold; `acknowledged` the length its
    high-water record reached, if it has one; `size` the tail's whole length where `tail`
    is only its first bytes (a reader need not read past `longest + 1`). Each reason is
    evidence that truncating the tail would delete something an append completed.
    """
    size = len(tail) if size is None else size
    if acknowledged is not None and index < acknowledged:
        return (
            f"entry {index} was acknowledged (the high-water record reaches {acknowledged} "
            "entries), so these bytes are a damaged entry, not an unfinished one"
        )
    if size > longest:
        return f"{size} bytes is longer than any entry this ledger could hold ({longest})"
    if not entry_prefix(tail):
        return "they do not begin the way every entry begins"
    inside = whole_entry_within(tail)
    if inside is not None:
        return f"a whole entry starts {inside} bytes into them"
    return None
