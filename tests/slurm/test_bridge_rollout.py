"""Day one on a real cluster: shadow mode, default estimates and exemptions, end to end on
the test Slurm (real slurmctld, slurmdbd, sbatch) and a real `pool serve`.

The deployment is `pool init`'s example tree (see test_bridge.py): robotics has a 20 MJ
guarantee, phys maps to vision, ling to language.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from joulepool.bridges.slurm.config import read_bridge_config
from joulepool.deployment.config import MJ
from tests.support.slurm.bridge import WAIT_FOR_GO, Bridge, module_bridge, note_of
from tests.support.slurm.testbed import PARTITION

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def bridge() -> Iterator[Bridge]:
    yield from module_bridge()


@contextmanager
def configured(bridge: Bridge, pool: str = "", tables: str = "") -> Iterator[None]:
    """The bridge's file with `pool` lines added to [pool] and `tables` appended, for the
    block; job_submit.lua reads it at every submission. The Python reader must accept it too."""
    original = bridge.config.read_text()
    text = original.replace("[pool]\n", f"[pool]\n{pool}\n", 1) + "\n" + tables + "\n"
    bridge.config.write_text(text)
    try:
        read_bridge_config(bridge.config)
        yield
    finally:
        bridge.config.write_text(original)


def dashboard_verdicts(bridge: Bridge) -> list[dict[str, Any]]:
    """The verdicts `pool serve` shows on its dashboard, waiting out its first build."""
    deadline = time.monotonic() + 60
    with bridge.pool() as c:
        while True:
            r = c.get("/v1/dashboard", params={"verdicts": 200})
            if r.status_code == 200:
                return list(r.json()["verdicts"])
            assert r.status_code == 503 and time.monotonic() < deadline, r.text
            time.sleep(0.5)


def ledger_length(bridge: Bridge) -> int:
    with bridge.pool() as c:
        r = c.get("/v1/ledger")
        assert r.status_code == 200, r.text
        return int(r.json()["length"])


def test_shadow_mode_records_the_verdict_that_would_have_held_and_holds_nothing(
    bridge: Bridge,
) -> None:
    with configured(bridge, pool='mode = "shadow"'):
        big = bridge.submit(
            "-A",
            "robo",
            f"--comment=pool:estimate_uj={15 * MJ},grade=ModelBased",
            "--wrap",
            WAIT_FOR_GO,
        )
        bridge.wait_job(big, lambda j: j.state == "RUNNING")
        assert note_of(bridge.job(big)).state == "admitted"
        # A guess that would have to borrow: enforcing, it would be held.
        guess = bridge.submit(
            "-A", "robo", f"--comment=pool:estimate_uj={10 * MJ}", "--wrap", "true"
        )
        done = bridge.wait_job(guess, lambda j: j.state == "COMPLETED")
        note = note_of(done)
        assert (note.state, note.reason) == ("shadow_queued", "guarantee_exhausted_may_not_borrow")
        shown = [v for v in dashboard_verdicts(bridge) if v["claim"] == note.claim]
        assert [(v["verdict"], v.get("reason")) for v in shown] == [
            ("queue", "guarantee_exhausted_may_not_borrow")
        ]
        # A job enforcing mode would reject (no estimate) runs too, saying why.
        unestimated = bridge.submit("-A", "robo", "--wrap", "true")
        bridge.wait_job(unestimated, lambda j: j.state == "COMPLETED")
        bridge.go(big)
        ended = bridge.wait_job(big, lambda j: j.state == "COMPLETED")
        bridge.wait_released(note_of(ended).claim)
    out = bridge.bed.run(["scontrol", "show", "job", str(unestimated)], check=True).stdout
    assert "AdminComment=pool:shadow=rejected;reason=no_estimate" in out
    # The operator's comparison (docs/slurm.md, "Rolling out") finds both in sacct.
    query = ["sacct", "-a", "-S", "now-1days", "-X", "-n", "-P"]
    query += ["-o", "JobID,Account,State,Start,End,AdminComment"]
    wanted = {
        guess: "|pool:claim=" + note.claim + ";",
        unestimated: "|pool:shadow=rejected;reason=no_estimate",
    }
    deadline = time.monotonic() + 60
    while True:
        lines = bridge.bed.run(query, check=True).stdout.splitlines()
        rows = {int(r.split("|")[0]): r for r in lines if r.split("|")[0].isdigit()}
        if all(text in rows.get(job_id, "") for job_id, text in wanted.items()):
            break
        assert time.monotonic() < deadline, lines
        time.sleep(1)
    assert ";state=shadow_queued;reason=guarantee_exhausted_may_not_borrow" in rows[guess]
    # The agent never held or touched the shadow-queued job.
    assert f"job {guess}" not in (bridge.root / "agent.log").read_text()


def test_job_with_no_estimate_is_admitted_with_the_default_estimate(bridge: Bridge) -> None:
    tables = "\n".join(
        [
            "[default_estimate]",
            "gpu_power_w = 700",
            "[account_estimate]",
            'ling = "2MJ"',
        ]
    )
    with configured(bridge, tables=tables):
        gpu_job = bridge.submit("-A", "phys", "--gres=gpu:2", "--time=10", "--wrap", "true")
        fixed = bridge.submit("-A", "ling", "--wrap", "true")
        # No default for CPU-only jobs of phys, and no time limit: rejected, naming the fix.
        refused = bridge.sbatch("-A", "phys", "--wrap", "true")
    note = note_of(bridge.wait_job(gpu_job, lambda j: j.state == "COMPLETED"))
    # 700 W x 2 GPUs x 10 minutes, a guess.
    assert (note.state, note.estimate_uj, note.grade) == (
        "admitted",
        700 * 2 * 600 * 10**6,
        "Estimator",
    )
    assert bridge.claim(note.claim)["reserved"] == {"uj": 840_000 * 10**6, "grade": "Estimator"}
    note = note_of(bridge.wait_job(fixed, lambda j: j.state == "COMPLETED"))
    assert (note.state, note.estimate_uj, note.grade) == ("admitted", 2 * MJ, "Estimator")
    assert refused.returncode != 0
    assert "carries no energy estimate" in refused.stderr


def test_default_estimate_needs_a_time_limit_to_scale(bridge: Bridge) -> None:
    with configured(bridge, tables="[default_estimate]\ngpu_power_w = 700"):
        # The test partition's MaxTime is INFINITE and it has no DefaultTime.
        refused = bridge.sbatch("-A", "phys", "--gres=gpu:1", "--wrap", "true")
    assert refused.returncode != 0
    assert "no time limit" in refused.stderr


def test_default_figure_the_checker_would_refuse_rejects_the_job_naming_it(
    bridge: Bridge,
) -> None:
    original = bridge.config.read_text()
    # Written past `pool slurm check-config`, as a hurried edit would be.
    bridge.config.write_text(original + '\n[account_estimate]\nphys = "4mj"\n')
    try:
        refused = bridge.sbatch("-A", "phys", "--wrap", "true")
    finally:
        bridge.config.write_text(original)
    assert refused.returncode != 0
    assert "the bridge's default estimate for this job is not understood" in refused.stderr
    assert "milli or mega" in refused.stderr


def test_exempt_account_and_partition_are_never_claimed(bridge: Bridge) -> None:
    before = ledger_length(bridge)
    with configured(bridge, tables="[exempt_accounts]\nadmin = true"):
        # Not mapped, no estimate: exempt all the same.
        admin = bridge.submit("-A", "admin", "--gres=gpu:1", "--wrap", "true")
        # Not exempt: still needs an estimate.
        assert bridge.sbatch("-A", "phys", "--wrap", "true").returncode != 0
    with configured(bridge, tables=f"[exempt_partitions]\n{PARTITION} = true"):
        # No -p: the default partition is the job's.
        default_partition = bridge.submit("-A", "phys", "--wrap", "true")
    with configured(bridge, pool='cpu_only = "exempt"'):
        cpu = bridge.submit("-A", "phys", "--wrap", "true")
        assert bridge.sbatch("-A", "phys", "--gres=gpu:1", "--wrap", "true").returncode != 0
    for job_id, why in (
        (admin, "account:admin"),
        (default_partition, f"partition:{PARTITION}"),
        (cpu, "cpu_only"),
    ):
        job = bridge.wait_job(job_id, lambda j: j.state == "COMPLETED")
        assert (job.note, job.exempt) == (None, why)
    assert ledger_length(bridge) == before
    deadline = time.monotonic() + 30
    while f"job {cpu}: exempt (cpu_only)" not in (bridge.root / "agent.log").read_text():
        assert time.monotonic() < deadline, bridge.logs()
        time.sleep(0.2)
    log = (bridge.root / "agent.log").read_text()
    assert f"job {admin}: exempt (account:admin), never claimed" in log


SITE_JOB_SUBMIT = """
-- A site's own job_submit.lua: rules of its own, then the bridge in one call.
package.path = "{etc}/?.lua;" .. package.path
local pool_bridge = require("pool_bridge")

function slurm_job_submit(job_desc, part_list, submit_uid)
  job_desc.name = "site-" .. (job_desc.name or "job")
  if job_desc.account == "closed" then
    slurm.log_user("site: account closed is closed")
    return slurm.ERROR
  end
  return pool_bridge.job_submit(job_desc, part_list, submit_uid)
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return pool_bridge.job_modify(job_desc, job_rec, part_list, modify_uid)
end

return slurm.SUCCESS
"""


def test_site_job_submit_calling_the_bridge_module_keeps_both_rules(bridge: Bridge) -> None:
    shipped = bridge.bed.job_submit.read_text()
    assert "pool_bridge.job_submit(job_desc, part_list, submit_uid)" in shipped
    bridge.bed.set_job_submit(SITE_JOB_SUBMIT.format(etc=bridge.bed.etc))
    try:
        job_id = bridge.submit(
            "-A", "phys", "--comment=pool:estimate_uj=1000000,grade=ModelBased", "--wrap", "true"
        )
        closed = bridge.sbatch("-A", "closed", "--wrap", "true")
        unestimated = bridge.sbatch("-A", "phys", "--wrap", "true")
    finally:
        bridge.bed.set_job_submit(shipped)
    done = bridge.wait_job(job_id, lambda j: j.state == "COMPLETED")
    assert note_of(done).state == "admitted"  # the bridge's
    shown = bridge.bed.run(["scontrol", "show", "job", str(job_id)], check=True).stdout
    assert "JobName=site-wrap" in shown  # the site's
    assert closed.returncode != 0 and "account closed is closed" in closed.stderr
    assert unestimated.returncode != 0 and "carries no energy estimate" in unestimated.stderr


def test_uninstall_releases_every_hold_the_bridge_set(bridge: Bridge) -> None:
    big = bridge.submit(
        "-A",
        "robo",
        f"--comment=pool:estimate_uj={15 * MJ},grade=ModelBased",
        "--wrap",
        WAIT_FOR_GO,
    )
    bridge.wait_job(big, lambda j: j.state == "RUNNING")
    guess = bridge.submit("-A", "robo", f"--comment=pool:estimate_uj={10 * MJ}", "--wrap", "true")
    bridge.wait_job(guess, lambda j: j.reason == "JobHeldAdmin")
    # A job of Slurm's own hold, not the bridge's, stays held.
    own = bridge.submit(
        "-A",
        "phys",
        "--hold",
        "--comment=pool:estimate_uj=1000000,grade=ModelBased",
        "--wrap",
        "true",
    )
    assert bridge.agent is not None
    bridge.agent.terminate()
    bridge.agent.wait(timeout=10)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "joulepool", "slurm", "uninstall", "--json"],
            env=bridge.bed.env,
            capture_output=True,
            text=True,
            check=True,
        )
        assert json.loads(done.stdout) == {"released": [guess]}
        ran = bridge.wait_job(guess, lambda j: j.state == "COMPLETED")
        assert (note_of(ran).state, note_of(ran).reason) == ("unaccounted", "bridge_uninstalled")
        assert bridge.job(own).reason == "JobHeldUser"
    finally:
        bridge.go(big)
        bridge.bed.run(["scancel", str(own)])
        bridge.start_agent()
    bridge.wait_released(note_of(bridge.wait_job(big, lambda j: j.state == "COMPLETED")).claim)
