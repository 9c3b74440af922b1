"""Run time over a real `pool serve` (API.md "Run time"; DESIGN.md §7): meter readings and
progress of running claims as soft state, the claim's own token, the claims list with its
live figures and filters, and `pool progress` from a job's environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from joulepool.deployment.claim_tokens import CLAIM_SECRET
from joulepool.deployment.config import CONFIG
from tests.support.servers import Deployment, Serve, pool_cli, start_serve

J = 10**6


def claim(claim_id: str, entitlement: str = "vision", uj: int = 100_000 * J) -> dict[str, object]:
    return {
        "id": claim_id,
        "entitlement": entitlement,
        "gang_size": 1,
        "devices_per_member": 1,
        "estimate": {"uj": uj, "grade": "HwShunt"},
    }


def reading(at_ms: int, uj: int, grade: str = "HwShunt", **extra: object) -> dict[str, object]:
    return {"at_ms": at_ms, "energy": {"uj": uj, "grade": grade}, "every_ms": 30_000, **extra}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Deployment, Serve]]:
    d = Deployment.create(tmp_path_factory.mktemp("run-time") / "d")
    config = d.folder / CONFIG
    config.write_text(
        config.read_text() + "\n[idle]\nwindow_us = 60000000\nthreshold_uw = 50000000\n"
    )
    serve = start_serve(d.folder)
    try:
        yield d, serve
    finally:
        serve.kill()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def test_run_time_a_running_claim_is_unknown_until_its_first_reading(
    served: tuple[Deployment, Serve],
) -> None:
    d, serve = served
    with serve.client(d.operator) as ops:
        assert ops.post("/v1/claims", json=claim("unread")).json()["verdict"] == "admit"
        live = ops.get("/v1/claims/unread").json()["live"]
    assert live["energy_uj"] is None and live["power_uw"] is None and live["units"] is None
    assert live["idle"] == {"verdict": "no_verdict", "reason": "no_reading"}
    assert live["realised_cost"] is None and live["exhausts_at_ms"] is None


def test_run_time_readings_give_power_verdict_share_and_exhaustion(
    served: tuple[Deployment, Serve],
) -> None:
    d, serve = served
    t = now_ms() - 90_000
    with serve.client(d.operator) as ops:
        assert ops.post("/v1/claims", json=claim("busy")).json()["verdict"] == "admit"
        job = {"id": "4242", "user": "ann", "name": "train"}
        for i, s in enumerate((0, 30, 60, 90)):
            body = reading(t + s * 1000, 300 * J * s)
            if i == 0:
                body["job"] = job
            assert ops.post("/v1/claims/busy/readings", json=body).status_code == 200
        live = ops.get("/v1/claims/busy").json()["live"]
        listed = ops.get("/v1/claims", params={"state": "running"}).json()["claims"]
    assert live["energy_uj"] == 27_000 * J and live["grade"] == "HwShunt"
    assert live["power_uw"] == 300_000_000
    assert live["idle"] == {"verdict": "working", "reason": None}
    assert live["reservation_used_pct"] == 27
    # 73 kJ left at 300 W: 243,333.33 ms after the last reading, rounded up.
    assert live["exhausts_at_ms"] == t + 90_000 + 243_334
    # Absent from the readings: no partition known; a job may be requeued unless told not.
    assert live["job"] == {
        "id": "4242",
        "user": "ann",
        "name": "train",
        "partition": None,
        "requeue": True,
    }
    # One answer everywhere: the list carries the same live object.
    assert next(c for c in listed if c["claim"] == "busy")["live"] == live


def test_run_time_a_hostile_or_backward_reading_is_refused_by_name(
    served: tuple[Deployment, Serve],
) -> None:
    d, serve = served
    t = now_ms()
    with serve.client(d.operator) as ops:
        assert ops.post("/v1/claims", json=claim("hostile")).json()["verdict"] == "admit"
        bad = ops.post("/v1/claims/hostile/readings", json=reading(t, -5))
        assert bad.status_code == 422 and "energy.uj" in bad.json()["detail"]
        assert ops.post("/v1/claims/hostile/readings", json=reading(t, 10 * J)).status_code == 200
        down = ops.post("/v1/claims/hostile/readings", json=reading(t + 1000, J))
        assert down.status_code == 409 and down.json()["error"] == "reading_decreased"
        ahead = ops.post("/v1/claims/hostile/readings", json=reading(t + 3_600_000, 20 * J))
        assert ahead.status_code == 422
        missing = ops.post("/v1/claims/nobody/readings", json=reading(t, 1))
        assert missing.status_code == 404 and missing.json()["error"] == "unknown_claim"
    with serve.client(d.tenants["vision"]) as tenant:
        assert tenant.post("/v1/claims/hostile/readings", json=reading(t, 1)).status_code == 403


def test_run_time_progress_by_the_claims_own_token_and_never_decreasing(
    served: tuple[Deployment, Serve],
) -> None:
    d, serve = served
    with serve.client(d.operator) as ops:
        assert ops.post("/v1/claims", json=claim("learner")).json()["verdict"] == "admit"
        assert ops.post("/v1/claims", json=claim("other")).json()["verdict"] == "admit"
        t = now_ms() - 30_000
        ops.post("/v1/claims/learner/readings", json=reading(t, 0))
        ops.post("/v1/claims/learner/readings", json=reading(t + 30_000, 3000 * J))
    made = pool_cli("claim-token", str(d.folder), "learner")
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert (d.folder / CLAIM_SECRET).stat().st_mode & 0o777 == 0o600
    with serve.client(token) as job:
        sent = job.post("/v1/claims/learner/progress", json={"units": 4, "total": 10})
        assert sent.status_code == 200, sent.text
        back = job.post("/v1/claims/learner/progress", json={"units": 3})
        assert back.status_code == 409 and back.json()["error"] == "progress_decreased"
        # The claim's token reports that claim's progress and nothing else.
        assert job.post("/v1/claims/other/progress", json={"units": 1}).status_code == 401
        assert job.get("/v1/claims/learner").status_code == 401
    with serve.client(d.operator) as ops:
        live = ops.get("/v1/claims/learner").json()["live"]
    assert (live["units"], live["unit"], live["total"]) == (4, "steps", 10)
    assert live["realised_cost"] == "750000000/1"


def test_run_time_pool_progress_reports_from_the_jobs_environment(
    served: tuple[Deployment, Serve],
) -> None:
    d, serve = served
    with serve.client(d.operator) as ops:
        assert ops.post("/v1/claims", json=claim("looped")).json()["verdict"] == "admit"
    token = pool_cli("claim-token", str(d.folder), "looped").stdout.strip()
    env = {**os.environ, "POOL_URL": serve.url, "POOL_CLAIM": "looped", "POOL_CLAIM_TOKEN": token}
    # The client must not pull in the web stack on every training step.
    probe = (
        "import sys; from joulepool.cli import main; rc = main(sys.argv[1:]); "
        "web = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('fastapi', 'starlette', 'httpx', 'uvicorn', 'rich', 'msgspec')); "
        "print(rc, web)"
    )
    run = [sys.executable, "-c", probe, "progress", "--units", "12", "--unit", "batches"]
    ok = subprocess.run(run, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert ok.stdout.strip() == "0 []", ok.stderr
    run[-3] = "11"
    back = subprocess.run(run, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert back.stdout.startswith("1 ") and "pool: progress_decreased:" in back.stderr
    bare = {k: v for k, v in env.items() if k != "POOL_CLAIM_TOKEN"}
    none = subprocess.run(run, env=bare, capture_output=True, text=True, timeout=60, check=False)
    assert "missing_environment: POOL_CLAIM_TOKEN" in none.stderr
    with serve.client(d.operator) as ops:
        live = ops.get("/v1/claims/looped").json()["live"]
    assert (live["units"], live["unit"]) == (12, "batches")


def test_run_time_the_list_filters_by_subtree_state_and_age_in_bounded_pages(
    served: tuple[Deployment, Serve],
) -> None:
    d, serve = served
    with serve.client(d.operator) as ops:
        for i in range(5):
            sent = ops.post("/v1/claims", json=claim(f"lang-{i}", "language"))
            assert sent.json()["verdict"] == "admit"
            if i == 0:  # language holds 4 devices
                done = {"actual": {"uj": J, "grade": "HwShunt"}}
                assert ops.post("/v1/claims/lang-0/release", json=done).status_code == 200
        first = ops.get("/v1/claims", params={"entitlement": "language", "limit": 2}).json()
        assert [c["claim"] for c in first["claims"]] == ["lang-0", "lang-1"]
        rest = ops.get(
            "/v1/claims", params={"entitlement": "language", "cursor": first["next_cursor"]}
        ).json()
        assert [c["claim"] for c in rest["claims"]] == ["lang-2", "lang-3", "lang-4"]
        assert rest["next_cursor"] is None
        assert "live" not in first["claims"][0] and "live" in first["claims"][1]
        running = ops.get("/v1/claims", params={"entitlement": "language", "state": "running"})
        assert [c["claim"] for c in running.json()["claims"]] == [f"lang-{i}" for i in (1, 2, 3, 4)]
        old = ops.get("/v1/claims", params={"entitlement": "language", "min_age_s": 3600})
        assert old.json()["claims"] == []
        for bad in ({"limit": 0}, {"limit": 5000}, {"min_age_s": "-1"}, {"state": "x"}, {"x": 1}):
            r = ops.get("/v1/claims", params=bad)
            assert r.status_code == 422, (bad, r.text)
    with serve.client(d.tenants["vision"]) as tenant:
        seen = tenant.get("/v1/claims").json()["claims"]
        assert seen and all(c["entitlement"] == "vision" for c in seen)
        assert tenant.get("/v1/claims", params={"entitlement": "language"}).status_code == 403


def test_run_time_release_forgets_the_live_state(served: tuple[Deployment, Serve]) -> None:
    d, serve = served
    with serve.client(d.operator) as ops:
        assert ops.post("/v1/claims", json=claim("ends")).json()["verdict"] == "admit"
        ops.post("/v1/claims/ends/readings", json=reading(now_ms(), J))
        ops.post("/v1/claims/ends/release", json={"actual": {"uj": J, "grade": "HwShunt"}})
        out = ops.get("/v1/claims/ends").json()
        assert out["state"] == "released" and "live" not in out
        late = ops.post("/v1/claims/ends/readings", json=reading(now_ms(), 2 * J))
        assert late.status_code == 409 and late.json()["error"] == "already_released"


def test_run_time_a_claim_secret_others_may_read_is_refused(tmp_path: Path) -> None:
    d = Deployment.create(tmp_path / "d")
    (d.folder / CLAIM_SECRET).chmod(0o644)
    out = pool_cli("claim-token", str(d.folder), "x")
    assert out.returncode == 1 and "chmod 600" in out.stderr and "Traceback" not in out.stderr


def test_run_time_pool_claims_reads_beside_pool_serve_and_asks_it_for_live_figures(
    served: tuple[Deployment, Serve], tmp_path: Path
) -> None:
    d, serve = served
    t = now_ms() - 60_000
    with serve.client(d.operator) as ops:
        assert ops.post("/v1/claims", json=claim("shown")).json()["verdict"] == "admit"
        ops.post("/v1/claims/shown/readings", json=reading(t, 0))
        ops.post("/v1/claims/shown/readings", json=reading(t + 60_000, 60 * J))
        api = ops.get("/v1/claims/shown").json()
    # Beside the running writer: no ledger_locked, and the same claim.
    local = pool_cli("claims", str(d.folder), "--state", "running", "--json")
    assert local.returncode == 0, local.stderr
    row = next(c for c in json.loads(local.stdout)["claims"] if c["claim"] == "shown")
    assert row["reserved"] == api["reserved"] and row["admitted_seq"] == api["admitted_seq"]
    one = pool_cli("claim", str(d.folder), "shown", "--json")
    assert one.returncode == 0 and json.loads(one.stdout)["state"] == "running"
    token = tmp_path / "ops.token"
    token.write_text(d.operator + "\n")
    token.chmod(0o600)
    asked = pool_cli("claims", "--url", serve.url, "--token-file", str(token), "--json")
    assert asked.returncode == 0, asked.stderr
    shown = next(c for c in json.loads(asked.stdout)["claims"] if c["claim"] == "shown")
    assert shown["live"] == api["live"] and shown["live"]["power_uw"] == 1_000_000
    human = pool_cli("claim", "shown", "--url", serve.url, "--token-file", str(token))
    assert human.returncode == 0 and "power 1.0 W" in human.stdout, human.stdout
    table = pool_cli("claims", "--url", serve.url, "--token-file", str(token), "--state", "running")
    assert table.returncode == 0 and "shown" in table.stdout and "so far" in table.stdout
    # Realised cost is undefined until a unit completes: an empty cell, then the API's text.
    before = next(line for line in table.stdout.splitlines() if line.split()[:1] == ["shown"])
    assert "cost" in table.stdout.splitlines()[1] and before.split()[-1] == "-", table.stdout
    with serve.client(d.operator) as ops:
        assert ops.post("/v1/claims/shown/progress", json={"units": 7}).status_code == 200
        cost = ops.get("/v1/claims/shown").json()["live"]["realised_cost"]
    assert cost == "60000000/7"
    again = pool_cli("claims", "--url", serve.url, "--token-file", str(token), "--state", "running")
    row = next(line for line in again.stdout.splitlines() if line.split()[:1] == ["shown"])
    assert row.split()[-2:] == [cost, "µJ/unit"], again.stdout
    nobody = pool_cli("claim", "nobody", "--url", serve.url, "--token-file", str(token))
    assert nobody.returncode == 1 and nobody.stderr.startswith("pool: unknown_claim:")


def test_run_time_metrics_add_up_the_same_live_figures_per_entitlement(
    served: tuple[Deployment, Serve],
) -> None:
    d, serve = served
    with serve.client(d.operator) as ops:
        listed = ops.get("/v1/claims", params={"state": "running", "limit": 1000}).json()
        text = ops.get("/metrics").text
    vision = [c for c in listed["claims"] if c["entitlement"] == "vision"]
    fresh = [c["live"]["energy_uj"] for c in vision if c["live"]["energy_uj"] is not None]
    samples = dict(
        line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#")
    )
    assert float(samples['pool_running_energy_joules{entitlement="vision"}']) == sum(fresh) / J
    assert int(float(samples['pool_running_read_claims{entitlement="vision"}'])) == len(fresh)
    unread = len(vision) - len(fresh)
    assert int(float(samples['pool_running_unread_claims{entitlement="vision"}'])) == unread
    idle = {
        k: int(float(v)) for k, v in samples.items() if k.startswith("pool_running_idle_claims{")
    }
    no_reading = (
        'pool_running_idle_claims{entitlement="vision",reason="no_reading",verdict="no_verdict"}'
    )
    counted = sum(1 for c in vision if c["live"]["idle"]["reason"] == "no_reading")
    assert idle[no_reading] == counted > 0
    assert sum(v for k, v in idle.items() if 'entitlement="vision"' in k) == len(vision)


def test_design_s7_after_a_restart_a_running_claim_is_unknown_until_its_next_reading(
    tmp_path: Path,
) -> None:
    d = Deployment.create(tmp_path / "d")
    serve = start_serve(d.folder)
    try:
        with serve.client(d.operator) as ops:
            assert ops.post("/v1/claims", json=claim("kept")).json()["verdict"] == "admit"
            ops.post("/v1/claims/kept/readings", json=reading(now_ms() - 1000, 0))
            ops.post("/v1/claims/kept/readings", json=reading(now_ms(), 5 * J))
            ops.post("/v1/claims/kept/progress", json={"units": 9})
            assert ops.get("/v1/claims/kept").json()["live"]["energy_uj"] == 5 * J
        serve.kill()
        serve = start_serve(d.folder)
        with serve.client(d.operator) as ops:
            live = ops.get("/v1/claims/kept").json()["live"]
            assert live["energy_uj"] is None and live["units"] is None
            assert live["idle"] == {"verdict": "no_verdict", "reason": "no_reading"}
            # Progress starts again from what the job says next, not from a forgotten 9.
            assert ops.post("/v1/claims/kept/progress", json={"units": 3}).status_code == 200
            ops.post("/v1/claims/kept/readings", json=reading(now_ms(), 6 * J))
            assert ops.get("/v1/claims/kept").json()["live"]["energy_uj"] == 6 * J
    finally:
        serve.kill()


def test_run_time_a_tenants_claim_is_read_progressed_and_listed_under_its_own_name(
    served: tuple[Deployment, Serve],
) -> None:
    d, serve = served
    with serve.client(d.tenants["robotics"]) as tenant:
        assert tenant.post("/v1/claims", json=claim("arm", "robotics")).json()["verdict"] == "admit"
    ledger_id = "robotics/arm"
    with serve.client(d.operator) as ops:
        sent = ops.post(f"/v1/claims/{ledger_id}/readings", json=reading(now_ms(), 7 * J))
        assert sent.status_code == 200, sent.text
    token = pool_cli("claim-token", str(d.folder), ledger_id).stdout.strip()
    env = {**os.environ, "POOL_URL": serve.url, "POOL_CLAIM": ledger_id, "POOL_CLAIM_TOKEN": token}
    run = [sys.executable, "-m", "joulepool", "progress", "--units", "2"]
    done = subprocess.run(run, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    with serve.client(d.tenants["robotics"]) as tenant:
        live = tenant.get("/v1/claims/arm").json()["live"]
        listed = tenant.get("/v1/claims", params={"state": "running"}).json()["claims"]
    assert (live["energy_uj"], live["units"]) == (7 * J, 2)
    assert [c["claim"] for c in listed] == ["arm"] and listed[0]["live"] == live


def test_run_time_an_unsafe_claim_secret_turns_claim_tokens_off_not_the_service(
    tmp_path: Path,
) -> None:
    d = Deployment.create(tmp_path / "d")
    token = pool_cli("claim-token", str(d.folder), "c").stdout.strip()
    (d.folder / CLAIM_SECRET).chmod(0o644)
    serve = start_serve(d.folder)
    try:
        with serve.client(d.operator) as ops:
            assert ops.post("/v1/claims", json=claim("c")).json()["verdict"] == "admit"
            assert ops.post("/v1/claims/c/progress", json={"units": 1}).status_code == 200
        with serve.client(token) as job:
            assert job.post("/v1/claims/c/progress", json={"units": 2}).status_code == 401
        assert "claim tokens are off" in serve.output() and "chmod 600" in serve.output()
    finally:
        serve.kill()


def test_run_time_an_operator_may_ask_for_the_claims_own_token_with_its_verdict(
    served: tuple[Deployment, Serve],
) -> None:
    d, serve = served
    with serve.client(d.operator) as ops:
        plain = ops.post("/v1/claims", json=claim("asked-0", "robotics")).json()
        assert "claim_token" not in plain
        asked = ops.post("/v1/claims?with=claim_token", json=claim("asked-1", "robotics")).json()
    expected = pool_cli("claim-token", str(d.folder), "asked-1").stdout.strip()
    assert asked["verdict"] == "admit" and asked["claim_token"] == expected
    with serve.client(asked["claim_token"]) as job:
        assert job.post("/v1/claims/asked-1/progress", json={"units": 1}).status_code == 200
    with serve.client(d.tenants["robotics"]) as tenant:
        mine = tenant.post("/v1/claims?with=claim_token", json=claim("asked-2", "robotics"))
        assert mine.status_code == 200 and "claim_token" not in mine.json()
