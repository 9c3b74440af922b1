"""Time faults on a PostgreSQL ledger (DESIGN.md §3): a replica started under a clock years
ahead of the shared ledger appends nothing until its clock is accepted, with
`pool ledger accept-clock DIR --postgres DSN --ledger NAME`, beside it and without a restart."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.pg import pg_dsn, pg_ledger, pg_server
from tests.support.servers import Deployment, Serve, admit_and_release, start_serve

__all__ = ["pg_dsn", "pg_ledger", "pg_server"]

LIBFAKETIME = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
pytestmark = pytest.mark.skipif(
    shutil.which("faketime") is None or not LIBFAKETIME,
    reason="needs a wrong clock: the faketime package (apt-get install faketime)",
)


def readyz_says(serve: Serve, code: str, timeout_s: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    said: dict[str, Any] = {}
    while time.monotonic() < deadline:
        assert serve.proc.poll() is None, serve.output()
        try:
            said = httpx.get(f"{serve.url}/readyz", timeout=2).json()
        except httpx.TransportError:
            said = {}
        if said.get("error", said.get("status")) == code:
            return said
        time.sleep(0.1)
    raise AssertionError(f"/readyz never said {code}: {said}\n{serve.output()}")


def test_a_replica_years_ahead_appends_nothing_until_its_clock_is_accepted(
    tmp_path: Path, pg_dsn: str, pg_ledger: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = Deployment.create(tmp_path / "d")
    args = ("--postgres", pg_dsn, "--ledger", pg_ledger)
    serve = start_serve(d.folder, *args)
    try:
        admit_and_release(serve, d.operator, 0, 1, 1_000_000)
    finally:
        serve.kill()
    monkeypatch.setenv("LD_PRELOAD", LIBFAKETIME[0])
    monkeypatch.setenv("FAKETIME", "+4y")
    serve = start_serve(d.folder, *args, wait=False)
    try:
        said = readyz_says(serve, "clock_jump")
        assert "2030-" in said["detail"]
        with serve.client(d.operator) as ops:
            body = {
                "id": "late",
                "entitlement": "vision",
                "gang_size": 1,
                "devices_per_member": 1,
                "estimate": {"uj": 1_000, "grade": "HwShunt"},
            }
            refused = ops.post("/v1/claims", json=body)
            assert (refused.status_code, refused.json()["error"]) == (503, "clock_jump")
            accepted = subprocess.run(
                [sys.executable, "-m", "joulepool", "ledger", "accept-clock", str(d.folder), *args],
                capture_output=True,
                text=True,
                check=False,
                stdin=subprocess.DEVNULL,
                timeout=120,
                env=dict(os.environ),
            )
            assert accepted.returncode == 0, accepted.stderr
            assert "at length 2" in accepted.stderr
            readyz_says(serve, "ready")
            assert ops.post("/v1/claims", json=body).json()["verdict"] == "admit"
    finally:
        serve.kill()
    assert "Traceback" not in serve.output()
