"""The node side of the bridge as one zipapp, run by the system's Python with the standard
library alone (`python3 -I -S`: no site-packages, no PYTHONPATH), on the real test Slurm:
slurmd's GPU Prolog/Epilog publish a job's GPU figure, and the installed EpilogSlurmctld
releases a job's claim, all through `pool-node.pyz`."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from joulepool.bridges.slurm.install import EPILOG, GPU_EPILOG, GPU_PROLOG, NODE_APP
from tests.support.slurm.bridge import Bridge, module_bridge, note_of

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]

SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.fixture(scope="module")
def bridge() -> Iterator[Bridge]:
    yield from module_bridge()


def build(out: Path) -> Path:
    done = subprocess.run(
        [sys.executable, "-m", "joulepool", "slurm", "build-node-zipapp", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return out


def bare(app: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The zipapp under the system's Python, isolated and without site-packages."""
    return subprocess.run(
        [SYSTEM_PYTHON, "-I", "-S", str(app), *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_zipapp_needs_no_site_packages_and_refuses_an_unknown_command(tmp_path: Path) -> None:
    app = build(tmp_path / "pool-node.pyz")
    done = bare(app, "install-everything", env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 2
    assert "usage: pool-node.pyz prolog|epilog" in done.stderr
    assert "Traceback" not in done.stderr
    # The interpreter has no msgspec, httpx or rich of its own: the zipapp brings what it needs.
    probe = subprocess.run(
        [SYSTEM_PYTHON, "-I", "-S", "-c", "import msgspec"], capture_output=True, check=False
    )
    assert probe.returncode != 0


def test_zipapp_runs_the_gpu_prolog_and_epilog_with_the_standard_library_alone(
    bridge: Bridge, tmp_path: Path
) -> None:
    app = build(tmp_path / "pool-node.pyz")
    node = bridge.bed.node_names[0]
    job_id = 990_001  # a job id the test bed never reaches: the figure is told apart by it
    env = {
        "PATH": "/usr/bin:/bin:/usr/sbin:/sbin",
        "SLURM_CONF": str(bridge.bed.conf),
        "SLURM_JOB_ID": str(job_id),
        "SLURMD_NODENAME": node,
        "SLURM_JOB_GPUS": "0,1",
    }
    state = tmp_path / "state"
    url = bridge.bed.dcgm_url
    started = bare(app, "prolog", "--state-dir", str(state), "--dcgm-url", url, env=env)
    assert started.returncode == 0, started.stderr
    time.sleep(1.0)
    ended = bare(app, "epilog", "--state-dir", str(state), "--dcgm-url", url, env=env)
    assert ended.returncode == 0, ended.stderr
    assert "Traceback" not in started.stderr + ended.stderr
    [entry] = bridge.gpu_entries(node, job_id)
    # Two simulated 250 W GPUs for a second or more, read through DCGM.
    assert entry.group(2) is not None and int(entry.group(2)) >= 2 * 250 * 10**6
    assert entry.group(3) == "HwShunt"


def test_installed_scripts_run_the_zipapp_isolated_and_release_a_claim(bridge: Bridge) -> None:
    etc = bridge.config.parent
    assert (etc / NODE_APP).exists()
    for name in (EPILOG, GPU_PROLOG, GPU_EPILOG):
        script = (etc / name).read_text()
        assert "PYTHONPATH" not in script, name
        assert f" -I {etc / NODE_APP} " in script, script
    job_id = bridge.submit(
        "-A",
        "phys",
        "--gres=gpu:1",
        "--comment=pool:estimate=1MJ,grade=ModelBased",
        "--wrap",
        "true",
    )
    done = bridge.wait_job(job_id, lambda j: j.state == "COMPLETED")
    released = bridge.wait_released(note_of(done).claim)
    assert released["actual"]["uj"] > 0
