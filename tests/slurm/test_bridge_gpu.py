"""§6.2 and §2.3 through the Slurm bridge on a GPU node: a job's GPU energy reaches the ledger.

Real Slurm with `gpu` GRES (gres.conf `File=` entries backed by device files the testbed
makes), slurmd running the bridge's GPU Prolog and Epilog as root, and a simulated DCGM
exporter: a real HTTP server on 127.0.0.1 whose GPUs draw 250 W each. The simulated RAPL
meter draws 100 W for the node. NVML is not installed here, so the node reads DCGM.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from joulepool.bridges.slurm.jobs import job_energy, sacct_restarts
from tests.support.slurm.bridge import WAIT_FOR_GO, Bridge, module_bridge, note_of

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]

GPU_W = 250


@pytest.fixture(scope="module")
def bridge() -> Iterator[Bridge]:
    for b in module_bridge():
        # job_submit.lua reads the file at every submission.
        b.config.write_text(b.config.read_text().replace("[pool]\n", "[pool]\ngpus_per_node = 4\n"))
        yield b


def test_s6_2_exclusive_gpu_job_is_charged_rapl_plus_its_gpus_as_hwshunt(bridge: Bridge) -> None:
    t0 = time.monotonic()
    job_id = bridge.submit(
        "-A",
        "phys",
        "--exclusive",
        "--gres=gpu:2",
        "--comment=pool:estimate=1MJ,grade=ModelBased",
        "--wrap",
        "sleep 3",
    )
    note = note_of(bridge.wait_job(job_id, lambda j: j.state == "COMPLETED"))
    actual = bridge.wait_released(note.claim)["actual"]
    elapsed = time.monotonic() - t0
    entries = bridge.gpu_entries("localhost", job_id)
    assert len(entries) == 1, entries
    gpu_uj, grade, gpus = int(entries[0].group(2)), entries[0].group(3), int(entries[0].group(5))
    # Slurm gives an exclusive job every GPU of its node, so all four are the job's, and
    # with gpus_per_node configured it claimed all four.
    assert (grade, gpus) == ("HwShunt", 4)
    assert note.devices_per_member == 4
    # Four GPUs at 250 W for the job's life (3 s of sleep, inside the allocation), no longer
    # than the test waited.
    assert 4 * GPU_W * 3 * 1_000_000 <= gpu_uj <= 4 * GPU_W * elapsed * 1_000_000
    rapl = job_energy(job_id, bridge.bed.env).cpu_uj
    assert rapl is not None and rapl > 0
    assert actual == {"uj": rapl + gpu_uj, "grade": "HwShunt"}


def test_s2_5_gpu_job_on_a_shared_node_sums_both_at_the_weaker_grade(bridge: Bridge) -> None:
    job_id = bridge.submit(
        "-A", "phys", "--gres=gpu:1", "--comment=pool:estimate=1MJ", "--wrap", "sleep 1"
    )
    note = note_of(bridge.wait_job(job_id, lambda j: j.state == "COMPLETED"))
    actual = bridge.wait_released(note.claim)["actual"]
    (entry,) = bridge.gpu_entries("localhost", job_id)
    assert (entry.group(3), entry.group(5)) == ("HwShunt", "1")
    rapl = job_energy(job_id, bridge.bed.env).cpu_uj
    assert rapl is not None
    # RAPL's node-wide counter split on a shared node is ModelBased: the sum is no better.
    assert actual == {"uj": rapl + int(entry.group(2)), "grade": "ModelBased"}


def test_s2_3_each_job_is_charged_exactly_its_own_gpus(bridge: Bridge) -> None:
    """Two jobs at once hold two GPUs each; each node entry covers exactly two GPUs."""
    ids = [
        bridge.submit(
            "-A",
            "phys",
            "--gres=gpu:2",
            "--comment=pool:estimate=1MJ",
            "--wrap",
            "echo $CUDA_VISIBLE_DEVICES; " + WAIT_FOR_GO,
        )
        for _ in range(2)
    ]
    for job_id in ids:
        bridge.wait_job(job_id, lambda j: j.state == "RUNNING")
    for job_id in ids:
        bridge.go(job_id)
    seen = []
    for job_id in ids:
        note = note_of(bridge.wait_job(job_id, lambda j: j.state == "COMPLETED"))
        bridge.wait_released(note.claim)
        (entry,) = bridge.gpu_entries("localhost", job_id)
        assert entry.group(5) == "2"
        seen.append((bridge.bed.root / "jobs" / f"job-{job_id}.out").read_text().strip())
    # Slurm gave them different GPUs, and the Prolog read those.
    assert len(set(seen)) == 2, seen


def test_s2_7_gpu_counter_reset_mid_job_charges_the_reservation_as_estimator(
    bridge: Bridge,
) -> None:
    job_id = bridge.submit(
        "-A",
        "phys",
        "--exclusive",
        "--gres=gpu:1",
        "--comment=pool:estimate_uj=3000000000,grade=ModelBased",
        "--wrap",
        WAIT_FOR_GO,
    )
    bridge.wait_job(job_id, lambda j: j.state == "RUNNING")
    time.sleep(1)  # the counters grow past what the Prolog read
    bridge.bed.reset_gpu_counters()
    bridge.go(job_id)
    note = note_of(bridge.wait_job(job_id, lambda j: j.state == "COMPLETED"))
    state = bridge.wait_released(note.claim)
    (entry,) = bridge.gpu_entries("localhost", job_id)
    assert entry.group(0).startswith(f"pool-gpu:{job_id}=none/counter_reset/")
    # Never 0, never a negative step, never RAPL's part alone graded as if complete.
    assert state["actual"] == {"uj": 3_000_000_000, "grade": "Estimator"}


def requeue_first_run(bridge: Bridge, at_once: bool = False) -> tuple[int, Any, dict[str, Any]]:
    """An exclusive GPU job, requeued after a 3 s first run (`at_once`: and let start again
    at once, past its requeue hold): its id, note and the first run's record in Pool's
    action log, checked against that run's own evidence."""
    job_id = bridge.submit(
        "-A",
        "phys",
        "--exclusive",
        "--requeue",
        "--gres=gpu:1",
        "--comment=pool:estimate=1MJ,grade=ModelBased",
        "--wrap",
        "sleep 2; " + WAIT_FOR_GO,
    )
    note = note_of(bridge.wait_job(job_id, lambda j: j.state == "RUNNING"))
    time.sleep(3)
    assert bridge.bed.run(["scontrol", "requeue", str(job_id)]).returncode == 0
    bridge.wait_job(job_id, lambda j: j.state == "PENDING")
    deadline = time.monotonic() + 60
    runs: list[dict[str, Any]] = []
    while not runs and time.monotonic() < deadline:
        with bridge.pool() as c:
            runs = list(
                c.get("/v1/actions", params={"claim": note.claim, "kind": "run"}).json()["actions"]
            )
        time.sleep(0.3)
    assert len(runs) == 1, bridge.logs()
    first = runs[0]["evidence"]
    # Run 1: RAPL's figure for the run sacct recorded REQUEUED plus its GPUs' (untagged:
    # a first run's entry), both HwShunt.
    (first_gpu,) = bridge.gpu_entries("localhost", job_id)
    first_rapl = job_energy(job_id, bridge.bed.env, requeued=True).cpu_uj
    assert first_rapl is not None and first_gpu.group(6) is None, first_gpu.group(0)
    assert first == {"energy_uj": first_rapl + int(first_gpu.group(2)), "grade": "HwShunt"}
    if at_once:
        moved = bridge.bed.run(["scontrol", "update", f"jobid={job_id}", "StartTime=now"])
        assert moved.returncode == 0, moved.stderr
    return job_id, note, first


@pytest.mark.timeout(420)
def test_s6_2_requeued_gpu_job_is_charged_every_runs_measured_gpu_figure(bridge: Bridge) -> None:
    """A GPU job requeued mid-run and started again when Slurm lets it (its requeue hold,
    EligibleTime, outlasts slurmd's memory of the job's credential): each run's GPUs are
    read by that run's own Prolog and Epilog, and the release is both runs' measured
    figures at the meter's grade, never the reservation as Estimator."""
    job_id, note, first = requeue_first_run(bridge)
    started = bridge.wait_job(job_id, lambda j: j.state == "RUNNING", timeout_s=240)
    assert started.restarts == 1
    time.sleep(3)
    bridge.go(job_id)
    bridge.wait_job(job_id, lambda j: j.state == "COMPLETED")
    actual = bridge.wait_released(note.claim, timeout_s=60)["actual"]
    (second_gpu,) = bridge.gpu_entries("localhost", job_id)
    # The second run's own entry, tagged with its run, HwShunt: four GPUs (exclusive) at
    # 250 W for its 3 s at least.
    assert (second_gpu.group(3), second_gpu.group(6)) == ("HwShunt", "1"), second_gpu.group(0)
    assert int(second_gpu.group(2)) >= 4 * GPU_W * 3 * 1_000_000
    assert actual["grade"] == "HwShunt", (actual, bridge.logs())
    # What is left is the second run's RAPL figure as the epilog read it from sacct at its
    # end (slurmdbd may settle it by a sample afterwards).
    second_rapl = actual["uj"] - first["energy_uj"] - int(second_gpu.group(2))
    settled = job_energy(job_id, bridge.bed.env).cpu_uj
    assert settled is not None and abs(second_rapl - settled) <= settled // 5, (actual, settled)


def test_s6_2_a_run_started_at_once_is_charged_its_own_figure_never_an_earlier_runs(
    bridge: Bridge,
) -> None:
    """Let start again at once (`StartTime=now`, past its requeue hold), the second run
    may get no GPU Prolog from slurmd, which runs it once for a job id while it remembers
    the job's credential (seen on this bed when the run was allocated within the second
    the first ended: the Prolog ran once, the Epilog twice; sooner still, slurmd refuses
    the run, "Job credential revoked"). Either way the run is charged by its own entry,
    tagged with its run: its measured figure, or with none its reservation graded
    Estimator; never the first run's entry, still in the node's comment while the second
    run's Epilog is at work."""
    job_id, note, first = requeue_first_run(bridge, at_once=True)
    bridge.wait_job(job_id, lambda j: j.state == "RUNNING" and j.restarts == 1, timeout_s=60)
    time.sleep(2)
    bridge.go(job_id)
    bridge.wait_job(job_id, lambda j: j.state == "COMPLETED")
    actual = bridge.wait_released(note.claim, timeout_s=90)["actual"]
    (second_gpu,) = bridge.gpu_entries("localhost", job_id)
    assert second_gpu.group(6) == "1", second_gpu.group(0)
    if second_gpu.group(2) is None:
        assert second_gpu.group(4) == "no_start_reading", second_gpu.group(0)
        assert actual == {"uj": first["energy_uj"] + 10**12, "grade": "Estimator"}, actual
    else:
        second_rapl = actual["uj"] - first["energy_uj"] - int(second_gpu.group(2))
        settled = job_energy(job_id, bridge.bed.env).cpu_uj
        assert settled is not None and abs(second_rapl - settled) <= settled // 5, actual
        assert actual["grade"] == "HwShunt", actual
    # Where slurmctld has forgotten the job, sacct's runs give its Restarts count, so the
    # agent looks for the last run's entries (`@1`), not the first's.
    assert sacct_restarts(job_id, bridge.bed.env) == 1
