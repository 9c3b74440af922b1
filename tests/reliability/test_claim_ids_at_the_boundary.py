"""Claim ids at a trust boundary (API.md "Additions"; claim_id.py).

Found: a tenant could have claims admitted whose ids contain `/` (then unreadable and
unreleasable), run to megabytes, or carry terminal escapes, NUL or U+202E that `pool
ledger show` wrote raw; and one global namespace let a tenant probe and squat any other
team's ids. Every surface that accepts a claim now checks one alphabet, and a tenant's
ids live in its own namespace.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from joulepool.bridges.slurm.config import BridgeConfigError, read_bridge_config
from joulepool.claim import Claim
from joulepool.claim_id import MAX_CLAIM_ID_BYTES, check_claim_id, printable
from joulepool.deployment.config import EXAMPLE_TREE
from joulepool.errors import InvalidInput
from joulepool.events import Event
from joulepool.grade import Energy, Grade
from joulepool.ledger.keys import write_key_file
from joulepool.pool import Pool
from joulepool.stores.memory import MemoryStore
from tests.support.ledgers import STEWARD, admitted, released, seal_all
from tests.support.servers import Deployment, Serve, pool_cli, serving

BAD_IDS = {
    "slash": ("a/b", "'/'"),
    "too long": ("x" * (MAX_CLAIM_ID_BYTES + 1), "at most 256 bytes"),
    "too long in UTF-8": ("é" * 129, "at most 256 bytes"),
    "terminal escape": ("job\x1b[31m", "printable"),
    "NUL": ("job\x00", "printable"),
    "right-to-left override": ("job\u202egpj", "printable"),
    "zero-width space": ("job\u200b", "printable"),
    "newline": ("job\n1", "printable"),
    "lone surrogate": ("job\udc80", "UTF-8"),
}


def claim_json(claim_id: str, entitlement: str = "vision") -> dict[str, Any]:
    return {
        "id": claim_id,
        "entitlement": entitlement,
        "gang_size": 1,
        "devices_per_member": 1,
        "estimate": {"uj": 1000, "grade": "HwShunt"},
    }


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Deployment, Serve]]:
    yield from serving(tmp_path_factory.mktemp("ids") / "dep")


# -- the alphabet, at every surface ------------------------------------------------------


@pytest.mark.parametrize("name", sorted(BAD_IDS))
def test_check_claim_id_names_the_rule(name: str) -> None:
    bad, rule = BAD_IDS[name]
    with pytest.raises(InvalidInput) as caught:
        check_claim_id(bad)
    assert rule in str(caught.value)
    assert bad not in str(caught.value) or len(bad) < 8  # never echoes a hostile id whole


def test_the_longest_and_the_oddest_good_ids_pass() -> None:
    for good in ("é" * 128, "x" * MAX_CLAIM_ID_BYTES, "job 1", "ジョブ-1", "a:b@c+d", "日本"):
        assert check_claim_id(good) == good


@pytest.mark.parametrize("name", sorted(BAD_IDS))
def test_the_api_refuses_each_bad_id_as_invalid_input(
    served: tuple[Deployment, Serve], name: str
) -> None:
    deployment, serve = served
    bad, rule = BAD_IDS[name]
    for token in (deployment.tenants["vision"], deployment.operator):
        with serve.client(token) as c:
            body = json.dumps(claim_json(bad)).encode("utf-8", "surrogatepass")
            r = c.post("/v1/claims", content=body, headers={"content-type": "application/json"})
            assert r.status_code == 422, (name, r.text)
            assert r.json()["error"] == "invalid_input"
            if name != "lone surrogate":  # JSON decoding refuses it first, by position
                assert rule in r.json()["detail"]


def test_pool_and_the_cli_refuse_each_bad_id(tmp_path: Path) -> None:
    pool = Pool(EXAMPLE_TREE, STEWARD, MemoryStore())
    for bad, rule in BAD_IDS.values():
        with pytest.raises(InvalidInput) as caught:
            pool.submit(Claim(bad, "vision", 1, 1, Energy(10, Grade.HwShunt)))
        assert rule in str(caught.value)
    assert pool.length == 0
    Deployment.create(tmp_path / "dep")
    for bad in ("a/b", "job\x1b[31m", "x" * 300):
        done = pool_cli(
            "admit",
            str(tmp_path / "dep"),
            "--id",
            bad,
            "--entitlement",
            "vision",
            "--estimate-uj",
            "10",
            "--grade",
            "HwShunt",
        )
        assert done.returncode != 0
        assert "invalid_input" in done.stderr and "\x1b" not in done.stderr
        assert "Traceback" not in done.stderr


def test_eight_megabyte_ids_hold_no_devices(served: tuple[Deployment, Serve]) -> None:
    """Found: eight 1 MiB ids held all of a team's devices for good."""
    deployment, serve = served
    with serve.client(deployment.tenants["robotics"]) as c:
        for i in range(8):
            r = c.post("/v1/claims", json=claim_json(f"{i}" + "x" * 2**20, "robotics"))
            assert r.status_code == 413 and r.json()["error"] == "body_too_large"
        held = c.get("/v1/entitlements/robotics").json()["usage"]["held_devices"]
    assert held == 0


def test_the_slurm_bridge_refuses_a_cluster_that_would_make_bad_ids(tmp_path: Path) -> None:
    config = tmp_path / "bridge.toml"
    for cluster in ("a/b", "x" * 65, "sp ace"):
        config.write_text(
            f'[pool]\nurl = "http://127.0.0.1:7460"\ntoken_file = "/t"\ncluster = {json.dumps(cluster)}\n'
        )
        with pytest.raises(BridgeConfigError) as caught:
            read_bridge_config(config)
        assert "pool.cluster" in str(caught.value)


def test_human_output_escapes_what_an_older_ledger_holds(tmp_path: Path) -> None:
    hostile = ["job\x1b[2J\x1b[31m", "nul\x00id", "evil\u202egpj.exe", "bell\x07"]
    events: list[Event] = []
    for claim in hostile:
        events += [admitted(claim), released(claim)]
    ledger = tmp_path / "old.cbor"
    ledger.write_bytes(b"".join(seal_all(events)))
    write_key_file(tmp_path / "steward.pub", STEWARD.public())
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "joulepool",
            "ledger",
            "show",
            str(ledger),
            "--key",
            str(tmp_path / "steward.pub"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "400"},  # wide enough that no id is cut short
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for claim in hostile:
        assert claim not in done.stdout
        assert printable(claim) in done.stdout
    for raw in ("\x1b", "\x00", "\u202e", "\x07"):
        assert raw not in done.stdout
    # The JSON output carries the ids exactly, escaped as JSON does.
    shown = pool_cli(
        "ledger", "show", str(ledger), "--key", str(tmp_path / "steward.pub"), "--json"
    )
    assert [e["claim"] for e in json.loads(shown.stdout)["entries"][::2]] == hostile


# -- namespaces: a tenant sees and blocks only its own ids -------------------------------


def test_an_id_held_by_another_team_is_a_free_id(served: tuple[Deployment, Serve]) -> None:
    deployment, serve = served
    with serve.client(deployment.tenants["vision"]) as vision:
        first = vision.post("/v1/claims", json=claim_json("train-7"))
        assert first.status_code == 200 and first.json()["claim"] == "train-7"
        again = vision.post("/v1/claims", json=claim_json("train-7"))
        assert again.status_code == 409 and again.json()["error"] == "claim_exists"
    with serve.client(deployment.tenants["language"]) as language:
        held = language.post("/v1/claims", json=claim_json("train-7", "language"))
        free = language.post("/v1/claims", json=claim_json("never-used", "language"))
        # Both ids are admitted alike: nothing tells language that vision holds train-7.
        assert held.status_code == free.status_code == 200
        assert held.json()["verdict"] == free.json()["verdict"] == "admit"
        mine = language.get("/v1/claims/train-7").json()
        assert mine["claim"] == "train-7" and mine["entitlement"] == "language"
        # Vision's claim, named in full, is answered exactly like a claim that never was.
        theirs = language.get("/v1/claims/vision/train-7")
        nobody = language.get("/v1/claims/vision/no-such-claim")
        assert theirs.status_code == nobody.status_code == 404
        assert theirs.json()["error"] == nobody.json()["error"] == "unknown_claim"
    with serve.client(deployment.tenants["vision"]) as vision:
        own = vision.get("/v1/claims/train-7").json()
        assert own["entitlement"] == "vision" and own["claim"] == "train-7"


def test_operators_and_parents_reach_a_tenants_claims_by_their_full_id(
    served: tuple[Deployment, Serve],
) -> None:
    deployment, serve = served
    research = deployment.add_token("research", "tenant:research")
    serve.proc.send_signal(signal.SIGHUP)  # the new token takes effect on reload
    with serve.client(deployment.tenants["vision"]) as vision:
        assert vision.post("/v1/claims", json=claim_json("eval-3")).status_code == 200
    with serve.client(research) as parent:
        for _ in range(100):
            seen = parent.get("/v1/claims/vision/eval-3")
            if seen.status_code != 401:
                break
            time.sleep(0.05)
        assert seen.status_code == 200 and seen.json()["entitlement"] == "vision"
    with serve.client(deployment.operator) as ops:
        assert ops.get("/v1/claims/vision/eval-3").json()["claim"] == "vision/eval-3"
        done = ops.post(
            "/v1/claims/vision/eval-3/release", json={"actual": {"uj": 10, "grade": "HwShunt"}}
        )
        assert done.status_code == 200 and done.json()["claim"] == "vision/eval-3"
        # An operator may not make a namespaced id outside its namespace's subtree.
        wrong = ops.post("/v1/claims", json=claim_json("vision/x", "language"))
        assert wrong.status_code == 422 and "subtree" in wrong.json()["detail"]
        nowhere = ops.post("/v1/claims", json=claim_json("nobody/x", "language"))
        assert nowhere.status_code == 422 and "namespace" in nowhere.json()["detail"]


def test_a_tenant_reads_a_claim_an_operator_admitted_for_it_by_its_plain_id(
    served: tuple[Deployment, Serve],
) -> None:
    """The Slurm bridge submits with an operator token: the team still sees its jobs."""
    deployment, serve = served
    with serve.client(deployment.operator) as ops:
        assert ops.post("/v1/claims", json=claim_json("slurm-c-42")).status_code == 200
    with serve.client(deployment.tenants["vision"]) as vision:
        seen = vision.get("/v1/claims/slurm-c-42")
        assert seen.status_code == 200 and seen.json()["claim"] == "slurm-c-42"
        # Its own namespace comes first: the same plain id of its own is a different claim.
        assert vision.post("/v1/claims", json=claim_json("slurm-c-42")).status_code == 200
        assert (
            vision.get("/v1/claims/slurm-c-42").json()["admitted_seq"] > seen.json()["admitted_seq"]
        )
    with serve.client(deployment.tenants["language"]) as language:
        other = language.get("/v1/claims/slurm-c-42")
        assert other.status_code == 404 and other.json()["error"] == "unknown_claim"
