"""Read-only commands on a deployment that `pool serve` is writing (standard §6.1).

`pool usage`, `pool estimate` and `pool ledger show/usage/verify` read the ledger file up to
its last whole entry without the writer's lock, and say that they read beside a writer.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from joulepool.deployment.config import LEDGER
from tests.support.servers import Deployment, pool_cli, start_serve

MJ = 1_000_000_000_000


def _json(*args: str) -> Any:
    proc = pool_cli(*args, "--json")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr
    return json.loads(proc.stdout)


def test_s6_1_readers_work_while_pool_serve_holds_the_ledger(tmp_path: Path) -> None:
    deployment = Deployment.create(tmp_path / "dep")
    folder = str(deployment.folder)
    serve = start_serve(deployment.folder)
    try:
        with serve.client(deployment.tenants["robotics"]) as client:
            for i in range(3):
                r = client.post(
                    "/v1/claims",
                    json={
                        "id": f"job-{i}",
                        "entitlement": "robotics",
                        "gang_size": 1,
                        "devices_per_member": 1,
                        "estimate": {"uj": MJ, "grade": "Estimator"},
                        "class": "train",
                    },
                )
                assert r.status_code == 200, r.text
        pid = serve.proc.pid
        usage = _json("usage", folder)
        assert usage["length"] == 3
        assert usage["read"] == {
            "ledger": str(deployment.folder / LEDGER),
            "length": 3,
            "writer_pid": pid,
        }
        robotics = next(e for e in usage["entitlements"] if e["id"] == "robotics")
        assert robotics["usage"]["reserved_uj"] == 3 * MJ
        estimate = pool_cli("estimate", folder, "train")
        assert estimate.returncode == 3, estimate.stderr  # no released runs yet: declined
        assert f"beside the running writer (pid {pid})" in estimate.stdout
        verify = _json("ledger", "verify", folder)
        assert verify["ok"] is True
        assert verify["length"] == 3
        assert verify["writer_pid"] == pid
        show = _json("ledger", "show", folder)
        assert [e["seq"] for e in show["entries"]] == [0, 1, 2]
        assert _json("ledger", "usage", folder)["writer_pid"] == pid
        human = pool_cli("usage", folder)
        assert f"beside the running writer (pid {pid})" in human.stdout

        # An append in flight (half an entry written, not yet acknowledged) is not damage to
        # a reader beside the writer: it reads the whole entries before it.
        ledger = deployment.folder / LEDGER
        whole = ledger.read_bytes()
        with ledger.open("ab") as fh:
            fh.write(whole[:40])
        try:
            assert _json("ledger", "verify", folder)["length"] == 3
            assert _json("usage", folder)["length"] == 3
        finally:
            os.truncate(ledger, len(whole))
    finally:
        serve.kill()
    # With no writer, the same readers say so.
    usage = _json("usage", folder)
    assert usage["read"]["writer_pid"] is None
    assert "no writer is running" in pool_cli("usage", folder).stdout
