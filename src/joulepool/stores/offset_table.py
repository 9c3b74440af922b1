"""Where every `EVERY`-th entry of a ledger file starts, kept beside it (`<ledger>.offsets`),
so that a start from a state snapshot checks a kept mark older than the snapshot (standard
§6.1) by reading a few thousand entries, not the file from byte 0 (DESIGN.md §4).

A cache like the others beside the ledger: nothing is taken from it that the ledger does
not prove. An entry found through it counts only when its bytes' content address is the
head the caller expects; a table of another file, a stale one or a damaged one finds other
bytes or none, and the caller reads the file the long way: it costs time, never an answer.
The table is written by a writer that has just read every offset from byte 0, and grown by
one that found an entry past its end.
"""

from __future__ import annotations

import contextlib
import os
import sys
from array import array
from pathlib import Path

from joulepool.files import write_atomically
from joulepool.ledger.sequence import split

EVERY = 4096
"""Entries between two offsets in the table: at most this many are read to reach an entry."""
MAGIC = b"joulepool offsets\n\x00\x01"
MAX_TABLE_BYTES = 64 << 20
CHUNK = 1 << 20


def table_path(ledger: Path) -> Path:
    """Where the offset table of the ledger file `ledger` lives: beside it."""
    return ledger.with_name(ledger.name + ".offsets")


def read_table(path: Path) -> array[int]:
    """The offsets of entries 0, `EVERY`, 2 `EVERY`, ...; empty where the file is missing
    or is not a table (DESIGN.md §4: a cache that cannot be read is not used)."""
    table: array[int] = array("Q")
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_TABLE_BYTES + 1)
    except OSError:
        return table
    body = data[len(MAGIC) :]
    if not data.startswith(MAGIC) or len(data) > MAX_TABLE_BYTES or len(body) % 8:
        return table
    table.frombytes(body)
    if sys.byteorder != "little":
        table.byteswap()
    return table


def write_table(path: Path, table: array[int]) -> None:
    """Keep `table` at `path` (DESIGN.md §4). A cache: a table that cannot be written is
    left as it was, and the next start reads the file the long way."""
    out = array("Q", table)
    if sys.byteorder != "little":
        out.byteswap()
    with contextlib.suppress(OSError):
        write_atomically(path, MAGIC + out.tobytes(), 0o644)


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
