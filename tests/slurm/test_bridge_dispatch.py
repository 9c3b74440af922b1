"""The bridge's GPU Prolog/Epilog as pieces of a site's prolog.d/epilog.d, run by the
dispatchers in contrib/slurm/ on the real test Slurm: the site's pieces and the bridge's
both run for each job, and the job's GPU energy reaches the ledger."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.slurm.bridge import Bridge, module_bridge, note_of

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def bridge() -> Iterator[Bridge]:
    yield from module_bridge(dispatch=True)


def test_dispatched_pieces_run_the_sites_and_the_bridges_gpu_scripts(bridge: Bridge) -> None:
    job_id = bridge.submit(
        "-A",
        "phys",
        "--exclusive",
        "--gres=gpu:2",
        "--comment=pool:estimate=1MJ,grade=ModelBased",
        "--wrap",
        "sleep 2",
    )
    note = note_of(bridge.wait_job(job_id, lambda j: j.state == "COMPLETED"))
    actual = bridge.wait_released(note.claim)["actual"]
    # The bridge's pieces: the node published the job's GPU figure from both readings.
    [entry] = bridge.gpu_entries(bridge.bed.node_names[0], job_id)
    assert entry.group(3) == "HwShunt"
    assert actual["uj"] >= int(entry.group(2))
    # The site's pieces ran around the same job; the piece that is not executable did not.
    log = (bridge.root / "site-pieces.log").read_text().split("\n")
    assert f"prolog {job_id}" in log and f"epilog {job_id}" in log
    assert bridge.job(job_id).state == "COMPLETED"
