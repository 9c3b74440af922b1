"""§6.2 through the Slurm bridge: no finished job keeps its reservation.

`pool slurm agent` finds claims still open in Pool whose jobs Slurm has finished and releases
them from sacct after the grace period (2 s here, 60 s by default), graded as the epilog
would. Pool is stopped while jobs end, slurmctld is killed while its epilog is still trying,
a job is cancelled before it starts, and a requeued job keeps its claim until it really ends,
charged every run.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.support.slurm.bridge import WAIT_FOR_GO, Bridge, module_bridge, note_of

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def bridge() -> Iterator[Bridge]:
    for b in module_bridge():
        b.set_config(reconcile_after_s="2")
        yield b


def test_s6_2_job_ending_while_pool_is_down_is_released_by_the_agent(bridge: Bridge) -> None:
    bridge.restart_agent()
    job_id = bridge.submit(
        "-A", "phys", "--comment=pool:estimate=1MJ,grade=ModelBased", "--wrap", "sleep 3"
    )
    note = note_of(bridge.wait_job(job_id, lambda j: j.state == "RUNNING"))
    bridge.stop_pool()
    try:
        bridge.wait_job(job_id, lambda j: j.state == "COMPLETED")
        time.sleep(5)  # the epilog's tries (0.5 + 1 + 2 s) are spent on a Pool that is away
    finally:
        bridge.start_pool()
    assert bridge.claim(note.claim)["state"] == "running"
    actual = bridge.wait_released(note.claim, timeout_s=40)["actual"]
    # The agent used the epilog's evidence: RAPL's figure on a shared node, ModelBased.
    assert actual["grade"] == "ModelBased" and actual["uj"] > 0, bridge.logs()


def test_s6_2_slurmctld_killed_mid_epilog_leaves_nothing_open(bridge: Bridge) -> None:
    job_id = bridge.submit(
        "-A", "phys", "--comment=pool:estimate=1MJ,grade=ModelBased", "--wrap", "sleep 3"
    )
    note = note_of(bridge.wait_job(job_id, lambda j: j.state == "RUNNING"))
    bridge.stop_pool()
    try:
        bridge.wait_job(job_id, lambda j: j.state == "COMPLETED")
        bridge.bed.kill_slurmctld()  # its EpilogSlurmctld is retrying against no Pool
        time.sleep(5)
        bridge.bed.start_slurmctld()
    finally:
        bridge.start_pool()
    actual = bridge.wait_released(note.claim, timeout_s=40)["actual"]
    assert actual["grade"] == "ModelBased" and actual["uj"] > 0, bridge.logs()


def test_s6_2_job_cancelled_before_it_started_is_charged_its_reservation(
    bridge: Bridge,
) -> None:
    job_id = bridge.submit(
        "-A",
        "phys",
        "--begin=now+3600",
        "--comment=pool:estimate_uj=5000000000,grade=ModelBased",
        "--wrap",
        "true",
    )
    note = note_of(bridge.job(job_id))
    assert note.state == "admitted"
    assert bridge.bed.run(["scancel", str(job_id)], user="nobody").returncode == 0
    bridge.wait_job(job_id, lambda j: j.state == "CANCELLED")
    state = bridge.wait_released(note.claim, timeout_s=40)
    # Nothing was read, so the reservation stands, as a guess: never 0 (§2.7).
    assert state["actual"] == {"uj": 5_000_000_000, "grade": "Estimator"}


def test_s6_2_requeued_job_keeps_its_claim_until_it_really_ends(bridge: Bridge) -> None:
    job_id = bridge.submit(
        "-A",
        "phys",
        "--requeue",
        "--comment=pool:estimate=1MJ,grade=ModelBased",
        "--wrap",
        # Long enough for the meter to read each run (it samples every 5 s).
        "sleep 3; " + WAIT_FOR_GO,
    )
    note = note_of(bridge.wait_job(job_id, lambda j: j.state == "RUNNING"))
    time.sleep(6)  # the first run is metered too: its energy is charged as well (§6.2)
    assert bridge.bed.run(["scontrol", "requeue", str(job_id)]).returncode == 0
    bridge.wait_job(job_id, lambda j: j.state == "PENDING")
    # Past the grace period, with the epilog and the agent both having seen the first run end.
    time.sleep(8)
    assert bridge.claim(note.claim)["state"] == "running", (
        bridge.logs()
        + bridge.bed.run(["sacct", "-j", str(job_id), "-D", "-o", "JobID,State,End,Start"]).stdout
    )
    # Slurm holds a requeued job back a while (BeginTime); the administrator lets it go.
    moved = bridge.bed.run(["scontrol", "update", f"jobid={job_id}", "StartTime=now"])
    assert moved.returncode == 0, moved.stderr
    bridge.wait_job(job_id, lambda j: j.state == "RUNNING", timeout_s=60)
    assert bridge.claim(note.claim)["state"] == "running"
    bridge.go(job_id)
    bridge.wait_job(job_id, lambda j: j.state == "COMPLETED")
    actual = bridge.wait_released(note.claim)["actual"]
    assert actual["grade"] == "ModelBased" and actual["uj"] > 0, bridge.logs()
    with bridge.pool() as c:
        runs = c.get("/v1/actions", params={"claim": note.claim, "kind": "run"}).json()
    first = runs["actions"][0]["evidence"]
    assert first["grade"] == "ModelBased" and actual["uj"] > first["energy_uj"] > 0, runs
