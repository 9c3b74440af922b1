"""DESIGN.md §7 through the Slurm bridge: idle reclamation (§2.7) and preemption by realised
cost (§5.2), on real Slurm.

Real slurmctld/slurmd with `gpu` GRES, a real `pool serve` whose pool.toml's `[idle]` and
`[preemption]` tables each test sets, and `pool slurm agent` sampling every second. The
GPUs' power is the simulated DCGM exporter's (TEST ONLY: `fake_dcgm`, each GPU's draw set
by the test while it runs, integrated so counters never go back). What it proves:

- a GPU job drawing 20 W under a 50 W threshold for a whole window is told (SIGUSR1,
  `act=idle:notice`), then cancelled or requeued per `[idle] action`, each act in the log
  under rule `idle` with its evidence; a `--no-requeue` job is withheld, never requeued;
- never touched: a job in its first window, a job whose readings stopped (stale), a job
  reporting progress (`working`, `progress`) however little it draws, and any job while
  `[idle]` has no threshold;
- a pool-admitted job waiting for GPUs gets them from lower-priority jobs, the most
  expensive per reported unit first, then those with no cost known; a `--no-requeue` job
  is skipped; the requeued jobs neither flap nor preempt while cooling down;
- a Pool restart mid-notice makes nothing idle sooner: no act until a whole new window of
  fresh readings, then a fresh notice;
- every claim is released in the end with its whole actual, measured.
"""

from __future__ import annotations

import re
import shlex
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import joulepool
from tests.support.slurm.bridge import SUBMITTER, Bridge, module_bridge, note_of, python_for

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(240)]

IDLE_W, BUSY_W, THRESHOLD_W = 20, 250, 50
WINDOW_S = 4
ESTIMATE = "--comment=pool:estimate=1MJ"
POLICY = "\n# test_bridge_reclaim's policies\n"

# Traps the notice, and runs until the test lets it go (a requeued run starts over).
TOLD = (
    "trap 'echo told >> told-$SLURM_JOB_ID' USR1; "
    "while [ ! -e go-$SLURM_JOB_ID ]; do sleep 0.2; done"
)


def idle_table(action: str, notice_s: int = 2, threshold: bool = True) -> str:
    """`[idle]` with a 4 s window and a 50 W threshold (none with `threshold=False`)."""
    limit = f"threshold_uw = {THRESHOLD_W * 1_000_000}\n" if threshold else ""
    return (
        f"[idle]\nwindow_us = {WINDOW_S * 1_000_000}\n{limit}"
        f'action = "{action}"\nnotice_s = {notice_s}\n'
    )


def set_policies(bridge: Bridge, *tables: str) -> None:
    """pool.toml's `[idle]` and `[preemption]`, put in force by restarting `pool serve`."""
    config = bridge.deployment.folder / "pool.toml"
    text = config.read_text().split(POLICY)[0]
    config.write_text(text + POLICY + "\n".join(tables))
    bridge.stop_pool()
    bridge.serve.proc.wait(timeout=20)
    bridge.start_pool()


@pytest.fixture(scope="module")
def bridge() -> Iterator[Bridge]:
    for b in module_bridge():
        b.config.write_text(
            b.config.read_text().replace("[pool]\n", "[pool]\nsample_every_s = 1\n", 1)
        )
        b.restart_agent()
        yield b


@pytest.fixture
def bed(bridge: Bridge) -> Iterator[Bridge]:
    """The bridge with every GPU at 20 W; every job cancelled and the draw reset after."""
    bridge.bed.set_gpu_watts(dict.fromkeys(range(4), IDLE_W))
    try:
        yield bridge
    finally:
        bridge.bed.run(["scancel", "-u", SUBMITTER])
        bridge.bed.set_gpu_watts({})


def actions(bridge: Bridge, **params: Any) -> list[dict[str, Any]]:
    """GET /v1/actions, oldest first."""
    with bridge.pool() as c:
        answer = c.get("/v1/actions", params=params)
        assert answer.status_code == 200, answer.text
        return list(reversed(answer.json()["actions"]))


def due(bridge: Bridge) -> list[dict[str, Any]]:
    with bridge.pool() as c:
        answer = c.get("/v1/actions/due")
        assert answer.status_code == 200, answer.text
        return list(answer.json()["due"])


def wait_for(bridge: Bridge, what: str, ok: Any, timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = ok()
        if found:
            return found
        time.sleep(0.3)
    raise AssertionError(f"{what} never came\n{bridge.logs()}")


def acts(bridge: Bridge, claim: str, rule: str) -> list[tuple[str, str]]:
    """(kind, outcome) of a claim's records under `rule`, oldest first."""
    return [(r["kind"], r["outcome"]) for r in actions(bridge, claim=claim, rule=rule)]


def live(bridge: Bridge, claim: str) -> dict[str, Any]:
    return dict(bridge.claim(claim).get("live") or {})


def verdict(bridge: Bridge, claim: str) -> tuple[str, str | None]:
    idle = live(bridge, claim).get("idle") or {}
    return idle.get("verdict", ""), idle.get("reason")


def gpus_of(bridge: Bridge, job_id: int) -> list[int]:
    """The GPU indices Slurm gave a running job (`scontrol show job -d`)."""
    out = bridge.bed.run(["scontrol", "-d", "show", "job", str(job_id)]).stdout
    found = re.search(r"GRES=gpu[^(\s]*\(IDX:([\d,-]+)\)", out)
    assert found, out
    indices: list[int] = []
    for part in found.group(1).split(","):
        lo, _, hi = part.partition("-")
        indices += range(int(lo), int(hi or lo) + 1)
    return indices


def with_progress(units: int | None, each_s: bool = False) -> str:
    """A TOLD job that reports `units` once (`pool progress` from inside the job), or with
    `each_s` one more unit every second until it is let go."""
    python = python_for(SUBMITTER)
    src = Path(joulepool.__file__).resolve().parent.parent
    report = f"PYTHONPATH={shlex.quote(str(src))} {shlex.quote(python)} -m joulepool progress"
    if each_s:
        return (
            "trap 'echo told >> told-$SLURM_JOB_ID' USR1; i=1; "
            "while [ ! -e go-$SLURM_JOB_ID ]; do "
            f"{report} --units $i; i=$((i+1)); sleep 1; done"
        )
    return ("" if units is None else f"{report} --units {units}; ") + TOLD


def running(bridge: Bridge, *args: str) -> tuple[int, str]:
    """Submit a job (1 MJ reserved: never over it here), wait until it runs; its id and claim."""
    job_id = bridge.submit(ESTIMATE, *args)
    return job_id, note_of(bridge.wait_job(job_id, lambda j: j.state == "RUNNING", 60)).claim


def released_measured(bridge: Bridge, claims: list[str], timeout_s: float = 90) -> None:
    """Every claim released, charged a measured actual."""
    for claim in claims:
        actual = bridge.wait_released(claim, timeout_s=timeout_s)["actual"]
        assert actual["uj"] > 0 and actual["grade"] in ("HwShunt", "ModelBased"), actual


def released_requeued(bridge: Bridge, claim: str, timeout_s: float = 90) -> None:
    """A requeued job's claim released, charged at least every run's measured figure the
    log kept. Its last run here never started, or started with no GPU start reading (the
    known gap of docs/slurm.md "A requeue keeps the books"): that run counts the
    reservation, graded Estimator, never less than was measured."""
    actual = bridge.wait_released(claim, timeout_s=timeout_s)["actual"]
    runs = actions(bridge, claim=claim, kind="run")
    assert runs and all(r["evidence"]["energy_uj"] for r in runs), runs
    assert actual["uj"] >= sum(r["evidence"]["energy_uj"] for r in runs), (actual, runs)


def test_design_s7_an_idle_gpu_job_is_told_then_cancelled_but_one_reporting_progress_is_not(
    bed: Bridge,
) -> None:
    bridge = bed
    set_policies(bridge, idle_table("cancel"))
    busy, busy_claim = running(bridge, "-A", "phys", "--gres=gpu:1", "--wrap", TOLD)
    # The busy job's GPU at 250 W, every other at 20 W, before the others start.
    bridge.bed.set_gpu_watts(
        {g: BUSY_W if g in gpus_of(bridge, busy) else IDLE_W for g in range(4)}
    )
    idle, idle_claim = running(bridge, "-A", "phys", "--gres=gpu:1", "--wrap", TOLD)
    steps, steps_claim = running(
        bridge, "-A", "phys", "--gres=gpu:1", "--wrap", with_progress(None, each_s=True)
    )
    # Within its first window a job has no verdict, and nothing is done to it.
    wait_for(bridge, "a reading", lambda: live(bridge, idle_claim).get("energy_uj"))
    assert verdict(bridge, idle_claim) == ("no_verdict", "window_too_short")
    assert acts(bridge, idle_claim, "idle") == []
    try:
        wait_for(
            bridge,
            "the idle notice",
            lambda: ("notice", "done") in acts(bridge, idle_claim, "idle"),
        )
        told = bridge.bed.root / "jobs" / f"told-{idle}"
        wait_for(bridge, "SIGUSR1 in the job", told.exists, 30)
        assert "act=idle:notice" in bridge.bed.run(["scontrol", "show", "job", str(idle)]).stdout
        bridge.wait_job(idle, lambda j: j.state == "CANCELLED", timeout_s=60)
        records = actions(bridge, claim=idle_claim, rule="idle")
        done = [r for r in records if r["outcome"] == "done"]
        assert [r["kind"] for r in done][-2:] == ["notice", "cancel"], records
        notice, cancel = done[-2], done[-1]
        assert cancel["at_ms"] - notice["at_ms"] >= 2000, records
        for r in (notice, cancel):
            assert r["rule"] == "idle" and r["job"] == str(idle), r
            assert r["evidence"]["grade"] in ("HwShunt", "ModelBased"), r
            assert r["evidence"]["energy_uj"] > 0, r
            assert r["policy"]["action"] == "cancel", r
        assert "act=idle:cancel" in bridge.bed.run(["scontrol", "show", "job", str(idle)]).stdout
        # Completing units is working, whatever the draw; 250 W is working too.
        assert verdict(bridge, steps_claim) == ("working", "progress"), live(bridge, steps_claim)
        assert live(bridge, steps_claim)["power_uw"] <= THRESHOLD_W * 1_000_000
        assert verdict(bridge, busy_claim) == ("working", None)
        for claim in (steps_claim, busy_claim):
            assert acts(bridge, claim, "idle") == []
        for job_id in (busy, steps):
            assert bridge.job(job_id).state == "RUNNING"
    finally:
        for job_id in (busy, steps):
            bridge.go(job_id)
    released_measured(bridge, [idle_claim, busy_claim, steps_claim])


def test_design_s7_an_idle_gpu_job_is_told_then_requeued_and_a_no_requeue_one_is_withheld(
    bed: Bridge,
) -> None:
    bridge = bed
    set_policies(bridge, idle_table("requeue"))
    job_id, claim = running(bridge, "-A", "phys", "--requeue", "--gres=gpu:1", "--wrap", TOLD)
    kept, kept_claim = running(bridge, "-A", "phys", "--no-requeue", "--gres=gpu:1", "--wrap", TOLD)
    wait_for(bridge, "the idle requeue", lambda: ("requeue", "done") in acts(bridge, claim, "idle"))
    assert (bridge.bed.root / "jobs" / f"told-{job_id}").exists()
    bridge.wait_job(job_id, lambda j: j.state == "PENDING", timeout_s=60)
    records = actions(bridge, claim=claim, rule="idle")
    assert [r["kind"] for r in records if r["outcome"] == "done"][-2:] == ["notice", "requeue"]
    run = wait_for(
        bridge, "the first run's record", lambda: actions(bridge, claim=claim, kind="run")
    )[0]
    assert run["evidence"]["energy_uj"] and run["evidence"]["energy_uj"] > 0, run
    # Slurm may not requeue it: withheld once, never told, still running.
    withheld = wait_for(
        bridge, "the withheld requeue", lambda: actions(bridge, claim=kept_claim, rule="idle")
    )
    assert [(r["kind"], r["reason"]) for r in withheld] == [("withheld", "not_requeueable")]
    assert bridge.job(kept).state == "RUNNING"
    assert not (bridge.bed.root / "jobs" / f"told-{kept}").exists()
    bridge.go(kept)
    bridge.bed.run(["scancel", str(job_id)])
    released_measured(bridge, [kept_claim])
    released_requeued(bridge, claim)


def test_design_s7_stopped_readings_or_no_threshold_never_make_a_job_idle(bed: Bridge) -> None:
    bridge = bed
    set_policies(bridge, idle_table("cancel", notice_s=1, threshold=False))
    job_id, claim = running(bridge, "-A", "phys", "--gres=gpu:1", "--wrap", TOLD)
    # Three windows at 20 W, with no threshold: no verdict, nothing due, nothing done.
    wait_for(bridge, "a reading", lambda: live(bridge, claim).get("energy_uj"))
    time.sleep(3 * WINDOW_S)
    assert verdict(bridge, claim) == ("no_verdict", "unconfigured")
    assert live(bridge, claim)["power_uw"] <= THRESHOLD_W * 1_000_000
    assert not [d for d in due(bridge) if d["rule"] == "idle"]
    assert acts(bridge, claim, "idle") == [] and bridge.job(job_id).state == "RUNNING"
    bridge.go(job_id)
    set_policies(bridge, idle_table("cancel", notice_s=1))
    # The exporter stops once the job is read: its readings go stale, never idle.
    stale, stale_claim = running(bridge, "-A", "phys", "--gres=gpu:1", "--wrap", TOLD)
    wait_for(bridge, "a reading", lambda: live(bridge, stale_claim).get("energy_uj"))
    exporter = bridge.bed.procs["fake_dcgm"]
    exporter.send_signal(signal.SIGSTOP)
    try:
        time.sleep(3 * WINDOW_S)
        assert verdict(bridge, stale_claim) == ("no_verdict", "stale")
        assert acts(bridge, stale_claim, "idle") == []
        assert bridge.job(stale).state == "RUNNING"
        bridge.go(stale)
        bridge.wait_job(stale, lambda j: j.state == "COMPLETED", timeout_s=60)
    finally:
        exporter.send_signal(signal.SIGCONT)
    for c in (claim, stale_claim):
        assert bridge.wait_released(c, timeout_s=90)["actual"]["uj"] > 0
    assert bridge.claim(claim)["actual"]["grade"] in ("HwShunt", "ModelBased")


def test_design_s7_a_waiting_job_gets_gpus_from_the_most_expensive_lower_priority_job_first(
    bed: Bridge,
) -> None:
    bridge = bed
    set_policies(
        bridge,
        '[preemption]\naction = "requeue"\nafter_s = 3\nnotice_s = 2\ncooldown_s = 3600\n',
    )
    bridge.bed.set_gpu_watts({})  # every GPU at 250 W
    low = ("--gres=gpu:1", "--wrap")
    # language (priority 1): many units (cheap), few (expensive), one but not requeueable;
    # robotics (priority 0): no units, an undefined cost.
    cheap, cheap_c = running(bridge, "-A", "ling", "--requeue", *low, with_progress(100_000))
    dear, dear_c = running(bridge, "-A", "ling", "--requeue", *low, with_progress(5))
    fixed, fixed_c = running(bridge, "-A", "ling", "--no-requeue", *low, with_progress(1))
    blind, blind_c = running(bridge, "-A", "robo", "--requeue", *low, TOLD)
    for c, units in ((cheap_c, 100_000), (dear_c, 5), (fixed_c, 1)):
        wait_for(bridge, "units and a cost", lambda c=c: live(bridge, c).get("realised_cost"))
        assert live(bridge, c)["units"] == units
    assert "Requeue=0" in bridge.bed.run(["scontrol", "show", "job", str(fixed)]).stdout
    # vision (priority 2) asks for a GPU, then another: the node's four are taken. The
    # first gets the most expensive requeueable job's, the second the cheap one's (a
    # defined cost before none); the one with no cost and the one Slurm may not requeue
    # (the dearest of all) run on.
    waiters = []
    for job_id, claim in ((dear, dear_c), (cheap, cheap_c)):
        want = bridge.submit(ESTIMATE, "-A", "phys", "--gres=gpu:1", "--wrap", TOLD)
        want_c = note_of(
            bridge.wait_job(want, lambda j: j.state == "PENDING" and j.reason == "Resources", 60)
        ).claim
        waiters.append(want_c)
        wait_for(bridge, "the waiting report", lambda c=want_c: live(bridge, c).get("waiting"))
        wait_for(
            bridge,
            f"job {job_id}'s requeue",
            lambda c=claim: ("requeue", "done") in acts(bridge, c, "preemption"),
        )
        records = [
            r for r in actions(bridge, claim=claim, rule="preemption") if r["outcome"] == "done"
        ]
        assert [r["kind"] for r in records][-2:] == ["notice", "requeue"], records
        assert [r["kind"] for r in records].count("requeue") == 1, records
        assert all(r["detail"] == f"for {want_c}" for r in records), records
        assert records[-1]["at_ms"] - records[-2]["at_ms"] >= 2000
        show = bridge.bed.run(["scontrol", "show", "job", str(job_id)]).stdout
        assert "act=preemption:requeue" in show and "Requeue=1" in show
        assert (bridge.bed.root / "jobs" / f"told-{job_id}").exists()
        bridge.wait_job(want, lambda j: j.state == "RUNNING", timeout_s=60)
        if claim == dear_c:
            assert acts(bridge, cheap_c, "preemption") == []
        for other in (fixed, blind):
            assert bridge.job(other).state == "RUNNING"
        for other_c in (fixed_c, blind_c):
            assert acts(bridge, other_c, "preemption") == [], actions(bridge, rule="preemption")
    # The requeued jobs wait again for GPUs, and would take the robotics job's: within
    # their cooldown they preempt nobody, and nothing is requeued twice.
    for job_id in (dear, cheap):
        bridge.wait_job(job_id, lambda j: j.state == "PENDING", timeout_s=60)
        bridge.bed.run(["scontrol", "update", f"jobid={job_id}", "StartTime=now"])
    wait_for(bridge, "the requeued job waiting", lambda: live(bridge, dear_c).get("waiting"))
    time.sleep(8)
    assert live(bridge, dear_c).get("waiting") and live(bridge, cheap_c).get("waiting")
    assert not [d for d in due(bridge) if d["rule"] == "preemption"]
    assert acts(bridge, blind_c, "preemption") == []
    for claim in (dear_c, cheap_c):
        assert acts(bridge, claim, "preemption").count(("requeue", "done")) == 1
    assert bridge.job(blind).state == "RUNNING"
    bridge.bed.run(["scancel", "-u", SUBMITTER])
    released_measured(bridge, [fixed_c, blind_c, *waiters], timeout_s=120)
    for claim in (dear_c, cheap_c):
        released_requeued(bridge, claim)


def test_design_s7_after_a_pool_restart_mid_notice_nothing_is_idle_before_a_new_window(
    bed: Bridge,
) -> None:
    bridge = bed
    set_policies(bridge, idle_table("cancel", notice_s=4))
    job_id, claim = running(bridge, "-A", "phys", "--gres=gpu:1", "--wrap", TOLD)
    wait_for(bridge, "the idle notice", lambda: ("notice", "done") in acts(bridge, claim, "idle"))
    bridge.stop_pool()
    bridge.serve.proc.wait(timeout=20)
    time.sleep(5)  # the notice's 4 s pass while Pool is away
    restarted_ms = time.time_ns() // 1_000_000
    bridge.start_pool()
    bridge.wait_job(job_id, lambda j: j.state == "CANCELLED", timeout_s=60)
    records = actions(bridge, claim=claim, rule="idle")
    cancel = next(r for r in records if r["kind"] == "cancel")
    # The restart knows nothing of the job: a whole window of new readings, then told
    # afresh, then its 4 s notice.
    assert cancel["at_ms"] >= restarted_ms + (WINDOW_S + 4) * 1000, records
    notices = [r for r in records if r["kind"] == "notice" and r["outcome"] == "done"]
    assert len(notices) >= 2 and notices[-1]["at_ms"] >= restarted_ms + WINDOW_S * 1000
    withdrawn = [r for r in records if r["kind"] == "withheld" and r["at_ms"] >= restarted_ms]
    assert withdrawn and withdrawn[0]["reason"] == "window_too_short", records
    assert len([r for r in records if r["kind"] == "cancel"]) == 1
    released_measured(bridge, [claim])


def test_design_s7_an_agent_stopped_mid_notice_acts_on_nothing_old_and_tells_the_job_afresh(
    bed: Bridge,
) -> None:
    bridge = bed
    set_policies(bridge, idle_table("cancel"))
    job_id, claim = running(bridge, "-A", "phys", "--gres=gpu:1", "--wrap", TOLD)
    wait_for(bridge, "the idle notice", lambda: ("notice", "done") in acts(bridge, claim, "idle"))
    assert bridge.agent is not None
    bridge.agent.terminate()
    bridge.agent.wait(timeout=10)
    try:
        # The notice's 2 s pass with nobody to act, and nobody to read: the readings go
        # stale, so the notice is withdrawn (logged once) rather than acted on.
        time.sleep(5)
        assert bridge.job(job_id).state == "RUNNING"
        due_now = [(d["kind"], d["reason"]) for d in due(bridge) if d["claim"] == claim]
        assert due_now == [("withheld", "stale")], due_now
    finally:
        bridge.start_agent()
        back_ms = time.time_ns() // 1_000_000
    bridge.wait_job(job_id, lambda j: j.state == "CANCELLED", timeout_s=60)
    records = actions(bridge, claim=claim, rule="idle")
    shown = [(r["kind"], r["outcome"], r["reason"]) for r in records]
    assert shown[0] == ("notice", "done", None) and shown[-1] == ("cancel", "done", None)
    assert ("withheld", "withheld", "stale") in shown and shown.count(shown[-1]) == 1, shown
    # Told afresh once back, then the whole notice before the act.
    last = [r for r in records if r["kind"] == "notice"][-1]
    assert last["at_ms"] >= back_ms and records[-1]["at_ms"] - last["at_ms"] >= 2000, shown
    assert len((bridge.bed.root / "jobs" / f"told-{job_id}").read_text().split()) >= 2
    released_measured(bridge, [claim])
