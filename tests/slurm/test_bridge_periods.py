"""DESIGN.md §3, budget periods, through the Slurm bridge: a job held because its team's
period budget is spent says so, and starts when the period renews, with no one acting.

A real Slurm and a real clock: the deployment's period is `fixed`, eight seconds long, so
a renewal comes within the test instead of on the first of the month.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from joulepool.deployment.config import MJ
from joulepool.pool import wall_clock_ms
from tests.support.slurm.bridge import Bridge, note_of, start_bridge

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]

LENGTH_MS = 8000
WAIT_FOR_GO = "while [ ! -e go-$SLURM_JOB_ID ]; do sleep 0.1; done"


@pytest.fixture(scope="module")
def bridge() -> Iterator[tuple[Bridge, int]]:
    epoch = wall_clock_ms() // 1000 * 1000
    b = start_bridge(f'[period]\nkind = "fixed"\nlength_ms = {LENGTH_MS}\nepoch_ms = {epoch}\n')
    try:
        yield b, epoch
    finally:
        b.close()
        shutil.rmtree(b.root, ignore_errors=True)


def test_job_held_on_a_spent_period_budget_starts_when_the_period_renews(
    bridge: tuple[Bridge, int],
) -> None:
    b, epoch = bridge
    # Start just after a boundary, so both jobs are decided in one period.
    while (wall_clock_ms() - epoch) % LENGTH_MS > 1000:
        time.sleep(0.05)
    running = b.submit(
        "-A",
        "robo",
        f"--comment=pool:estimate_uj={15 * MJ},grade=ModelBased",
        "--wrap",
        WAIT_FOR_GO,
    )
    submitted = b.sbatch("-A", "robo", f"--comment=pool:estimate_uj={10 * MJ}", "--wrap", "sleep 1")
    assert submitted.returncode == 0, submitted.stderr
    assert "when the period's budget renews" in submitted.stderr
    held_id = int(submitted.stdout.strip())
    held = b.wait_job(held_id, lambda j: j.reason == "JobHeldAdmin")
    note = note_of(held)
    assert (note.state, note.reason) == ("queued", "guarantee_exhausted_may_not_borrow")
    assert note.renews_ms is not None
    assert (note.renews_ms - epoch) % LENGTH_MS == 0
    status = subprocess.run(
        [sys.executable, "-m", "joulepool", "slurm", "status", "--json"],
        env=b.bed.env,
        capture_output=True,
        text=True,
        check=True,
    )
    row = {r["job"]: r for r in json.loads(status.stdout)["held"]}[held_id]
    assert row["renews_ms"] == note.renews_ms
    assert "when the period's guarantee renews" in row["explanation"]
    # Nothing is released: the first job still runs. The period's end alone admits it.
    ran = b.wait_job(held_id, lambda j: j.state in ("RUNNING", "COMPLETED"), timeout_s=60)
    assert b.job(running).state == "RUNNING"
    claim = b.claim(note_of(ran).claim)
    assert claim["state"] in ("running", "released")
    admitted_at = b.pool().get("/v1/ledger").json()
    assert admitted_at["length"] >= 2
    assert wall_clock_ms() >= note.renews_ms
    (b.bed.root / "jobs" / f"go-{running}").touch()
