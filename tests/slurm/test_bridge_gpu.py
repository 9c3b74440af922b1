"""§6.2 and §2.3 through the Slurm bridge on a GPU node: a job's GPU energy reaches the ledger.

Real Slurm with `gpu` GRES (gres.conf `File=` entries backed by device files the testbed
makes), slurmd running the bridge's GPU Prolog and Epilog as root, and a simulated DCGM
exporter: a real HTTP server on 127.0.0.1 whose GPUs draw 250 W each. The simulated RAPL
meter draws 100 W for the node. NVML is not installed here, so the node reads DCGM.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from joulepool.bridges.slurm.jobs import job_energy
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
