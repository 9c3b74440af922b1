"""State snapshots: a start folds only the tail after the newest snapshot that counts
(DESIGN.md §4, "state snapshot"; standard §6.1: usage can always be rebuilt by replay)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from joulepool.claim import Claim
from joulepool.deployment.init import init_deployment
from joulepool.deployment.open import open_pool
from joulepool.grade import Energy, Grade
from joulepool.ledger.fold import StateCopy, capture
from joulepool.ledger.keys import KeyPair
from joulepool.ledger.rollback import LedgerRolledBack
from joulepool.ledger.snapshot import SnapshotFolder, encode_state, seal_snapshot
from joulepool.pool import Pool
from joulepool.stores.file import FileStore

EVERY = 8


def deployment(tmp_path: Path, claims: int = 30) -> Path:
    folder = tmp_path / "dep"
    init_deployment(folder, "steward")
    pool = open_pool(folder, snapshot_every=EVERY)
    try:
        for i in range(claims):
            decision = pool.submit(
                Claim(f"c{i}", "vision", 1, 1, Energy(5 + i, Grade.Estimator), "train")
            )
            if decision.seq is not None and i % 3:
                pool.release(f"c{i}", Energy(3 + i, Grade.HwShunt))
            # A snapshot due while one is still being written waits for the next commit;
            # on a busy machine that would skip some, so each is let finish here.
            pool.wait_for_snapshot()
    finally:
        pool.close()
    return folder


def full_replay(folder: Path) -> StateCopy:
    """The state replayed from entry 0, no snapshot involved."""
    reference = open_pool(folder, read_only=True)
    try:
        bare = Pool(
            reference.tree,
            reference.key,
            FileStore(folder / "ledger.cbor", writer=False),
            read_only=True,
            period=reference.schedule,
            keys=reference.keys,
        )
        try:
            assert bare.started_from == 0
            assert bare.state.claims is None  # no index given: every released claim in memory
            return capture(bare.state)
        finally:
            bare.close()
    finally:
        reference.close()


def state_of(pool: Pool) -> StateCopy:
    """The pool's folded state, its released claims read back from the claim index."""
    copy = capture(pool.state)
    claims = pool.state.claims
    return copy if claims is None else copy._replace(closed=dict(claims.items()))


def snapshots(folder: Path) -> SnapshotFolder:
    return SnapshotFolder.beside(folder / "ledger.cbor")


def test_design_s4_start_from_newest_snapshot_equals_full_replay(tmp_path: Path) -> None:
    folder = deployment(tmp_path)
    kept = snapshots(folder).lengths()
    assert len(kept) == 3  # the newest few, the rest pruned
    pool = open_pool(folder)
    try:
        assert pool.started_from == kept[0]
        assert pool.snapshot_warnings == []
        assert state_of(pool) == full_replay(folder)
        # It goes on deciding on the restored state, refusing a reused claim id (§6.4).
        with pytest.raises(Exception, match="admitted before"):
            pool.submit(Claim("c1", "vision", 1, 1, Energy(5, Grade.Estimator)))
    finally:
        pool.close()


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda raw: raw[:-1] + bytes([raw[-1] ^ 1]), "not the state it signed"),
        (lambda raw: b"\x00" + raw, "not a snapshot"),
        (lambda raw: b"", "not a snapshot"),
    ],
)
def test_design_s4_damaged_snapshot_is_skipped_never_trusted_in_part(
    tmp_path: Path, damage: object, why: str
) -> None:
    folder = deployment(tmp_path)
    store = snapshots(folder)
    newest, previous = store.lengths()[:2]
    path = store.folder / f"{newest:016d}.snapshot"
    path.write_bytes(damage(path.read_bytes()))  # type: ignore[operator]
    pool = open_pool(folder, read_only=True)
    try:
        assert pool.started_from == previous
        assert len(pool.snapshot_warnings) == 1
        assert f"snapshot at {newest}" in pool.snapshot_warnings[0]
        assert why in pool.snapshot_warnings[0]
        assert state_of(pool) == full_replay(folder)
    finally:
        pool.close()


def test_design_s4_snapshot_of_another_key_or_head_is_skipped(tmp_path: Path) -> None:
    folder = deployment(tmp_path)
    store = snapshots(folder)
    newest, middle, oldest = store.lengths()
    pool = open_pool(folder, read_only=True)
    state = capture(pool.state)
    pool.close()
    stranger = KeyPair.generate("steward")
    head = bytes(32)
    # The newest: signed by a key that is not the steward's.
    (store.folder / f"{newest:016d}.snapshot").write_bytes(
        seal_snapshot(stranger, newest, head, 1, pool.schedule, encode_state(state))
    )
    # The next: the steward's key would be needed; this one names a head the ledger lacks.
    steward = KeyPair.from_cose_key((folder / "steward.key").read_bytes())
    (store.folder / f"{middle:016d}.snapshot").write_bytes(
        seal_snapshot(
            steward, middle, head, 1, pool.schedule, encode_state(state._replace(length=middle))
        )
    )
    reopened = open_pool(folder, read_only=True)
    try:
        assert reopened.started_from == oldest
        warnings = " | ".join(reopened.snapshot_warnings)
        assert "signature does not verify" in warnings
        assert "head is not the ledger's head" in warnings
        assert state_of(reopened) == full_replay(folder)
    finally:
        reopened.close()


def test_design_s4_every_snapshot_bad_replays_from_entry_0(tmp_path: Path) -> None:
    folder = deployment(tmp_path)
    for path in snapshots(folder).folder.iterdir():
        path.write_bytes(b"junk")
    pool = open_pool(folder, read_only=True)
    try:
        assert pool.started_from == 0
        assert len(pool.snapshot_warnings) == 3
        assert state_of(pool) == full_replay(folder)
    finally:
        pool.close()


def test_design_s4_verify_replays_from_0_and_reports_a_snapshot_that_disagrees(
    tmp_path: Path,
) -> None:
    folder = deployment(tmp_path)
    pool_cmd = [sys.executable, "-m", "joulepool", "ledger", "verify", str(folder), "--json"]
    good = subprocess.run(pool_cmd, capture_output=True, text=True, check=False)
    assert good.returncode == 0, good.stderr
    rows = json.loads(good.stdout)["snapshots"]
    assert [r["agrees"] for r in rows] == [True, True, True]
    # A snapshot signed by the steward, at the right head, whose usage lies.
    store = snapshots(folder)
    pool = open_pool(folder, read_only=True)
    state, head, schedule = capture(pool.state), pool.head, pool.schedule
    pool.close()
    newest = state.length
    assert newest > store.lengths()[0]
    usage = dict(state.usage)
    usage["vision"] = (1, 0, 0, 0)
    lie = state._replace(usage=usage)
    steward = KeyPair.from_cose_key((folder / "steward.key").read_bytes())
    (store.folder / f"{newest:016d}.snapshot").write_bytes(
        seal_snapshot(steward, newest, head, 1, schedule, encode_state(lie))
    )
    bad = subprocess.run(pool_cmd, capture_output=True, text=True, check=False)
    assert bad.returncode == 1, bad.stdout
    out = json.loads(bad.stdout)
    assert out["ok"] is True  # the ledger itself verifies
    row = next(r for r in out["snapshots"] if r["length"] == newest)
    assert row["agrees"] is False
    assert "usage" in row["detail"]


def test_s6_1_a_snapshot_longer_than_the_ledger_is_a_rollback(tmp_path: Path) -> None:
    folder = deployment(tmp_path, claims=10)
    saved = tmp_path / "saved"
    saved.mkdir()
    for name in ("ledger.cbor", "ledger.cbor.hwm"):
        shutil.copy2(folder / name, saved / name)
    pool = open_pool(folder, snapshot_every=EVERY)
    for i in range(10, 25):
        pool.submit(Claim(f"c{i}", "robotics", 1, 1, Energy(5, Grade.Estimator)))
        pool.release(f"c{i}", Energy(5, Grade.HwShunt))
    pool.close()
    assert snapshots(folder).lengths()[0] > FileStore(saved / "ledger.cbor", writer=False).__len__()
    # The ledger and its high-water record both put back: only the snapshot remembers.
    for name in ("ledger.cbor", "ledger.cbor.hwm"):
        shutil.copy2(saved / name, folder / name)
    with pytest.raises(LedgerRolledBack, match="snapshot"):
        open_pool(folder)


def test_s6_4_released_claims_live_in_the_claim_index_not_the_heap(tmp_path: Path) -> None:
    folder = deployment(tmp_path)
    index = folder / "ledger.cbor.claims"
    assert index.is_file()
    pool = open_pool(folder)
    try:
        claims = pool.state.claims
        assert claims is not None
        assert pool.started_from > 0
        assert len(claims) == len(full_replay(folder).closed or {})
        # §6.4 across a restart from a snapshot: a released id is never admitted again.
        with pytest.raises(Exception, match="admitted before"):
            pool.submit(Claim("c2", "vision", 1, 1, Energy(5, Grade.Estimator)))
    finally:
        pool.close()


@pytest.mark.parametrize("damage", ["missing", "behind"])
def test_s6_4_claim_index_missing_or_behind_is_rebuilt_from_the_ledger(
    tmp_path: Path, damage: str
) -> None:
    import sqlite3

    folder = deployment(tmp_path)
    index = folder / "ledger.cbor.claims"
    if damage == "missing":
        for suffix in ("", "-wal", "-shm"):
            Path(f"{index}{suffix}").unlink(missing_ok=True)
    else:
        from joulepool.ledger.cose import content_address
        from joulepool.ledger.sequence import split

        raw = (folder / "ledger.cbor").read_bytes()
        third = raw[split(raw)[0][2] : split(raw)[0][3]]
        db = sqlite3.connect(index)
        # Behind, yet this ledger's: the head it records is the ledger's at its length.
        db.execute("UPDATE bound SET length = 3, head = ?", (content_address(third),))
        db.commit()
        db.close()
    pool = open_pool(folder)
    try:
        assert pool.started_from == 0  # no snapshot is usable without the index reaching it
        assert state_of(pool) == full_replay(folder)
        assert pool.state.claims is not None and pool.state.claims.covers == pool.length
    finally:
        pool.close()
    again = open_pool(folder)
    try:
        assert again.started_from > 0  # rebuilt, the next start uses the snapshot again
    finally:
        again.close()


def test_design_s4_hostile_snapshot_bytes_never_crash_a_start(tmp_path: Path) -> None:
    import random

    folder = deployment(tmp_path)
    store = snapshots(folder)
    newest = store.lengths()[0]
    path = store.folder / f"{newest:016d}.snapshot"
    original = path.read_bytes()
    expected = full_replay(folder)
    rng = random.Random(16)
    for _ in range(40):
        data = bytearray(original)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(data[: rng.choice([len(data), rng.randrange(len(data))])]))
        pool = open_pool(folder, read_only=True)
        try:
            assert pool.started_from != newest
            assert state_of(pool) == expected
        finally:
            pool.close()


def test_design_s4_a_state_past_the_item_size_limit_still_seals_and_opens() -> None:
    from joulepool.ledger.rotation import KeySchedule
    from joulepool.ledger.snapshot import open_snapshot
    from joulepool.periods import NONE

    key = KeyPair.from_seed("steward", bytes(32))
    state = bytes(3 << 20)  # 3 MiB: larger than any one CBOR item the profile accepts
    raw = seal_snapshot(key, 5, bytes(32), 1, NONE, state)
    snap = open_snapshot(raw, "steward", KeySchedule("steward", key.public_key))
    assert (snap.length, snap.state) == (5, state)


def _resealed(folder: Path, length: int, edit: object) -> None:
    """Rewrite the snapshot at `length` with its state array changed by `edit`, signed by
    the steward's own key, so that only the state's contents are in question."""
    import cbor2

    from joulepool.ledger.rotation import KeySchedule
    from joulepool.ledger.snapshot import open_snapshot

    path = snapshots(folder).folder / f"{length:016d}.snapshot"
    steward = KeyPair.from_cose_key((folder / "steward.key").read_bytes())
    snap = open_snapshot(path.read_bytes(), "steward", KeySchedule("steward", steward.public_key))
    body = cbor2.loads(snap.state)
    assert callable(edit)
    state = bytes(cbor2.dumps(edit(body)))
    pool = open_pool(folder, read_only=True)
    schedule = pool.schedule
    pool.close()
    path.write_bytes(seal_snapshot(steward, length, snap.head, snap.at_ms, schedule, state))


def test_s2_6_a_layout_1_snapshot_of_every_released_claim_is_still_read(tmp_path: Path) -> None:
    """Snapshots written before the fold kept counts and extremes listed every released
    claim; a start from one counts them and goes on from its length, no full replay."""
    folder = deployment(tmp_path)
    newest = snapshots(folder).lengths()[0]
    pool = open_pool(folder, read_only=True)
    released = [
        ["vision", s.released.actual.uj, s.released.actual.grade.value]
        for i in range(30)
        for s in (pool.claim_state(f"c{i}"),)
        if s is not None and s.released is not None and s.released_seq is not None
        if s.released_seq < newest
    ]
    pool.close()
    assert released
    _resealed(folder, newest, lambda body: [*body[:5], {"train": released}, body[6]])
    reopened = open_pool(folder, read_only=True)
    try:
        assert (reopened.started_from, reopened.snapshot_warnings) == (newest, [])
        assert state_of(reopened) == full_replay(folder)
    finally:
        reopened.close()


@pytest.mark.parametrize(
    ("tally", "why"),
    [
        ([1, 2, 3, 4], "2 evidence among 1 observations"),
        ([2, 1, 9, 3], "least evidence 9 above the greatest 3"),
        ([2, 0, 1, 1], "extremes without evidence"),
        ([2, 1, None, 3], "None is not a non-negative integer"),
    ],
)
def test_s2_6_a_snapshot_tally_no_fold_could_leave_is_refused_whole(
    tmp_path: Path, tally: list[object], why: str
) -> None:
    folder = deployment(tmp_path)
    newest, middle, _ = snapshots(folder).lengths()
    _resealed(folder, newest, lambda body: [*body[:5], {"train": {"vision": tally}}, *body[6:]])
    reopened = open_pool(folder, read_only=True)
    try:
        assert reopened.started_from == middle
        assert why in " | ".join(reopened.snapshot_warnings)
        assert state_of(reopened) == full_replay(folder)
    finally:
        reopened.close()


def test_s6_4_a_reload_under_another_period_keeps_released_claims_in_the_index(
    tmp_path: Path,
) -> None:
    """A changed period schedule replays the ledger to regroup it (DESIGN.md §3); which
    claims were released does not change, so they stay in the on-disk index, and claims
    released after the reload reach it too (never a heap set growing again)."""
    from joulepool.deployment.config import CONFIG, read_config
    from joulepool.periods import Schedule

    folder = deployment(tmp_path)
    pool = open_pool(folder, snapshot_every=EVERY)
    try:
        index = pool.state.claims
        assert index is not None
        pool.reload(dataclasses.replace(read_config(folder / CONFIG), period=Schedule("week")))
        assert pool.state.schedule == Schedule("week")
        assert pool.state.claims is index
        running = pool.state.open_claims()[0]
        pool.release(running, Energy(4, Grade.HwShunt))
        assert index.get(running) is not None and index.covers == pool.state.length
        with pytest.raises(Exception, match="was admitted before"):
            pool.submit(Claim("c1", "vision", 1, 1, Energy(5, Grade.Estimator)))
    finally:
        pool.close()
    assert state_of(open_pool(folder, read_only=True)) == full_replay(folder)


@pytest.mark.parametrize("shift", [(1, 0), (0, 1), (-1, -1), (10**9, 10**9 + 5)])
def test_design_s4_a_snapshot_naming_the_wrong_bytes_for_its_last_entry_costs_time_only(
    tmp_path: Path, shift: tuple[int, int]
) -> None:
    """Where a snapshot says its last entry lies is a hint for reading the ledger file from
    there: bytes that are not that entry (its content address is not the head) are not
    taken, and the start reads the file from byte 0 and still starts from the snapshot."""
    folder = deployment(tmp_path)
    newest = snapshots(folder).lengths()[0]

    def moved(body: list[object]) -> list[object]:
        bounds = body[8]
        assert isinstance(bounds, list)
        return [*body[:8], [bounds[0] + shift[0], bounds[1] + shift[1]], *body[9:]]

    _resealed(folder, newest, moved)
    reopened = open_pool(folder, read_only=True)
    try:
        assert reopened.started_from == newest
        assert state_of(reopened) == full_replay(folder)
    finally:
        reopened.close()


def test_design_s4_a_start_from_a_snapshot_reads_only_the_tail_of_the_ledger_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    folder = deployment(tmp_path, claims=60)
    newest = snapshots(folder).lengths()[0]
    ledger = folder / "ledger.cbor"
    with FileStore(ledger, writer=False) as store:
        start = store.offset(newest - 1)
    seen: list[tuple[str, int]] = []
    real_open, real_pread = os.open, os.pread
    fds: dict[int, str] = {}

    def spy_open(path: object, *args: object, **kwargs: object) -> int:
        fd = real_open(path, *args, **kwargs)  # type: ignore[arg-type]
        fds[fd] = str(path)
        return fd

    def spy_pread(fd: int, size: int, offset: int) -> bytes:
        seen.append((fds.get(fd, "?"), offset))
        return real_pread(fd, size, offset)

    monkeypatch.setattr(os, "open", spy_open)
    monkeypatch.setattr(os, "pread", spy_pread)
    pool = open_pool(folder)
    try:
        assert pool.started_from == newest
        assert min(offset for path, offset in seen if path == str(ledger)) == start
    finally:
        pool.close()
    monkeypatch.undo()
    assert state_of(open_pool(folder, read_only=True)) == full_replay(folder)


def test_design_s3_a_rebuild_off_the_lock_takes_in_what_was_appended_meanwhile(
    tmp_path: Path,
) -> None:
    """A changed period is replayed before the switch (`Pool.rebuild`), while the pool goes
    on deciding under the schedule in force; the switch folds what was appended since the
    rebuild read the ledger, and its released claims reach the index (docs/reliability.md
    §15): the state is the one a replay from entry 0 under the new schedule gives."""
    from joulepool.deployment.config import CONFIG, read_config
    from joulepool.periods import Schedule

    folder = deployment(tmp_path)
    pool = open_pool(folder, snapshot_every=EVERY)
    try:
        old = pool.state.schedule
        config = dataclasses.replace(read_config(folder / CONFIG), period=Schedule("week"))
        rebuilt = pool.rebuild(config)
        assert rebuilt is not None and rebuilt.length == pool.length
        # Meanwhile: decided under the schedule in force, a release among them.
        running = pool.state.open_claims()[0]
        pool.release(running, Energy(4, Grade.HwShunt))
        pool.submit(Claim("during", "vision", 1, 1, Energy(5, Grade.Estimator), "train"))
        assert pool.state.schedule == old and rebuilt.length == pool.length - 2
        pool.reload(config, rebuilt=rebuilt)
        assert pool.state.schedule == Schedule("week") and pool.state.length == rebuilt.length
        with pytest.raises(Exception, match="was released already"):
            pool.release(running, Energy(4, Grade.HwShunt))
        pool.release("during", Energy(4, Grade.HwShunt))
        assert pool.rebuild(config) is None  # nothing to rebuild under the schedule in force
    finally:
        pool.close()
    assert state_of(open_pool(folder, read_only=True)) == full_replay(folder)
