"""Every cache beside the ledger is bound to the steward, the length and the head it covers
(DESIGN.md §4): a claim-id index copied from another deployment, or from a ledger holding
the same claim ids at other positions, is discarded and rebuilt from the ledger, never
trusted. Real `pool serve` processes, each starting from its own signed snapshot."""

from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path
from typing import Any

from joulepool.ledger.snapshot import SnapshotFolder
from tests.support.servers import Deployment, Serve, pool_cli, start_serve

MJ = 10**12
CLAIMS = 40


def run(d: Deployment, ids: list[str], held: str | None = None) -> None:
    """Admit and release each of `ids` (after admitting `held`, left running) through a real
    `pool serve` that seals snapshots, then stop it cleanly (the index's file is then whole,
    with no write-ahead log beside)."""
    serve = start_serve(d.folder, "--snapshot-every", "10", "--snapshot-seconds", "3600")
    try:
        with serve.client(d.operator) as ops:
            for claim in [held, *ids] if held is not None else ids:
                body = {
                    "id": claim,
                    "entitlement": "vision",
                    "gang_size": 1,
                    "devices_per_member": 1,
                    "estimate": {"uj": MJ, "grade": "HwShunt"},
                }
                assert ops.post("/v1/claims", json=body).json()["verdict"] == "admit"
                if claim == held:
                    continue
                release = {"actual": {"uj": MJ // 2, "grade": "HwShunt"}}
                assert ops.post(f"/v1/claims/{claim}/release", json=release).status_code == 200
        folder = SnapshotFolder.beside(d.folder / "ledger.cbor")
        deadline = time.monotonic() + 30
        while not folder.lengths():
            assert time.monotonic() < deadline, "no snapshot was sealed"
            time.sleep(0.1)
    finally:
        serve.kill(signal.SIGTERM)


def copy_index(source: Deployment, target: Deployment) -> None:
    """The attack: another deployment's claim index put beside this one's ledger."""
    for suffix in ("-wal", "-shm"):
        (target.folder / f"ledger.cbor.claims{suffix}").unlink(missing_ok=True)
    shutil.copyfile(source.folder / "ledger.cbor.claims", target.folder / "ledger.cbor.claims")


def answers(serve: Serve, token: str, ids: list[str]) -> list[tuple[int, Any]]:
    """What GET says of each claim, and what a second release of it answers."""
    out = []
    with serve.client(token) as ops:
        for claim in ids:
            got = ops.get(f"/v1/claims/{claim}")
            release = {"actual": {"uj": MJ // 2, "grade": "HwShunt"}}
            again = ops.post(f"/v1/claims/{claim}/release", json=release)
            out.append((got.status_code, got.json()))
            out.append((again.status_code, again.json()))
    return out


def test_design_s4_another_deployments_claim_index_is_discarded_and_rebuilt(
    tmp_path: Path,
) -> None:
    ours = Deployment.create(tmp_path / "ours")
    theirs = Deployment.create(tmp_path / "theirs")
    ids = [f"job-{i}" for i in range(CLAIMS)]
    run(ours, ids)
    # Another deployment, as long or longer, with other claim ids.
    run(theirs, [f"other-{i}" for i in range(CLAIMS + 5)])
    copy_index(theirs, ours)

    serve = start_serve(ours.folder)
    try:
        with serve.client(ours.operator) as ops:
            for claim in ids:
                got = ops.get(f"/v1/claims/{claim}")
                assert got.status_code == 200, (claim, got.status_code, got.text)
                again = {
                    "id": claim,
                    "entitlement": "vision",
                    "gang_size": 1,
                    "devices_per_member": 1,
                    "estimate": {"uj": MJ, "grade": "HwShunt"},
                }
                readmit = ops.post("/v1/claims", json=again)
                assert readmit.json().get("verdict") != "admit", (claim, readmit.text)
        assert "claim index is discarded and rebuilt" in serve.output()
    finally:
        serve.kill(signal.SIGTERM)
    verified = pool_cli("ledger", "verify", str(ours.folder))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert ours.folder.joinpath("ledger.cbor").stat().st_size > 0


def test_design_s4_a_claim_index_with_the_same_ids_at_other_positions_is_not_trusted(
    tmp_path: Path,
) -> None:
    ours = Deployment.create(tmp_path / "ours")
    theirs = Deployment.create(tmp_path / "theirs")
    ids = [f"job-{i}" for i in range(CLAIMS)]
    run(ours, ids)
    before = start_serve(ours.folder)
    try:
        expected = answers(before, ours.operator, ids)
    finally:
        before.kill(signal.SIGTERM)
    # The same claim ids, each one entry later than in our ledger: where ours has a claim's
    # admission, theirs has a release.
    run(theirs, ids, held="pad")
    copy_index(theirs, ours)

    serve = start_serve(ours.folder)
    try:
        got = answers(serve, ours.operator, ids)
        assert all(status < 500 for status, _ in got), serve.output()
        assert got == expected
    finally:
        serve.kill(signal.SIGTERM)
    verified = pool_cli("ledger", "verify", str(ours.folder))
    assert verified.returncode == 0, verified.stdout + verified.stderr
