"""DESIGN.md §7 through the Slurm bridge: the reservation as a limit, on real Slurm.

Real slurmctld/slurmd with `gpu` GRES, the simulated DCGM exporter (250 W a GPU), a real
`pool serve` with a `[runtime]` table and `pool slurm agent` sampling every second: a job
drawing past its reservation is told (SIGUSR1, `act=notice` in its admin comment), then
requeued or cancelled per policy, and charged every run's energy; a job with no reading, or
whose readings stopped, is never acted on, and still charged in full at its end.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from joulepool.bridges.slurm.jobs import list_jobs
from tests.support.slurm.bridge import Bridge, module_bridge, note_of

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(400)]

# Traps the notice, and runs until the test lets it go (a requeued run starts over).
TOLD = (
    "trap 'echo told >> told-$SLURM_JOB_ID' USR1; "
    "while [ ! -e go-$SLURM_JOB_ID ]; do sleep 0.2; done"
)


def set_policy(bridge: Bridge, act: str) -> None:
    """pool.toml's `[runtime]`, put in force by restarting `pool serve`."""
    config = bridge.deployment.folder / "pool.toml"
    text = config.read_text().split("\n[runtime]\n")[0]
    # A notice 2 s before the reservation runs out: with samples every second, the first
    # power figure comes while a job is still being launched, before its trap is set.
    config.write_text(
        text + f'\n[runtime]\nover_reservation = "{act}"\nmargin_pct = 10\nnotice_s = 2\n'
    )
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


def actions(bridge: Bridge, **params: Any) -> list[dict[str, Any]]:
    with bridge.pool() as c:
        answer = c.get("/v1/actions", params=params)
        assert answer.status_code == 200, answer.text
        return list(answer.json()["actions"])


def wait_for(bridge: Bridge, what: str, ok: Any, timeout_s: float = 90) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = ok()
        if found:
            return found
        time.sleep(0.3)
    raise AssertionError(f"{what} never came\n{bridge.logs()}")


def kinds(bridge: Bridge, claim: str) -> list[tuple[str, str]]:
    return [(r["kind"], r["outcome"]) for r in actions(bridge, claim=claim)]


def test_design_s7_a_job_past_its_reservation_is_told_then_requeued_and_charged_every_run(
    bridge: Bridge,
) -> None:
    set_policy(bridge, "requeue")
    # One GPU at 250 W: the 1.5 kJ reservation is used in 6 s, its 10 % margin in 6.6 s.
    job_id = bridge.submit(
        "-A", "phys", "--requeue", "--gres=gpu:1", "--comment=pool:estimate=1.5kJ", "--wrap", TOLD
    )
    note = note_of(bridge.wait_job(job_id, lambda j: j.state == "RUNNING"))
    wait_for(bridge, "the notice", lambda: ("notice", "done") in kinds(bridge, note.claim))
    told = bridge.bed.root / "jobs" / f"told-{job_id}"
    wait_for(bridge, "SIGUSR1 in the job", told.exists, 30)
    assert "act=notice" in bridge.bed.run(["scontrol", "show", "job", str(job_id)]).stdout
    wait_for(bridge, "the requeue", lambda: ("requeue", "done") in kinds(bridge, note.claim))
    bridge.wait_job(job_id, lambda j: j.state == "PENDING")
    run = wait_for(
        bridge,
        "the first run's record",
        lambda: actions(bridge, claim=note.claim, kind="run"),
        60,
    )[0]
    first = run["evidence"]
    assert first["energy_uj"] is not None and first["energy_uj"] >= 1_650_000_000, run
    assert bridge.claim(note.claim)["state"] == "running"
    moved = bridge.bed.run(["scontrol", "update", f"jobid={job_id}", "StartTime=now"])
    assert moved.returncode == 0, moved.stderr
    bridge.wait_job(job_id, lambda j: j.state == "RUNNING", timeout_s=60)
    time.sleep(3)
    bridge.go(job_id)
    bridge.wait_job(job_id, lambda j: j.state == "COMPLETED")
    actual = bridge.wait_released(note.claim, timeout_s=60)["actual"]
    # Both runs: the first's recorded figure plus the second's (3 s or more at 250 W).
    assert actual["uj"] >= first["energy_uj"] + 500_000_000, (actual, first, bridge.logs())
    # The weakest run's grade. The second run was started at once (StartTime=now), and
    # slurmd may then skip its Prolog: that run has no start reading and counts its
    # reservation, graded Estimator, never less than was measured (docs/slurm.md, "A
    # requeue keeps the books"); a run Slurm starts on its own schedule is measured.
    assert actual["grade"] in ("ModelBased", "Estimator"), actual
    # Each act once, though the second run passed its reservation too.
    assert sorted(k for k in kinds(bridge, note.claim) if k[1] == "done") == [
        ("notice", "done"),
        ("requeue", "done"),
    ]


def test_design_s7_a_job_past_its_margin_is_cancelled_and_charged_its_full_actual(
    bridge: Bridge,
) -> None:
    set_policy(bridge, "cancel")
    job_id = bridge.submit(
        "-A", "phys", "--gres=gpu:1", "--comment=pool:estimate=1.5kJ", "--wrap", TOLD
    )
    note = note_of(bridge.wait_job(job_id, lambda j: j.state == "RUNNING"))
    bridge.wait_job(job_id, lambda j: j.state == "CANCELLED", timeout_s=90)
    assert kinds(bridge, note.claim)[:2] == [("cancel", "done"), ("notice", "done")]
    actual = bridge.wait_released(note.claim, timeout_s=60)["actual"]
    assert actual["uj"] >= 1_650_000_000 and actual["grade"] != "Estimator", actual


def test_design_s7_no_reading_or_stopped_readings_never_stop_a_job(bridge: Bridge) -> None:
    set_policy(bridge, "cancel")
    # No GPU, so nothing is sampled: its 1 J reservation is passed at once, unseen.
    blind = bridge.submit("-A", "phys", "--comment=pool:estimate=1J", "--wrap", TOLD)
    blind_note = note_of(bridge.wait_job(blind, lambda j: j.state == "RUNNING"))
    # A GPU job whose exporter stops once it is read: its 5 kJ would be passed in 22 s.
    quiet = bridge.submit(
        "-A", "phys", "--gres=gpu:1", "--comment=pool:estimate=5kJ", "--wrap", TOLD
    )
    quiet_note = note_of(bridge.wait_job(quiet, lambda j: j.state == "RUNNING"))
    wait_for(
        bridge,
        "a reading",
        lambda: (bridge.claim(quiet_note.claim).get("live") or {}).get("energy_uj"),
    )
    exporter = bridge.bed.procs["fake_dcgm"]
    exporter.send_signal(signal.SIGSTOP)
    try:
        time.sleep(30)
        with bridge.pool() as c:
            due = {d["claim"]: d for d in c.get("/v1/actions/due").json()["due"]}
        assert due[blind_note.claim]["kind"] == "withheld"
        assert due[blind_note.claim]["reason"] == "no_reading"
        assert (due[quiet_note.claim]["kind"], due[quiet_note.claim]["reason"]) == (
            "withheld",
            "stale",
        )
        for job_id in (blind, quiet):
            assert bridge.job(job_id).state == "RUNNING", bridge.logs()
        # The stale state was logged once, however many passes saw it.
        withheld = actions(bridge, claim=quiet_note.claim, kind="withheld")
        assert [r["reason"] for r in withheld] == ["stale"]
        # They end while the exporter is still away: nothing fresh ever said "over".
        for job_id in (blind, quiet):
            bridge.go(job_id)
        for job_id in (blind, quiet):
            bridge.wait_job(job_id, lambda j: j.state == "COMPLETED", timeout_s=90)
    finally:
        exporter.send_signal(signal.SIGCONT)
    for n in (blind_note, quiet_note):
        actual = bridge.wait_released(n.claim, timeout_s=90)["actual"]
        assert actual["uj"] > 0, actual
    assert not [k for k in kinds(bridge, quiet_note.claim) if k[0] in ("cancel", "requeue")]


def test_design_s7_an_array_past_its_reservation_is_told_and_cancelled_as_a_whole(
    bridge: Bridge,
) -> None:
    set_policy(bridge, "cancel")
    # Two one-GPU tasks at 250 W each read as one claim of 500 W: its 3 kJ (1.5 kJ a task)
    # run out in 6 s, its 10 % margin in 6.6 s.
    array = bridge.submit(
        "-A", "phys", "--array=0-1", "--gres=gpu:1", "--comment=pool:estimate=1.5kJ", "--wrap", TOLD
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
        wait_for(bridge, "the notice", lambda: ("notice", "done") in kinds(bridge, note.claim))
        for task in tasks:
            told = bridge.bed.root / "jobs" / f"told-{task.job_id}"
            wait_for(bridge, f"SIGUSR1 in task {task.job_id}", told.exists, 30)
        for task in tasks:
            bridge.wait_job(task.job_id, lambda j: j.state == "CANCELLED", timeout_s=90)
        done = [r for r in actions(bridge, claim=note.claim) if r["outcome"] == "done"]
        assert sorted(r["kind"] for r in done) == ["cancel", "notice"]
        # Acted on by the array's own id: every task at once.
        assert {r["job"] for r in done} == {str(array)}, done
    finally:
        for task in tasks:
            bridge.go(task.job_id)
