"""The released-claim index beside a ledger file (§6.4, DESIGN.md §4): what a start does to
it stays the size of the tail it folds, however many claims the ledger released before."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from joulepool.stores.claim_index import ClaimIndex

TAIL = 50


def filled(path: Path, released: int) -> ClaimIndex:
    """An index of `released` claims, claim i admitted at 2i and released at 2i + 1."""
    index = ClaimIndex(path)
    index.begin()
    for i in range(released):
        index[f"job-{i:08d}"] = (2 * i, 2 * i + 1)
    index.flush(2 * released)
    return index


def steps_to_rebase(index: ClaimIndex, length: int) -> int:
    """SQLite virtual-machine steps (in hundreds) that cutting the index back to `length`
    takes: work, counted the same on a busy machine as on an idle one."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    index._db.set_progress_handler(count, 100)
    try:
        assert index.rebase(length)
    finally:
        index._db.set_progress_handler(None, 0)
    return steps


def test_s6_4_a_start_cuts_the_tail_rows_without_reading_every_claim(tmp_path: Path) -> None:
    work = []
    for released in (2_000, 40_000):
        index = filled(tmp_path / f"{released}.claims", released)
        try:
            work.append(steps_to_rebase(index, 2 * (released - TAIL)))
            # The tail's rows are gone, every row before them stays.
            assert len(index) == released - TAIL
            assert index.get(f"job-{released - TAIL - 1:08d}") is not None
            assert index.get(f"job-{released - TAIL:08d}") is None
        finally:
            index.close()
    small, large = work
    assert large <= 2 * small + 2, f"twenty times the history took {large} against {small}"


def test_s6_4_an_index_written_without_the_released_column_index_gains_it_and_binds_nothing(
    tmp_path: Path,
) -> None:
    """It gains the index on `released`; with no record of the ledger it covers, it covers
    nothing (DESIGN.md §4), so a start rebuilds it rather than trust it."""
    path = tmp_path / "old.claims"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute(
        "CREATE TABLE released (claim TEXT PRIMARY KEY, admitted INTEGER NOT NULL, "
        "released INTEGER NOT NULL) WITHOUT ROWID"
    )
    db.execute("CREATE TABLE covers (length INTEGER NOT NULL)")
    db.execute("INSERT INTO covers VALUES (4)")
    db.execute("INSERT INTO released VALUES ('a', 0, 1), ('b', 2, 3)")
    db.close()
    index = ClaimIndex(path)
    try:
        plan = index._db.execute(
            "EXPLAIN QUERY PLAN DELETE FROM released WHERE released >= 3"
        ).fetchall()
        assert "INDEX" in str(plan)
        assert index.covers == 0
        assert not index.rebase(3)
        assert dict(index.items()) == {}
    finally:
        index.close()
