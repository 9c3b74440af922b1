"""The offset table beside a ledger file (DESIGN.md §4): a start from a snapshot checks a
mark older than the snapshot (§6.1) by reading from the table's nearest offset, not from
byte 0; a table that does not fit the file costs a scan, never another answer."""

from __future__ import annotations

from array import array
from functools import cache
from pathlib import Path

import pytest

from joulepool.ledger.cose import content_address
from joulepool.ledger.keys import KeyPair
from joulepool.ledger.rollback import HighWater, LedgerRolledBack, Mark
from joulepool.stores.base import refuse_rollback
from joulepool.stores.file import FileStore
from joulepool.stores.highwater import HighWaterFile, record_path
from joulepool.stores.offset_table import (
    EVERY,
    binding,
    read_bound,
    read_table,
    table_path,
    write_table,
)
from tests.support.ledgers import STEWARD, admitted, seal_all

LENGTH = 2 * EVERY + 300
SNAPSHOT = LENGTH - 50


@cache
def sealed() -> tuple[bytes, ...]:
    return tuple(seal_all([admitted(f"c{i}") for i in range(LENGTH)]))


def ledger(tmp_path: Path) -> Path:
    """A ledger file of `LENGTH` entries with its high-water record, and its table."""
    raws = sealed()
    path = tmp_path / "ledger.cbor"
    path.write_bytes(b"".join(raws))
    HighWaterFile.create(record_path(path), HighWater(LENGTH, content_address(raws[-1]))).close()
    FileStore(path).close()  # a writer that reads every offset keeps the table
    return path


def from_snapshot(path: Path) -> FileStore:
    """A writer opened as a start from a snapshot at `SNAPSHOT` opens it."""
    raws = sealed()
    start = sum(map(len, raws[: SNAPSHOT - 1]))
    store = FileStore(path, deferred=True)
    assert store.resume(SNAPSHOT, start, start + len(raws[SNAPSHOT - 1]), head(SNAPSHOT))
    return store


def head(length: int) -> bytes:
    return content_address(sealed()[length - 1])


def mark(length: int, at: bytes | None = None) -> Mark:
    return Mark(f"a receipt at {length}", HighWater(length, at or head(length)))


def test_design_s4_a_writer_that_read_every_offset_keeps_every_4096th(tmp_path: Path) -> None:
    path = ledger(tmp_path)
    offsets = [0]
    for raw in sealed()[:-1]:
        offsets.append(offsets[-1] + len(raw))
    assert read_table(table_path(path)) == array("Q", offsets[::EVERY])


@pytest.mark.parametrize("length", [1, EVERY, EVERY + 1, 2 * EVERY + 7, SNAPSHOT - 1])
def test_s6_1_a_mark_older_than_the_snapshot_is_checked_without_reading_from_byte_0(
    tmp_path: Path, length: int
) -> None:
    with from_snapshot(ledger(tmp_path)) as store:
        refuse_rollback(store, [mark(length)])
        assert store._view is not None and store._view[0] == SNAPSHOT - 1  # no scan from 0
        with pytest.raises(LedgerRolledBack, match=f"after {length} entries"):
            refuse_rollback(store, [mark(length, head(length + 1))])


@pytest.mark.parametrize("table", ["missing", "garbage", "another file's", "shifted"])
def test_design_s4_a_table_that_does_not_fit_costs_a_scan_never_an_answer(
    tmp_path: Path, table: str
) -> None:
    path = ledger(tmp_path)
    kept = table_path(path)
    if table == "missing":
        kept.unlink()
    elif table == "garbage":
        kept.write_bytes(b"\x07" * 100)
    elif table == "another file's":
        write_table(kept, array("Q", [0, 17, 29]))
    else:
        write_table(kept, array("Q", [o + 1 for o in read_table(kept)]))
    with from_snapshot(path) as store:
        refuse_rollback(store, [mark(EVERY + 9)])
        with pytest.raises(LedgerRolledBack):
            refuse_rollback(store, [mark(EVERY + 9, head(EVERY + 8))])
    with from_snapshot(path) as again:  # the scan kept the table that fits
        refuse_rollback(again, [mark(EVERY + 9)])
        assert again._view is not None and again._view[0] == SNAPSHOT - 1


def test_design_s4_a_table_short_of_a_newer_mark_grows_to_it(tmp_path: Path) -> None:
    path = ledger(tmp_path)
    kept = table_path(path)
    short = read_table(kept)[:1]
    with path.open("rb") as fh:
        write_table(kept, short, binding(fh.fileno(), short, path.stat().st_size))
    with from_snapshot(path) as store:
        refuse_rollback(store, [mark(2 * EVERY + 5)])
        assert store._view is not None and store._view[0] == SNAPSHOT - 1
    assert len(read_table(kept)) == 3


@pytest.mark.parametrize("other", ["another steward's", "unbound"])
def test_design_s4_a_table_not_bound_to_this_ledger_is_discarded_and_rebuilt(
    tmp_path: Path, other: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Offsets that land on entry boundaries here (the same sizes) but cover another
    ledger are not used: the table is bound to the steward, length and head it covers."""
    path = ledger(tmp_path)
    kept = table_path(path)
    offsets, ours = read_bound(kept)
    assert ours is not None and ours[0] == STEWARD.kid and ours[1] == 2 * EVERY + 1
    if other == "unbound":
        write_table(kept, offsets)
    else:
        theirs = tmp_path / "theirs" / "ledger.cbor"
        theirs.parent.mkdir()
        key = KeyPair.from_seed(STEWARD.kid, bytes(range(1, 33)))
        theirs.write_bytes(b"".join(seal_all([admitted(f"c{i}") for i in range(LENGTH)], key)))
        with theirs.open("rb") as fh:
            write_table(kept, offsets, binding(fh.fileno(), offsets, theirs.stat().st_size))
    with from_snapshot(path) as store:
        refuse_rollback(store, [mark(EVERY + 9)])
        assert store._view is not None and store._view[0] == 0  # read the long way
    assert "offset table is not this ledger's" in caplog.text
    assert read_bound(kept) == (offsets, ours)  # the scan rebuilt it, bound to this ledger
