"""The ledger as a Merkle tree kept by `Pool` (DESIGN.md §8): leaf i is entry i's exact
bytes as stored; the tree follows every append, is carried in state snapshots, rebuilt by
replay, and `pool ledger verify` prints its size and root."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import cbor2

from joulepool.claim import Claim
from joulepool.deployment.init import init_deployment
from joulepool.deployment.open import open_pool
from joulepool.grade import Energy, Grade
from joulepool.ledger.keys import KeyPair
from joulepool.ledger.merkle import root_of
from joulepool.ledger.note import b64encode
from joulepool.ledger.rotation import KeySchedule
from joulepool.ledger.snapshot import SnapshotFolder, open_snapshot, seal_snapshot


def _deployment(tmp_path: Path, claims: int = 40, every: int = 8) -> Path:
    folder = tmp_path / "dep"
    init_deployment(folder, "steward")
    pool = open_pool(folder, snapshot_every=every)
    try:
        for i in range(claims):
            decision = pool.submit(Claim(f"c{i}", "vision", 1, 1, Energy(5 + i, Grade.Estimator)))
            if decision.seq is not None and i % 2:
                pool.release(f"c{i}", Energy(3 + i, Grade.HwShunt))
            pool.wait_for_snapshot()
    finally:
        pool.close()
    return folder


def _entries(folder: Path) -> list[bytes]:
    pool = open_pool(folder, read_only=True)
    try:
        return list(pool.entries())
    finally:
        pool.close()


def test_the_pools_tree_is_the_rfc9162_tree_of_its_entries_as_stored(tmp_path: Path) -> None:
    folder = _deployment(tmp_path)
    entries = _entries(folder)
    pool = open_pool(folder)
    try:
        assert pool.started_from > 0  # from a snapshot carrying the tree
        assert pool.merkle_head() == (len(entries), root_of(entries))
        pool.submit(Claim("late", "vision", 1, 1, Energy(7, Grade.Estimator)))
        after = list(pool.entries())
        assert pool.merkle_head() == (len(after), root_of(after))
    finally:
        pool.close()


def test_a_snapshot_without_a_tree_is_used_and_the_tree_rebuilt_from_the_ledger(
    tmp_path: Path,
) -> None:
    """A snapshot written before the tree was kept (state layout 2) still starts the pool
    from its length; the tree over the entries before it is rebuilt from their bytes."""
    folder = _deployment(tmp_path)
    entries = _entries(folder)
    snapshots = SnapshotFolder.beside(folder / "ledger.cbor")
    newest = snapshots.lengths()[0]
    path = snapshots.folder / f"{newest:016d}.snapshot"
    steward = KeyPair.from_cose_key((folder / "steward.key").read_bytes())
    snap = open_snapshot(path.read_bytes(), "steward", KeySchedule("steward", steward.public_key))
    body = cbor2.loads(snap.state)
    assert len(body) == 10 and body[9][0] == newest
    older = [*body[:7], 2, body[8]]
    pool = open_pool(folder, read_only=True)
    schedule = pool.schedule
    pool.close()
    path.write_bytes(
        seal_snapshot(steward, newest, snap.head, snap.at_ms, schedule, cbor2.dumps(older))
    )
    reopened = open_pool(folder, read_only=True)
    try:
        assert (reopened.started_from, reopened.snapshot_warnings) == (newest, [])
        assert reopened.merkle_head() == (len(entries), root_of(entries))
    finally:
        reopened.close()


def test_a_snapshot_whose_tree_disagrees_is_reported_by_verify(tmp_path: Path) -> None:
    """`pool ledger verify` replays from entry 0 and compares each snapshot's tree too, and
    prints the tree's size and root hash."""
    folder = _deployment(tmp_path)
    entries = _entries(folder)
    snapshots = SnapshotFolder.beside(folder / "ledger.cbor")
    newest = snapshots.lengths()[0]
    path = snapshots.folder / f"{newest:016d}.snapshot"
    steward = KeyPair.from_cose_key((folder / "steward.key").read_bytes())
    snap = open_snapshot(path.read_bytes(), "steward", KeySchedule("steward", steward.public_key))
    body = cbor2.loads(snap.state)
    size, hashes = body[9]
    body[9] = [size, [bytes(32)] * len(hashes)]
    pool = open_pool(folder, read_only=True)
    schedule = pool.schedule
    pool.close()
    path.write_bytes(
        seal_snapshot(steward, newest, snap.head, snap.at_ms, schedule, cbor2.dumps(body))
    )
    out = subprocess.run(
        [sys.executable, "-m", "joulepool", "ledger", "verify", str(folder), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 1, out.stderr  # a snapshot that disagrees fails the check
    report = json.loads(out.stdout)
    assert (report["tree_size"], report["root_hash"]) == (len(entries), b64encode(root_of(entries)))
    row = next(r for r in report["snapshots"] if r["length"] == newest)
    assert row == {
        "length": newest,
        "agrees": False,
        "detail": "differs from the replay in: merkle",
    }
    human = subprocess.run(
        [sys.executable, "-m", "joulepool", "ledger", "verify", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert f"size {len(entries)}, root {b64encode(root_of(entries))}" in human.stdout
