"""Snapshots every N entries or T seconds: `pool serve --snapshot-every N` seals a state
snapshot of the fold each N entries, and the next start folds only the tail after it
(DESIGN.md §4)."""

from __future__ import annotations

import time
from pathlib import Path

from joulepool.ledger.snapshot import SnapshotFolder
from tests.support.servers import Deployment, admit_and_release, start_serve

MJ = 10**12


def test_design_s4_pool_serve_snapshot_every_seals_a_snapshot_each_n_entries(
    tmp_path: Path,
) -> None:
    d = Deployment.create(tmp_path / "dep")
    serve = start_serve(d.folder, "--snapshot-every", "4", "--snapshot-seconds", "3600")
    try:
        admit_and_release(serve, d.operator, 0, 9, MJ)
        folder = SnapshotFolder.beside(d.folder / "ledger.cbor")
        deadline = time.monotonic() + 30
        # A snapshot is due N entries after the last one and sealed at the first commit that
        # reaches it; commits batched under load may pass it, so the newest one lies within
        # N of the end, not at a multiple of N.
        while not folder.lengths() or folder.lengths()[0] <= 18 - 4:
            assert time.monotonic() < deadline, f"snapshots: {folder.lengths()}"
            time.sleep(0.1)
        # Sealed in the background at the first commit past each 4 entries: never far past.
        assert all(length >= 4 for length in folder.lengths())
        assert len(folder.lengths()) <= 3
    finally:
        serve.kill()
    again = start_serve(d.folder)
    try:
        with again.client(d.operator) as ops:
            ready = ops.get("/readyz").json()
            vision = ops.get("/v1/entitlements/vision").json()
        assert ready["length"] == 18
        assert ready["started_from"] == folder.lengths()[0]  # only the tail after it folded
        assert vision["usage"]["charged_uj"] == 9 * (MJ // 2)
    finally:
        again.kill()


def test_design_s4_pool_serve_refuses_a_snapshot_interval_that_is_not_positive(
    tmp_path: Path,
) -> None:
    import subprocess
    import sys

    d = Deployment.create(tmp_path / "dep")
    got = subprocess.run(
        [sys.executable, "-m", "joulepool", "serve", str(d.folder), "--snapshot-every", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert got.returncode == 2
    assert "--snapshot-every" in got.stderr and "'0' must be a positive" in got.stderr
    assert "Traceback" not in got.stderr
