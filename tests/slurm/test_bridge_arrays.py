"""§2.4 and §6.2 through the Slurm bridge: a job array is held to what Pool admitted.

One claim for the whole array (docs/slurm.md, "Arrays"): every task's energy is in its
estimate and in its release, and its devices are those of the tasks that may run at once,
all of them or the `%N` throttle, which Slurm enforces.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from joulepool.bridges.slurm.jobs import job_energy, run_slurm
from joulepool.deployment.config import MJ
from tests.support.slurm.bridge import Bridge, module_bridge, note_of

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def bridge() -> Iterator[Bridge]:
    for b in module_bridge():
        # Tasks ending together may leave the last epilog a figure short: the agent settles.
        b.set_config(reconcile_after_s="2")
        b.restart_agent()
        yield b


def task_ids(bridge: Bridge, array_job: int) -> list[int]:
    """The job ids sacct gives the array's tasks."""
    out = run_slurm(
        ["sacct", "-j", str(array_job), "-X", "-n", "-P", "-o", "JobIDRaw,JobID"], bridge.bed.env
    )
    return [int(raw) for raw, jid in (ln.split("|") for ln in out.split()) if "_[" not in jid]


def test_s6_2_throttled_array_claims_its_tasks_energy_and_runs_no_more_than_admitted(
    bridge: Bridge,
) -> None:
    array = bridge.submit(
        "-A",
        "phys",
        "--array=0-3%2",
        "--comment=pool:estimate=1MJ,grade=ModelBased",
        "--wrap",
        "sleep 2",
    )
    note = note_of(bridge.job(array))
    # One claim for four tasks, of which two may run at once.
    assert (note.tasks, note.gang_size, note.devices_per_member) == (4, 2, 1)
    assert note.estimate_uj == 4 * MJ
    most = 0
    deadline = time.monotonic() + 60
    while True:
        running = bridge.bed.run(
            ["squeue", "-h", "-j", str(array), "-t", "RUNNING", "-o", "%i"]
        ).stdout.split()
        most = max(most, len(running))
        if not bridge.bed.run(["squeue", "-h", "-j", str(array), "-o", "%i"]).stdout.strip():
            break
        assert time.monotonic() < deadline, "the array never finished"
        time.sleep(0.1)
    assert most == 2
    state = bridge.wait_released(note.claim)
    tasks = task_ids(bridge, array)
    assert len(tasks) == 4
    figures = [job_energy(t, bridge.bed.env).cpu_uj for t in tasks]
    assert all(f is not None and f > 0 for f in figures), figures
    # Every task's energy, once: not one task's (the bug this replaces charged 331 J once).
    assert state["actual"] == {
        "uj": sum(f for f in figures if f is not None),
        "grade": "ModelBased",
    }


def test_s2_4_array_without_throttle_claims_every_task_at_once(bridge: Bridge) -> None:
    # robotics guarantees 4 devices: eight one-CPU tasks at once are more than it may hold.
    wide = bridge.sbatch(
        "-A", "robo", "--array=0-7", "--comment=pool:estimate=1kJ", "--wrap", "true"
    )
    assert wide.returncode != 0
    assert "Pool denied the job (devices_exceed_guarantee)" in wide.stderr, wide.stderr
    # The same array throttled to four at a time fits, and runs.
    narrow = bridge.submit(
        "-A", "robo", "--array=0-7%4", "--comment=pool:estimate=1kJ", "--wrap", "true"
    )
    note = note_of(bridge.job(narrow))
    assert (note.tasks, note.gang_size, note.estimate_uj) == (8, 4, 8_000_000_000)
    bridge.wait_released(note.claim, timeout_s=60)
