"""The reservation as a limit over a real `pool serve` (DESIGN.md §7; API.md "Run time"):
what is due from measured, fresh readings, the action log a bridge reports into, each act
once per claim across restarts, acts withheld on estimates, stale or missing readings (once
per change of state), one answer from the HTTP API, `pool actions` and `/metrics`."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from joulepool.deployment.actions import ACTIONS
from joulepool.deployment.config import CONFIG
from tests.support.servers import Deployment, pool_cli, sighup, start_serve

J = 10**6
RESERVED = 100_000 * J


def claim(claim_id: str, entitlement: str = "vision") -> dict[str, object]:
    return {
        "id": claim_id,
        "entitlement": entitlement,
        "gang_size": 1,
        "devices_per_member": 1,
        "estimate": {"uj": RESERVED, "grade": "HwShunt"},
    }


def reading(at_ms: int, uj: int, grade: str = "HwShunt") -> dict[str, object]:
    return {
        "at_ms": at_ms,
        "energy": {"uj": uj, "grade": grade},
        "every_ms": 30_000,
        "job": {"id": "77"},
    }


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def due_of(ops: httpx.Client) -> dict[str, dict[str, Any]]:
    answer = ops.get("/v1/actions/due")
    assert answer.status_code == 200, answer.text
    return {d["claim"]: d for d in answer.json()["due"]}


def act(ops: httpx.Client, claim_id: str, kind: str, outcome: str = "done") -> httpx.Response:
    body = {"claim": claim_id, "kind": kind, "outcome": outcome, "job": "77"}
    return ops.post("/v1/actions", json=body)


@pytest.fixture
def deployment(tmp_path: Any) -> Deployment:
    d = Deployment.create(tmp_path / "d")
    config = d.folder / CONFIG
    config.write_text(
        config.read_text()
        + '\n[runtime]\nover_reservation = "cancel"\nmargin_pct = 10\nnotice_s = 60\n'
    )
    return d


def test_actions_notice_then_the_act_each_once_recorded_with_evidence(
    deployment: Deployment,
) -> None:
    d = deployment
    serve = start_serve(d.folder)
    try:
        t = now_ms() - 60_000
        with serve.client(d.operator) as ops:
            assert ops.post("/v1/claims", json=claim("hot")).json()["verdict"] == "admit"
            assert ops.post("/v1/claims", json=claim("cool")).json()["verdict"] == "admit"
            for s, uj in ((0, 0), (30, 50_000 * J), (60, 100_000 * J)):
                ops.post("/v1/claims/hot/readings", json=reading(t + s * 1000, uj))
                ops.post("/v1/claims/cool/readings", json=reading(t + s * 1000, uj // 100))
            due = due_of(ops)
            assert set(due) == {"hot"}
            # `pool actions --due` prints what the API answers.
            token = d.folder.parent / "ops.token"
            token.write_text(d.operator)
            cli = pool_cli(
                "actions", "--due", "--url", serve.url, "--token-file", str(token), "--json"
            )
            shown_due = json.loads(cli.stdout)
            assert [(x["claim"], x["kind"], x["evidence"]) for x in shown_due["due"]] == [
                (x["claim"], x["kind"], x["evidence"]) for x in due.values()
            ]
            hot = due["hot"]
            assert (hot["kind"], hot["reason"], hot["job"]) == ("notice", "reached", "77")
            assert hot["evidence"]["energy_uj"] == RESERVED
            assert hot["evidence"]["grade"] == "HwShunt"
            assert hot["evidence"]["reserved_uj"] == RESERVED
            assert hot["policy"] == {"over_reservation": "cancel", "margin_pct": 10, "notice_s": 60}
            assert act(ops, "hot", "notice").status_code == 200
            again = act(ops, "hot", "notice")
            assert again.status_code == 409 and again.json()["error"] == "act_recorded"
            # Past the reservation but not past its 10 % margin: nothing more is due.
            ops.post("/v1/claims/hot/readings", json=reading(t + 61_000, 110_000 * J))
            assert "hot" not in due_of(ops)
            ops.post("/v1/claims/hot/readings", json=reading(t + 62_000, 110_001 * J))
            assert due_of(ops)["hot"]["kind"] == "cancel"
            assert act(ops, "hot", "cancel").status_code == 200
            assert "hot" not in due_of(ops)
            log = ops.get("/v1/actions").json()["actions"]
            assert [(r["claim"], r["kind"], r["outcome"]) for r in log] == [
                ("hot", "cancel", "done"),
                ("hot", "notice", "done"),
            ]
            assert log[0]["evidence"]["energy_uj"] == 110_001 * J
            metrics = ops.get("/metrics").text
        assert (
            'pool_actions_total{kind="cancel",outcome="done",rule="over_reservation"} 1.0'
            in metrics
        )
        # The CLI reads the same records from the file beside the ledger.
        shown = json.loads(pool_cli("actions", str(d.folder), "--json").stdout)
        assert shown["actions"] == log
        serve.kill()
        # Restarted: nothing is known until the next reading, and what was done stays done.
        serve = start_serve(d.folder)
        with serve.client(d.operator) as ops:
            due = due_of(ops)
            assert due["cool"]["kind"] == "withheld" and due["cool"]["reason"] == "no_reading"
            assert due["cool"]["evidence"]["energy_uj"] is None
            assert "hot" not in due
            ops.post("/v1/claims/hot/readings", json=reading(now_ms(), 200_000 * J))
            assert "hot" not in due_of(ops)
            # No reading since start is shown, never logged: one line per claim per restart.
            assert ops.get("/v1/actions", params={"kind": "withheld"}).json()["actions"] == []
    finally:
        serve.kill()


def test_actions_withheld_on_estimates_and_stale_readings_logged_once_per_change(
    deployment: Deployment,
) -> None:
    d = deployment
    serve = start_serve(d.folder)
    try:
        t = now_ms()
        with serve.client(d.operator) as ops:
            for c in ("guess", "quiet"):
                assert ops.post("/v1/claims", json=claim(c)).json()["verdict"] == "admit"
            assert (
                ops.post("/v1/claims", json=claim("lang", "language")).json()["verdict"] == "admit"
            )
            ops.post("/v1/claims/guess/readings", json=reading(t, 5 * RESERVED, "Estimator"))
            # Twice the sample period ago: stale, no figure.
            ops.post("/v1/claims/quiet/readings", json=reading(t - 61_000, 5 * RESERVED))
            ops.post("/v1/claims/lang/readings", json=reading(t, 5 * RESERVED, "Estimator"))
            for _ in range(3):
                due = due_of(ops)
            assert (due["guess"]["kind"], due["guess"]["reason"]) == ("withheld", "estimator")
            assert (due["quiet"]["kind"], due["quiet"]["reason"]) == ("withheld", "stale")
            log = ops.get("/v1/actions", params={"kind": "withheld"}).json()["actions"]
            assert sorted(r["claim"] for r in log) == ["guess", "lang", "quiet"]
            assert ops.get("/v1/actions", params={"since_ms": now_ms() + 1}).json()["actions"] == []
            # Now fresh and measured: the state changed, so it is due (and logged if withheld again).
            ops.post("/v1/claims/quiet/readings", json=reading(now_ms(), 5 * RESERVED))
            assert due_of(ops)["quiet"]["kind"] == "notice"
        with serve.client(d.tenants["language"]) as tenant:
            seen = tenant.get("/v1/actions").json()["actions"]
            assert [r["claim"] for r in seen] == ["lang"]
            assert tenant.get("/v1/actions/due").status_code == 403
            assert tenant.get("/v1/actions", params={"entitlement": "vision"}).status_code == 403
    finally:
        serve.kill()


def test_actions_hostile_reports_are_refused_by_name(deployment: Deployment) -> None:
    d = deployment
    serve = start_serve(d.folder)
    try:
        with serve.client(d.operator) as ops:
            assert ops.post("/v1/claims", json=claim("run")).json()["verdict"] == "admit"
            for body, field in (
                ({"claim": "run", "kind": "shoot", "outcome": "done"}, "kind"),
                ({"claim": "run", "kind": "cancel", "outcome": "maybe"}, "outcome"),
                ({"claim": "run", "kind": "cancel", "outcome": "done", "x": 1}, "x"),
                ({"claim": "run", "kind": "cancel", "outcome": "done", "job": "a\nb"}, "job"),
                ({"claim": "run", "kind": "run", "outcome": "recorded"}, "detail"),
            ):
                answer = ops.post("/v1/actions", json=body)
                assert answer.status_code == 422 and field in answer.json()["detail"], body
            missing = act(ops, "nobody", "cancel")
            assert missing.status_code == 404 and missing.json()["error"] == "unknown_claim"
            for bad in ({"kind": "nope"}, {"since_ms": "-1"}, {"limit": "0"}, {"what": "1"}):
                assert ops.get("/v1/actions", params=bad).status_code == 422, bad
            # A requeued job's earlier run, recorded once however often it is reported.
            run = {
                "claim": "run",
                "kind": "run",
                "outcome": "recorded",
                "detail": "run ended 1700000000",
                "energy": {"uj": 7 * J, "grade": "HwShunt"},
            }
            assert ops.post("/v1/actions", json=run).json()["new"] is True
            assert ops.post("/v1/actions", json=run).json()["new"] is False
        with serve.client(d.tenants["vision"]) as tenant:
            assert act(tenant, "run", "cancel").status_code == 403
    finally:
        serve.kill()
    assert sum(1 for _ in (d.folder / ACTIONS).open()) == 1


def test_actions_the_bridge_reads_a_requeued_jobs_earlier_runs_back(deployment: Deployment) -> None:
    from joulepool.bridges.slurm.jobs import PoolClient, earlier_runs

    d = deployment
    serve = start_serve(d.folder)
    try:
        with serve.client(d.operator) as ops:
            assert ops.post("/v1/claims", json=claim("again")).json()["verdict"] == "admit"
            client = PoolClient(serve.url, d.operator, 10.0)
            assert earlier_runs("again", client) == []
            for n, energy in enumerate(({"uj": 7 * J, "grade": "HwShunt"}, None)):
                run = {
                    "claim": "again",
                    "kind": "run",
                    "outcome": "recorded",
                    "detail": f"slurm job 9 restarts {n}",
                    "energy": energy,
                }
                assert ops.post("/v1/actions", json=run).status_code == 200
        # Newest first; a run with no figure is None, never 0.
        assert earlier_runs("again", client) == [None, (7 * J, "HwShunt")]
    finally:
        serve.kill()


def test_actions_a_reloaded_runtime_table_is_in_force_at_once(deployment: Deployment) -> None:
    d = deployment
    serve = start_serve(d.folder)
    try:
        with serve.client(d.operator) as ops:
            assert ops.post("/v1/claims", json=claim("over")).json()["verdict"] == "admit"
            ops.post("/v1/claims/over/readings", json=reading(now_ms(), 2 * RESERVED))
            assert due_of(ops)["over"]["kind"] == "notice"
            config = d.folder / CONFIG
            config.write_text(config.read_text().replace('"cancel"', '"report"'))
            assert "configuration reloaded" in sighup(serve)
            answer = ops.get("/v1/actions/due").json()
            assert answer["policy"]["over_reservation"] == "report"
            assert [(x["claim"], x["kind"]) for x in answer["due"]] == [("over", "report")]
        # People read the same log as a table.
        table = pool_cli("actions", str(d.folder)).stdout
        assert "over" in table and "report" in table and "reported" in table
    finally:
        serve.kill()
