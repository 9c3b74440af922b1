"""Idle reclamation (§2.7) and preemption by realised cost (§5.2) over a real `pool serve`
(DESIGN.md §7; API.md "Acts: idle reclamation and preemption"): what is due from fresh,
measured readings, reported progress and waiting reports; the notice before the act; no act
on stale or missing evidence; victims in §5.2 order; no flapping; one answer from the HTTP
API, `pool actions` and the action log."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from joulepool.deployment.config import CONFIG
from tests.support.servers import Deployment, pool_cli, start_serve

J = 10**6
W = 10**6  # µW
RESERVED = 100_000 * J
POLICY = """
[idle]
window_us = 6000000
threshold_uw = 5000000
action = "cancel"
notice_s = 1
when = "always"

[preemption]
action = "requeue"
after_s = 60
notice_s = 1
cooldown_s = 600
"""


def claim(claim_id: str, entitlement: str, devices: int = 1) -> dict[str, object]:
    return {
        "id": claim_id,
        "entitlement": entitlement,
        "gang_size": 1,
        "devices_per_member": devices,
        "estimate": {"uj": RESERVED, "grade": "HwShunt"},
    }


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def read(
    ops: httpx.Client,
    claim_id: str,
    at_ms: int,
    uj: int,
    partition: str | None = "gpu",
    grade: str = "HwShunt",
    requeue: bool = True,
) -> None:
    job: dict[str, object] = {"id": f"job-{claim_id}", "requeue": requeue}
    if partition is not None:
        job["partition"] = partition
    body = {"at_ms": at_ms, "energy": {"uj": uj, "grade": grade}, "every_ms": 30_000, "job": job}
    answer = ops.post(f"/v1/claims/{claim_id}/readings", json=body)
    assert answer.status_code == 200, answer.text


def run_at(ops: httpx.Client, claim_id: str, watts: int, t0: int, partition: str = "gpu") -> None:
    """Readings over 6 s from `t0` at `watts`: a whole idle window's worth."""
    for s in (0, 3, 6):
        read(ops, claim_id, t0 + s * 1000, watts * J * s, partition)


def due_of(ops: httpx.Client, rule: str) -> dict[str, dict[str, Any]]:
    answer = ops.get("/v1/actions/due")
    assert answer.status_code == 200, answer.text
    return {d["claim"]: d for d in answer.json()["due"] if d["rule"] == rule}


def report(ops: httpx.Client, claim_id: str, rule: str, kind: str) -> httpx.Response:
    body = {"claim": claim_id, "rule": rule, "kind": kind, "outcome": "done", "job": "1"}
    return ops.post("/v1/actions", json=body)


@pytest.fixture
def deployment(tmp_path: Any) -> Deployment:
    d = Deployment.create(tmp_path / "d")
    config = d.folder / CONFIG
    config.write_text(config.read_text() + POLICY)
    return d


def test_idle_notice_then_act_never_on_progress_stale_or_a_short_window(
    deployment: Deployment,
) -> None:
    d = deployment
    serve = start_serve(d.folder)
    try:
        with serve.client(d.operator) as ops:
            # Each team holds at most 4 devices: the five claims are spread over three.
            for c, ent in (
                ("sleepy", "robotics"),
                ("busy", "robotics"),
                ("learning", "language"),
                ("young", "language"),
                ("silent", "vision"),
            ):
                assert ops.post("/v1/claims", json=claim(c, ent)).json()["verdict"] == "admit"
            t0 = now_ms() - 6_000
            run_at(ops, "sleepy", 1, t0)  # 1 W: under the 5 W threshold for the whole window
            run_at(ops, "busy", 300, t0)
            run_at(ops, "learning", 1, t0)
            ops.post("/v1/claims/learning/progress", json={"units": 10})
            read(ops, "young", now_ms() - 1_000, 0)  # in its first window
            read(ops, "young", now_ms(), 10 * J)
            for s in (0, 3, 6):  # idle, but its last reading is 3 periods old: stale
                read(ops, "silent", t0 - 90_000 + s * 1000, s * J)
            due = due_of(ops, "idle")
            assert set(due) == {"sleepy"}, due
            assert (due["sleepy"]["kind"], due["sleepy"]["reason"]) == ("notice", "idle")
            assert due["sleepy"]["evidence"]["idle"] == {"verdict": "idle", "reason": None}
            live = {
                c: ops.get(f"/v1/claims/{c}").json()["live"]["idle"]
                for c in ("busy", "learning", "young", "silent")
            }
            assert live == {
                "busy": {"verdict": "working", "reason": None},
                "learning": {"verdict": "working", "reason": "progress"},
                "young": {"verdict": "no_verdict", "reason": "window_too_short"},
                "silent": {"verdict": "no_verdict", "reason": "stale"},
            }
            assert report(ops, "sleepy", "idle", "notice").status_code == 200
            assert "sleepy" not in due_of(ops, "idle")  # the notice runs for notice_s
            time.sleep(1.1)
            due = due_of(ops, "idle")
            assert (due["sleepy"]["kind"], due["sleepy"]["reason"]) == (
                "cancel",
                "idle_after_notice",
            )
            # The same act under another rule is another record: the rules do not mix.
            assert due_of(ops, "over_reservation") == {}
            assert report(ops, "sleepy", "idle", "cancel").status_code == 200
            assert "sleepy" not in due_of(ops, "idle")
            log = ops.get("/v1/actions", params={"rule": "idle"}).json()["actions"]
            assert [(r["claim"], r["kind"], r["outcome"]) for r in log] == [
                ("sleepy", "cancel", "done"),
                ("sleepy", "notice", "done"),
            ]
            assert all(r["rule"] == "idle" for r in log)
            assert log[0]["policy"] == {"action": "cancel", "notice_s": 1, "when": "always"}
            last = ops.get("/v1/claims/sleepy").json()["live"]["last_act"]
            assert (last["rule"], last["kind"], last["outcome"]) == ("idle", "cancel", "done")
    finally:
        serve.kill()
    shown = json.loads(pool_cli("actions", str(d.folder), "--rule", "idle", "--json").stdout)
    assert [r["kind"] for r in shown["actions"]] == ["cancel", "notice"]


def test_idle_notice_is_withdrawn_when_the_job_works_again_and_given_afresh(
    deployment: Deployment,
) -> None:
    d = deployment
    serve = start_serve(d.folder)
    try:
        with serve.client(d.operator) as ops:
            assert (
                ops.post("/v1/claims", json=claim("nap", "robotics")).json()["verdict"] == "admit"
            )
            t0 = now_ms() - 6_000
            for s in (0, 3, 6):
                read(ops, "nap", t0 + s * 1000, s * J)
            assert due_of(ops, "idle")["nap"]["kind"] == "notice"
            assert report(ops, "nap", "idle", "notice").status_code == 200
            # It works again (300 W over the next window): the notice is withdrawn, logged.
            for s in (9, 12):
                read(ops, "nap", t0 + s * 1000, 6 * J + (s - 6) * 300 * J)
            due = due_of(ops, "idle")
            assert (due["nap"]["kind"], due["nap"]["reason"]) == ("withheld", "working")
            assert "nap" not in due_of(ops, "idle")  # withdrawn once, not every pass
            time.sleep(1.1)
            # Idle again over a whole window: told afresh, never acted on the old notice.
            base = 6 * J + 6 * 300 * J
            for s in (15, 18):
                read(ops, "nap", t0 + s * 1000, base + (s - 12) * J)
            assert due_of(ops, "idle")["nap"]["kind"] == "notice"
            # The fresh notice is recorded (not refused as done already), and it alone
            # starts the wait for the act.
            assert report(ops, "nap", "idle", "notice").status_code == 200
            assert "nap" not in due_of(ops, "idle")
            kinds = [
                (r["kind"], r["reason"])
                for r in ops.get("/v1/actions", params={"claim": "nap"}).json()["actions"]
            ]
            assert kinds == [("notice", None), ("withheld", "working"), ("notice", None)]
            time.sleep(1.1)
            read(ops, "nap", t0 + 19_000, base + 7 * J)
            assert due_of(ops, "idle")["nap"]["kind"] == "cancel"
    finally:
        serve.kill()


def test_preemption_takes_the_most_expensive_lower_priority_claims_in_order(
    deployment: Deployment,
) -> None:
    d = deployment
    serve = start_serve(d.folder)
    try:
        with serve.client(d.operator) as ops:
            # language (priority 1) and robotics (priority 0) run; vision (priority 2) waits.
            for c, ent in (
                ("cheap", "language"),
                ("pricey", "robotics"),
                ("unknown", "robotics"),
                ("elsewhere", "robotics"),
                ("peer", "vision"),
                ("urgent", "vision"),
            ):
                assert ops.post("/v1/claims", json=claim(c, ent)).json()["verdict"] == "admit"
            t0 = now_ms() - 6_000
            run_at(ops, "cheap", 300, t0)
            run_at(ops, "pricey", 300, t0)
            run_at(ops, "unknown", 300, t0)
            run_at(ops, "elsewhere", 300, t0, partition="other")
            run_at(ops, "peer", 300, t0)
            # Same energy; cheap completed 100 units, pricey 10: pricey costs 10x per unit.
            ops.post("/v1/claims/cheap/progress", json={"units": 100})
            ops.post("/v1/claims/pricey/progress", json={"units": 10})
            wait = {
                "at_ms": now_ms(),
                "since_ms": now_ms() - 120_000,
                "partition": "gpu",
                "gpus": 2,
                "job": {"id": "job-urgent"},
            }
            assert ops.post("/v1/claims/urgent/waiting", json=wait).status_code == 200
            assert ops.get("/v1/claims/urgent").json()["live"]["waiting"] == {
                "since_ms": wait["since_ms"],
                "partition": "gpu",
                "gpus": 2,
            }
            due = due_of(ops, "preemption")
            # §5.2: defined cost first, most expensive first; then undefined. Two GPUs needed:
            # pricey (1) and cheap (1); unknown is not needed, elsewhere and peer never count.
            assert {c: (x["kind"], x["for"]) for c, x in due.items()} == {
                "pricey": ("notice", "urgent"),
                "cheap": ("notice", "urgent"),
            }
            for c in due:
                assert report(ops, c, "preemption", "notice").status_code == 200
            time.sleep(1.1)
            ops.post("/v1/claims/urgent/waiting", json={**wait, "at_ms": now_ms()})
            due = due_of(ops, "preemption")
            assert {c: x["kind"] for c, x in due.items()} == {
                "pricey": "requeue",
                "cheap": "requeue",
            }
            assert report(ops, "pricey", "preemption", "requeue").status_code == 200
            # Requeued: pricey waits itself now, and may preempt nobody within cooldown_s,
            # nor be a victim again; its books start a new run.
            ops.post(
                "/v1/claims/pricey/waiting",
                json={**wait, "since_ms": now_ms() - 120_000, "at_ms": now_ms(), "gpus": 1},
            )
            due = due_of(ops, "preemption")
            assert "pricey" not in due and due["cheap"]["kind"] == "requeue"
    finally:
        serve.kill()


def test_preemption_takes_no_further_victim_while_gpus_freed_for_a_waiter_are_on_their_way(
    deployment: Deployment,
) -> None:
    d = deployment
    serve = start_serve(d.folder)
    try:
        with serve.client(d.operator) as ops:
            for c, ent in (("pricey", "robotics"), ("next", "robotics"), ("urgent", "vision")):
                assert ops.post("/v1/claims", json=claim(c, ent)).json()["verdict"] == "admit"
            t0 = now_ms() - 6_000
            run_at(ops, "pricey", 300, t0)
            run_at(ops, "next", 300, t0)
            ops.post("/v1/claims/pricey/progress", json={"units": 1})
            ops.post("/v1/claims/next/progress", json={"units": 1000})
            wait = {"since_ms": now_ms() - 120_000, "partition": "gpu", "gpus": 1}
            ops.post("/v1/claims/urgent/waiting", json={**wait, "at_ms": now_ms()})
            assert {c: x["for"] for c, x in due_of(ops, "preemption").items()} == {
                "pricey": "urgent"
            }
            for kind in ("notice", "requeue"):
                body = {
                    "claim": "pricey",
                    "rule": "preemption",
                    "kind": kind,
                    "outcome": "done",
                    "detail": "for urgent",
                }
                assert ops.post("/v1/actions", json=body).status_code == 200
            # Slurm starts the waiter once the requeued run has ended; meanwhile it still
            # waits, and the GPU on its way to it is counted: nobody else is taken.
            ops.post("/v1/claims/urgent/waiting", json={**wait, "at_ms": now_ms()})
            assert due_of(ops, "preemption") == {}
    finally:
        serve.kill()


def test_preemption_takes_nobody_for_a_need_that_cannot_be_met(deployment: Deployment) -> None:
    d = deployment
    serve = start_serve(d.folder)
    try:
        with serve.client(d.operator) as ops:
            for c, ent in (("small", "robotics"), ("big", "vision")):
                assert ops.post("/v1/claims", json=claim(c, ent)).json()["verdict"] == "admit"
            run_at(ops, "small", 300, now_ms() - 6_000)
            wait = {
                "at_ms": now_ms(),
                "since_ms": now_ms() - 120_000,
                "partition": "gpu",
                "gpus": 4,
            }
            assert ops.post("/v1/claims/big/waiting", json=wait).status_code == 200
            assert due_of(ops, "preemption") == {}
            # Not waited after_s yet: nobody either, however small the need.
            fresh = {**wait, "since_ms": now_ms() - 10_000, "gpus": 1}
            assert ops.post("/v1/claims/big/waiting", json=fresh).status_code == 200
            assert due_of(ops, "preemption") == {}
    finally:
        serve.kill()


def test_waiting_reports_refuse_hostile_input(deployment: Deployment) -> None:
    d = deployment
    serve = start_serve(d.folder)
    try:
        with serve.client(d.operator) as ops:
            assert ops.post("/v1/claims", json=claim("w", "vision")).json()["verdict"] == "admit"
            good = {"at_ms": now_ms(), "since_ms": now_ms(), "partition": "gpu", "gpus": 1}
            for bad, field in (
                ({**good, "gpus": 1.5}, "body.gpus"),
                ({**good, "since_ms": now_ms() + 10_000}, "body.since_ms"),
                ({**good, "partition": ""}, "body.partition"),
                ({**good, "extra": 1}, "body"),
                ({**good, "job": {"id": "1", "requeue": "yes"}}, "body.job.requeue"),
            ):
                answer = ops.post("/v1/claims/w/waiting", json=bad)
                assert answer.status_code == 422, (bad, answer.text)
                assert field in answer.text, answer.text
            assert ops.post("/v1/claims/nope/waiting", json=good).status_code == 404
            bad_rule = {"claim": "w", "rule": "vibes", "kind": "notice", "outcome": "done"}
            answer = ops.post("/v1/actions", json=bad_rule)
            assert answer.status_code == 422 and "body.rule" in answer.text
    finally:
        serve.kill()


def test_idle_when_contended_waits_for_a_job_waiting_in_the_same_partition(
    tmp_path: Any,
) -> None:
    d = Deployment.create(tmp_path / "d")
    config = d.folder / CONFIG
    config.write_text(config.read_text() + POLICY.replace('when = "always"', 'when = "contended"'))
    serve = start_serve(d.folder)
    try:
        with serve.client(d.operator) as ops:
            for c, ent in (("sleepy", "robotics"), ("waiter", "vision")):
                assert ops.post("/v1/claims", json=claim(c, ent)).json()["verdict"] == "admit"
            run_at(ops, "sleepy", 1, now_ms() - 6_000)
            due = due_of(ops, "idle")
            assert (due["sleepy"]["kind"], due["sleepy"]["reason"]) == ("withheld", "not_contended")
            due_of(ops, "idle")
            withheld = ops.get("/v1/actions", params={"kind": "withheld"}).json()["actions"]
            assert [r["reason"] for r in withheld] == ["not_contended"]  # once per change
            # A job waiting in another partition contends for nothing sleepy holds.
            wait = {"at_ms": now_ms(), "since_ms": now_ms(), "partition": "cpu", "gpus": 1}
            assert ops.post("/v1/claims/waiter/waiting", json=wait).status_code == 200
            assert due_of(ops, "idle")["sleepy"]["reason"] == "not_contended"
            wait["partition"] = "gpu"
            assert ops.post("/v1/claims/waiter/waiting", json=wait).status_code == 200
            assert due_of(ops, "idle")["sleepy"]["kind"] == "notice"
    finally:
        serve.kill()
