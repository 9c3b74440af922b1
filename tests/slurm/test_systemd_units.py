"""The systemd units shipped in contrib/systemd/ for `pool serve` and `pool slurm agent`:
systemd itself accepts them (`systemd-analyze verify`, where it is installed), and they
say what docs/slurm.md promises (reload by SIGHUP, the agent's configuration)."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITS = Path(__file__).parents[2] / "contrib" / "systemd"
SHIPPED_POOL = "/usr/local/bin/pool"


def read_unit(name: str) -> configparser.ConfigParser:
    unit = configparser.ConfigParser(interpolation=None, strict=True)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string((UNITS / name).read_text(encoding="utf-8"), source=name)
    return unit


def test_pool_serve_unit_reloads_by_sighup_and_stops_by_sigterm() -> None:
    unit = read_unit("pool-serve.service")
    assert unit.sections() == ["Unit", "Service", "Install"]
    service = unit["Service"]
    assert service["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert service["KillSignal"] == "SIGTERM"
    assert service["ExecStart"].startswith(f"{SHIPPED_POOL} serve /")
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_agent_unit_runs_the_agent_as_root_with_slurm_conf() -> None:
    unit = read_unit("pool-slurm-agent.service")
    service = unit["Service"]
    assert service["User"] == "root"
    assert service["Environment"] == "SLURM_CONF=/etc/slurm/slurm.conf"
    assert service["ExecStart"] == (
        f"{SHIPPED_POOL} slurm agent --config /etc/slurm/pool-bridge.toml"
    )
    assert service["Restart"] == "always"


@pytest.mark.parametrize("name", ["pool-serve.service", "pool-slurm-agent.service"])
def test_systemd_accepts_the_unit(name: str, tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd); parsed above")
    # verify insists that ExecStart's program exists: this environment's `pool` stands in.
    pool = Path(sys.executable).with_name("pool")
    assert pool.exists(), pool
    text = (UNITS / name).read_text(encoding="utf-8").replace(SHIPPED_POOL, str(pool))
    unit = tmp_path / name
    unit.write_text(text, encoding="utf-8")
    done = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    # verify exits 0 on a setting it ignores ("Failed to parse ..., ignoring"): none may be.
    complaints = [ln for ln in done.stderr.splitlines() if str(unit) in ln or name in ln]
    assert complaints == [], complaints
