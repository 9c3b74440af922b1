"""Key rotation with PostgreSQL replicas (DESIGN.md §4): the ledger records the
steward key in force, so a replica that missed a rotation seals nothing after it, and the
ledger verifies under its rotation statements whatever the replicas did."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from tests.support.pg import pg_dsn, pg_ledger, pg_server
from tests.support.servers import Deployment, Serve, pool_cli, start_serve

__all__ = ["pg_dsn", "pg_ledger", "pg_server"]

pytestmark = pytest.mark.postgres

MJ = 10**12


def admit(serve: Serve, d: Deployment, claim: str) -> tuple[int, dict[str, object]]:
    body = {
        "id": claim,
        "entitlement": "vision",
        "gang_size": 1,
        "devices_per_member": 1,
        "estimate": {"uj": MJ, "grade": "HwShunt"},
    }
    with serve.client(d.operator) as ops:
        got = ops.post("/v1/claims", json=body)
    return got.status_code, got.json()


def test_design_s4_a_replica_that_missed_a_rotation_seals_nothing_after_it(
    tmp_path: Path, pg_dsn: str, pg_ledger: str
) -> None:
    d = Deployment.create(tmp_path / "d")
    args = ("--postgres", pg_dsn, "--ledger", pg_ledger)
    a = start_serve(d.folder, *args)
    b = start_serve(d.folder, *args)
    try:
        assert admit(a, d, "a-1")[0] == 200
        assert admit(b, d, "b-1")[0] == 200
        rotated = pool_cli("keys", "rotate", str(d.folder), "--pending", "--json")
        assert rotated.returncode == 0, rotated.stderr
        assert json.loads(rotated.stdout)["state"] == "pending"
        a.proc.send_signal(signal.SIGHUP)  # A puts the new key in force from entry 2
        deadline = time.monotonic() + 30
        while not (d.folder / "rotations" / "00000000.cose").exists():
            assert time.monotonic() < deadline, a.output()
            time.sleep(0.1)
        assert admit(a, d, "a-2")[0] == 200
        # B still holds the old key: refused, nothing sealed under it past the rotation.
        status, body = admit(b, d, "b-2")
        assert status == 503, body
        assert body["error"] == "steward_key_not_in_force"
        assert "restart it" in str(body["detail"])
        assert admit(a, d, "a-3")[0] == 200
    finally:
        b.kill()
    # B restarted with the deployment's rotations/ and steward.key seals again.
    b = start_serve(d.folder, *args)
    try:
        assert admit(b, d, "b-3")[0] == 200
    finally:
        b.kill()
        a.kill()
    out = tmp_path / "export.cbor"
    exported = pool_cli(
        "ledger",
        "export",
        str(out),
        *args[:2],
        "--ledger",
        pg_ledger,
        "--rotations",
        str(d.folder / "rotations"),
        "--json",
    )
    assert exported.returncode == 0, exported.stderr
    verified = pool_cli(
        "ledger",
        "verify",
        str(out),
        "--key",
        str(d.folder / "steward.pub"),
        "--rotations",
        f"{out}.rotations",
        "--json",
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert (json.loads(verified.stdout)["length"], json.loads(verified.stdout)["rotations"]) == (
        5,
        1,
    )
