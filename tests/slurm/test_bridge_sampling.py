"""DESIGN.md §7 through the Slurm bridge: `pool slurm agent` samples running jobs' GPUs.

Real Slurm with `gpu` GRES, the bridge's GPU Prolog as root, a simulated DCGM exporter on
127.0.0.1 (250 W per GPU) and a real `pool serve`: the agent maps each running job's GPUs
from `scontrol show job -d`, reads the exporter every second and posts readings, so
`GET /v1/claims/{id}` carries the job's energy so far, its power and whose job it is; a
counter reset never makes the figure go back.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import joulepool
from joulepool.bridges.slurm.jobs import list_jobs
from tests.support.slurm.bridge import (
    SUBMITTER,
    WAIT_FOR_GO,
    Bridge,
    module_bridge,
    note_of,
    python_for,
)

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]

GPU_W = 250


@pytest.fixture(scope="module")
def bridge() -> Iterator[Bridge]:
    for b in module_bridge():
        text = b.config.read_text()
        # `install_config` wrote where the agent finds the exporter and the Prolog's readings.
        assert f'dcgm_url = "{b.bed.dcgm_url}"' in text and "gpu_state_dir = " in text
        b.config.write_text(text.replace("[pool]\n", "[pool]\nsample_every_s = 1\n", 1))
        b.restart_agent()  # it reads its configuration at start
        yield b


def wait_live(
    bridge: Bridge, claim: str, ok: Callable[[dict[str, Any]], bool], timeout_s: float = 60
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    live: dict[str, Any] = {}
    while time.monotonic() < deadline:
        live = bridge.claim(claim).get("live") or {}
        if live and ok(live):
            return live
        time.sleep(0.2)
    raise AssertionError(f"live figures never came: {live}\n{bridge.logs()}")


def test_design_s7_the_agent_posts_a_running_jobs_gpu_energy_and_power(bridge: Bridge) -> None:
    job_id = bridge.submit(
        "-A",
        "phys",
        "-J",
        "trainer",
        "--gres=gpu:2",
        "--comment=pool:estimate=1MJ",
        "--wrap",
        WAIT_FOR_GO,
    )
    note = note_of(bridge.wait_job(job_id, lambda j: j.state == "RUNNING"))
    try:
        first = wait_live(bridge, note.claim, lambda v: (v["energy_uj"] or 0) > 0)
        assert first["grade"] == "HwShunt"
        assert first["job"] == {
            "id": str(job_id),
            "user": "nobody",
            "name": "trainer",
            "partition": "debug",
            "requeue": True,
        }
        time.sleep(3)
        later = wait_live(bridge, note.claim, lambda v: (v["at_ms"] or 0) > first["at_ms"] + 2000)
        # Two GPUs at 250 W each: 500 W between the last two readings, within the jitter of
        # a shared machine's scheduling (the exporter's clock and the agent's differ).
        assert 400_000_000 <= later["power_uw"] <= 600_000_000, later
        elapsed_ms = later["at_ms"] - first["at_ms"]
        gained = later["energy_uj"] - first["energy_uj"]
        assert abs(gained - 2 * GPU_W * 1000 * elapsed_ms) <= 2 * GPU_W * 1000 * 1500, later
        # From the Prolog's start readings: the job's energy so far covers its whole run.
        assert later["reservation_used_pct"] == later["energy_uj"] * 100 // 10**12
        # A driver reload sets the counters back to 0: the figure never goes back.
        bridge.bed.reset_gpu_counters()
        time.sleep(2.5)
        after = wait_live(bridge, note.claim, lambda v: v["at_ms"] > later["at_ms"] + 1500)
        assert after["energy_uj"] >= later["energy_uj"]
        assert "reading_decreased" not in (bridge.root / "agent.log").read_text()
    finally:
        bridge.go(job_id)
    bridge.wait_released(note.claim)
    assert "live" not in bridge.claim(note.claim)


def test_api_a_batch_job_reports_its_progress_from_the_environment_job_submit_gave_it(
    bridge: Bridge,
) -> None:
    python = python_for(SUBMITTER)
    src = Path(joulepool.__file__).resolve().parent.parent
    script = (
        f"export PYTHONPATH={shlex.quote(str(src))}\n"
        f"{shlex.quote(python)} -m joulepool progress --units 5 --total 10 --unit batches\n"
        'echo "progress rc=$? claim=$POOL_CLAIM"\n' + WAIT_FOR_GO + "\n"
    )
    job_id = bridge.submit("-A", "phys", "--comment=pool:estimate=1MJ", "--wrap", script)
    note = note_of(bridge.wait_job(job_id, lambda j: j.state == "RUNNING"))
    try:
        output = bridge.bed.root / "jobs" / f"job-{job_id}.out"
        deadline = time.monotonic() + 60
        while "progress rc=" not in (output.read_text() if output.exists() else ""):
            assert time.monotonic() < deadline, f"no progress line\n{bridge.logs()}"
            time.sleep(0.2)
        assert f"progress rc=0 claim={note.claim}" in output.read_text(), output.read_text()
        live = bridge.claim(note.claim)["live"]
        assert (live["units"], live["unit"], live["total"]) == (5, "batches", 10)
    finally:
        bridge.go(job_id)
    bridge.wait_released(note.claim)


def test_design_s7_a_restarted_agent_without_start_readings_goes_on_from_the_services_figure(
    bridge: Bridge,
) -> None:
    job_id = bridge.submit(
        "-A", "phys", "--gres=gpu:1", "--comment=pool:estimate=1MJ", "--wrap", WAIT_FOR_GO
    )
    note = note_of(bridge.wait_job(job_id, lambda j: j.state == "RUNNING"))
    try:
        # Three seconds of one GPU at 250 W, so that losing them would show.
        before = wait_live(bridge, note.claim, lambda v: (v["energy_uj"] or 0) >= 750 * 10**6)
        # The Prolog's readings gone (a node-local folder the agent cannot see): the
        # restarted agent takes its own baseline, and must not send the figure back to 0.
        for start in (bridge.root / "gpu-state").glob(f"{job_id}.*.json"):
            start.unlink()
        bridge.restart_agent()
        after = wait_live(bridge, note.claim, lambda v: v["at_ms"] > before["at_ms"] + 1500)
        gained, elapsed_ms = (
            after["energy_uj"] - before["energy_uj"],
            after["at_ms"] - before["at_ms"],
        )
        # Everything since `before` is there on top of it (within a second's jitter).
        assert gained >= GPU_W * 1000 * (elapsed_ms - 1000), (before, after)
    finally:
        bridge.go(job_id)
    bridge.wait_released(note.claim)


def test_design_s7_a_running_array_reads_as_its_tasks_sum_and_unknown_once_one_ends(
    bridge: Bridge,
) -> None:
    """One claim for the whole array: its energy so far is the sum over its running tasks;
    once a task has ended (its figure is no live reading) the sum would be a lower bound,
    so the claim has no reading and reads as unknown."""
    submitted_ms = int(time.time() * 1000)
    array = bridge.submit(
        "-A",
        "phys",
        "-J",
        "sweep",
        "--array=0-1",
        "--gres=gpu:1",
        "--comment=pool:estimate=1MJ",
        "--wrap",
        WAIT_FOR_GO,
    )
    deadline = time.monotonic() + 60
    while True:
        tasks = [
            j for j in list_jobs(bridge.bed.env) if j.array_job == array and j.state == "RUNNING"
        ]
        if len(tasks) == 2:
            break
        assert time.monotonic() < deadline, f"the array's tasks never ran\n{bridge.logs()}"
        time.sleep(0.2)
    note = note_of(tasks[0])
    try:
        both = int(time.time() * 1000)
        first = wait_live(bridge, note.claim, lambda v: (v["at_ms"] or 0) > both + 1500)
        assert first["grade"] == "HwShunt"
        # The array's id, and never requeueable: a requeued task's earlier run would go
        # uncharged, so Pool must make no requeue due for it.
        assert first["job"] == {
            "id": str(array),
            "user": "nobody",
            "name": "sweep",
            "partition": "debug",
            "requeue": False,
        }
        time.sleep(3)
        later = wait_live(bridge, note.claim, lambda v: (v["at_ms"] or 0) > first["at_ms"] + 2000)
        # Both tasks' GPUs, one each at 250 W: 500 W, not one task's 250 W.
        assert 400_000_000 <= later["power_uw"] <= 600_000_000, later
        elapsed_ms = later["at_ms"] - first["at_ms"]
        gained = later["energy_uj"] - first["energy_uj"]
        assert abs(gained - 2 * GPU_W * 1000 * elapsed_ms) <= 2 * GPU_W * 1000 * 1500, later
        # Never more than the exporter served the two GPUs since the array was submitted.
        assert later["energy_uj"] <= 2 * GPU_W * 1000 * (later["at_ms"] - submitted_ms)
        # One task ends: the other's figure is no longer the claim's energy so far.
        bridge.go(tasks[0].job_id)
        bridge.wait_job(tasks[0].job_id, lambda j: j.state == "COMPLETED")
        unknown = wait_live(bridge, note.claim, lambda v: v["energy_uj"] is None, 30)
        assert unknown["idle"]["reason"] == "stale", unknown
        assert (
            f"array {array}: claim {note.claim} has no live reading from now on"
            in (bridge.root / "agent.log").read_text()
        )
    finally:
        for task in tasks:
            bridge.go(task.job_id)
