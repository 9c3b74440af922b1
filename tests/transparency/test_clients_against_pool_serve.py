"""The tenant's clients against a real `pool serve` (DESIGN.md §8, API.md "Transparency";
docs/transparency.md): a claim's bundle from `GET /v1/claims/{id}/proof` verifies
under `pool proof check` with the key `pool keys vkey` prints, a tenant's plain id proven
by its namespaced entries; `pool proof follow` proves the ledger's growth round by round,
from the consistency endpoint and from the served tiles."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from joulepool.cli import main
from tests.support.servers import Deployment, Serve, admit_and_release, pool_cli, serving

# GET /checkpoint serves a checkpoint signed at most a second before (API.md).
LAG_S = 1.2


def test_a_tenant_checks_its_claims_bundle_and_follows_the_served_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = serving(tmp_path / "d")
    deployment, serve = next(run)
    try:
        _check_and_follow(deployment, serve, tmp_path, capsys)
    finally:
        run.close()


def _check_and_follow(
    deployment: Deployment, serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = serve.url
    vision = deployment.tenants["vision"]
    out = pool_cli("keys", "vkey", str(deployment.folder))
    assert out.returncode == 0, out.stderr
    vkey = out.stdout.strip()
    token = tmp_path / "vision.token"
    token.write_text(vision + "\n")
    os.chmod(token, 0o600)
    state = tmp_path / "kept"
    follow = ["proof", "follow", url, "--vkey", vkey, "--state", str(state), "--once"]
    follow += ["--token-file", str(token), "--json"]

    admit_and_release(serve, deployment.operator, 0, 3, 1_000)
    with serve.client(vision) as client:
        body = {
            "id": "mine",
            "entitlement": "vision",
            "gang_size": 1,
            "devices_per_member": 1,
            "estimate": {"uj": 10, "grade": "HwShunt"},
        }
        assert client.post("/v1/claims", json=body).json()["seq"] == 6
    assert main(follow) == 0
    assert json.loads(capsys.readouterr().out)["outcome"] == "first"

    with serve.client(vision) as client:
        job, mine = client.get("/v1/claims/job-1/proof"), client.get("/v1/claims/mine/proof")
    assert job.status_code == 200 and mine.status_code == 200, (job.text, mine.text)
    for name, answer, says in (
        ("job-1", job, "claim job-1: admitted at 2, released at 3"),
        ("mine", mine, "claim mine (as vision/mine): admitted at 6"),
    ):
        bundle = tmp_path / f"{name}.json"
        bundle.write_bytes(answer.content)
        assert main(["proof", "check", str(bundle), "--vkey", vkey]) == 0
        said = capsys.readouterr().out
        assert says in said, said

    admit_and_release(serve, deployment.operator, 3, 140, 1_000)
    time.sleep(LAG_S)
    assert main(follow) == 0
    grew = json.loads(capsys.readouterr().out)
    assert (grew["outcome"], grew["previous_size"], grew["size"]) == ("grew", 7, 287)

    admit_and_release(serve, deployment.operator, 143, 2, 1_000)
    time.sleep(LAG_S)
    assert main([*follow, "--tiles"]) == 0
    assert json.loads(capsys.readouterr().out)["size"] == 291
