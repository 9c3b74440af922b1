"""§2.4 and §6.2 through the Slurm bridge on two nodes: a two-node job is a gang of two,
and its energy is the sum of both nodes'.

Two slurmd daemons on this one host (Slurm's multiple-slurmd: node1 and node2, one port
each), each with four GPUs of its own, the GPU Prolog/Epilog on both, one simulated DCGM
exporter serving all eight GPUs, and the simulated RAPL meter, which both nodes read.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from joulepool.bridges.slurm.jobs import job_energy
from tests.support.slurm.bridge import Bridge, module_bridge, note_of

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def bridge() -> Iterator[Bridge]:
    yield from module_bridge(nodes=2)


def test_s2_4_two_node_job_is_a_gang_of_two_charged_both_nodes(bridge: Bridge) -> None:
    t0 = time.monotonic()
    job_id = bridge.submit(
        "-A",
        "phys",
        "-N",
        "2",
        "--gres=gpu:1",
        "--comment=pool:estimate=2MJ,grade=ModelBased",
        "--wrap",
        "sleep 3",
    )
    note = note_of(bridge.wait_job(job_id, lambda j: j.state == "COMPLETED"))
    assert (note.gang_size, note.devices_per_member) == (2, 1)
    actual = bridge.wait_released(note.claim)["actual"]
    elapsed = time.monotonic() - t0
    per_node = [bridge.gpu_entries(node, job_id) for node in ("node1", "node2")]
    assert [len(e) for e in per_node] == [1, 1], per_node
    assert all(e[0].group(2) is not None for e in per_node), [e[0].group(0) for e in per_node]
    gpu = [int(e[0].group(2)) for e in per_node]
    for uj in gpu:
        assert 250 * 3 * 1_000_000 <= uj <= 250 * elapsed * 1_000_000
    rapl = job_energy(job_id, bridge.bed.env).cpu_uj
    assert rapl is not None and rapl > 0
    assert actual == {"uj": rapl + sum(gpu), "grade": "ModelBased"}
