"""Where every `EVERY`-th entry of a ledger file starts, kept beside it (`<ledger>.offsets`),
so that a start from a state snapshot checks a kept mark older than the snapshot (standard
§6.1) by reading a few thousand entries, not the file from byte 0 (DESIGN.md §4).

A cache like the others beside the ledger, bound to it (DESIGN.md §4): the table records
the steward, the length and the head it covers (those of the entry at its last offset), and
is used only when the file has that entry, with that content address, at that offset; a
table of another ledger, a fork's or a damaged one is discarded with a warning and rebuilt
by the next scan. Nothing is taken from it that the ledger does not prove either: an entry
found through it counts only when its bytes' content address is the head the caller
expects, so a table that does not fit costs time, never an answer. The table is written by
a writer that has just read every offset from byte 0, and grown by one that found an entry
past its end.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import sys
from array import array
from pathlib import Path

from joulepool.errors import PoolError
from joulepool.files import write_atomically
from joulepool.ledger.cose import content_address, open_envelope
from joulepool.ledger.sequence import split

log = logging.getLogger("joulepool.offsets")

Binding = tuple[str, int, bytes]
"""What a table says it covers: the steward, the ledger length and the head at it."""

EVERY = 4096
"""Entries between two offsets in the table: at most this many are read to reach an entry."""
MAGIC = b"joulepool offsets\n\x00\x02"
_BOUND = struct.Struct("<Q32sH")  # length, head, the steward's length in bytes
MAX_TABLE_BYTES = 64 << 20
CHUNK = 1 << 20


def table_path(ledger: Path) -> Path:
    """Where the offset table of the ledger file `ledger` lives: beside it."""
    return ledger.with_name(ledger.name + ".offsets")


def read_table(path: Path) -> array[int]:
    """The offsets of entries 0, `EVERY`, 2 `EVERY`, ... as written, whatever they are bound
    to; empty where the file is missing or is not a table (DESIGN.md §4)."""
    return read_bound(path)[0]


def read_bound(path: Path) -> tuple[array[int], Binding | None]:
    """The offsets a table holds and the binding it records (None: it records none; an
    empty table where the file is missing or is not a table of this layout, DESIGN.md §4)."""
    table: array[int] = array("Q")
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_TABLE_BYTES + 1)
    except OSError:
        return table, None
    if not data.startswith(MAGIC) or len(data) > MAX_TABLE_BYTES:
        return table, None
    at = len(MAGIC)
    try:
        length, head, size = _BOUND.unpack_from(data, at)
        at += _BOUND.size
        steward = data[at : at + size].decode("utf-8")
    except (struct.error, UnicodeDecodeError):
        return table, None
    body = data[at + size :]
    if len(body) % 8 or len(steward.encode()) != size:
        return table, None
    table.frombytes(body)
    if sys.byteorder != "little":
        table.byteswap()
    return table, ((steward, int(length), bytes(head)) if length else None)


def write_table(path: Path, table: array[int], bound: Binding | None = None) -> None:
    """Keep `table` at `path` with the binding it covers (DESIGN.md §4). A cache: a table
    that cannot be written is left as it was, and the next start reads the file the long
    way. One written without a binding is never used."""
    out = array("Q", table)
    if sys.byteorder != "little":
        out.byteswap()
    steward, length, head = bound if bound is not None else ("", 0, bytes(32))
    name = steward.encode("utf-8")
    header = MAGIC + _BOUND.pack(length, head, len(name)) + name
    with contextlib.suppress(OSError):
        write_atomically(path, header + out.tobytes(), 0o644)


def binding(fd: int, table: array[int], limit: int) -> Binding | None:
    """What `table` covers in the file open at `fd` (DESIGN.md §4): the steward, the length
    and the head of the entry at its last offset, read there; None where no entry is."""
    if not table:
        return None
    last = (len(table) - 1) * EVERY
    found = find_entry(fd, table, last, limit)
    if found is None:
        return None
    raw = found[0]
    try:
        steward = open_envelope(raw).kid
    except PoolError:
        return None
    return steward, last + 1, content_address(raw)


def bound_table(path: Path, fd: int, limit: int) -> array[int]:
    """The table at `path` if it is bound to the file open at `fd`: its recorded steward,
    length and head those of the entry the file has at its last offset (DESIGN.md §4).
    Otherwise an empty table, with a warning where one was there: it is rebuilt by the
    next scan, and meanwhile the file is read the long way."""
    table, recorded = read_bound(path)
    if not table:
        return table
    if recorded is None or binding(fd, table, limit) != recorded:
        log.warning(
            "%s: the offset table is not this ledger's; discarded, rebuilt at the next scan",
            path,
        )
        return array("Q")
    return table


def checkpoints(offsets: array[int]) -> array[int]:
    """The table of a file whose entries start at `offsets`, entry 0 first."""
    return offsets[::EVERY]


def find_entry(
    fd: int, table: array[int], index: int, limit: int
) -> tuple[bytes, array[int] | None] | None:
    """The bytes of entry `index` as the table places it, read forward from the nearest
    offset at or before it and never at or past byte `limit`; with the table grown by the
    offsets passed on the way where it did not reach that far (else None). None where the
    bytes there are not whole entries: the table does not fit this file.

    Nothing here says the bytes are entry `index`: the caller compares their content
    address with the head it expects (DESIGN.md §4).
    """
    if not table or index < 0:
        return None
    known = min(index // EVERY, len(table) - 1)
    start = int(table[known])
    want = index - known * EVERY + 1
    buf = b""
    found: list[int] = []
    pos = 0
    while len(found) < want:
        at = start + len(buf)
        chunk = os.pread(fd, min(CHUNK, limit - at), at) if at < limit else b""
        if not chunk:
            return None
        buf += chunk
        more, tail = split(buf, pos)
        found.extend(more)
        pos = tail.offset if tail is not None else len(buf)
        if tail is not None and not tail.torn and len(found) < want:
            return None
    end = found[want] if len(found) > want else pos
    grown = None
    if want > EVERY:
        grown = array("Q", table)
        grown.extend(start + found[j] for j in range(EVERY, want, EVERY))
    return buf[found[want - 1] : end], grown
