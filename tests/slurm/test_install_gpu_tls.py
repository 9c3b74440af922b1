"""`pool slurm install-config --gpu --dcgm-url --ca-file` and `check-config`, without Slurm:
the files and slurm.conf lines a GPU cluster over TLS needs, and bad values refused."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from joulepool.bridges.slurm.config import BridgeConfigError, read_bridge_config
from tests.support.servers import pool_cli


def pool(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return pool_cli(*args, stdin=stdin, timeout_s=60)


def test_api_install_config_writes_the_gpu_prolog_epilog_and_tls_settings(
    tmp_path: Path, slurm_user: str
) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not read here")
    done = pool(
        "slurm",
        "install-config",
        str(tmp_path / "etc"),
        "--url",
        "https://pool.example:7460",
        "--ca-file",
        str(ca),
        "--token-from",
        "-",
        "--map",
        "phys=vision",
        "--gpu",
        "--dcgm-url",
        "http://127.0.0.1:9400/metrics",
        "--slurm-user",
        slurm_user,
        "--json",
        stdin="tok-123\n",
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    lines = out["slurm_conf_lines"]
    etc = tmp_path / "etc"
    assert f"Prolog={etc / 'pool-gpu-prolog.sh'}" in lines
    assert f"Epilog={etc / 'pool-gpu-epilog.sh'}" in lines
    assert "PrologFlags=Alloc,Contain" in lines and "AccountingStorageTRES=gres/gpu" in lines
    for phase in ("prolog", "epilog"):
        script = (etc / f"pool-gpu-{phase}.sh").read_text()
        assert f" -I {etc / 'pool-node.pyz'} {phase} " in script
        assert "PYTHONPATH" not in script
        assert "--dcgm-url http://127.0.0.1:9400/metrics" in script
        assert os.access(etc / f"pool-gpu-{phase}.sh", os.X_OK)
    config = read_bridge_config(etc / "pool-bridge.toml")
    assert (config.url, config.ca_file, config.gpu_energy) == (
        "https://pool.example:7460",
        ca,
        True,
    )
    checked = pool("slurm", "check-config", "--config", str(etc / "pool-bridge.toml"), "--json")
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["gpu_energy"] is True


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ('ca_file = "relative.pem"', "pool.ca_file"),
        ("gpu_energy = 1", "pool.gpu_energy"),
        ("gpu_wait_s = 301", "pool.gpu_wait_s"),
        ("gpus_per_node = 0", "pool.gpus_per_node"),
        ("reconcile_after_s = 86401", "pool.reconcile_after_s"),
        ('url = "ftp://pool.example"', "pool.url"),
        ('url = "http://pool.example:7460"', "pool.url"),
        ('url = "http://10.0.0.5:7460"', "pool.url"),
    ],
)
def test_api_bad_bridge_settings_are_refused_naming_the_key(
    tmp_path: Path, line: str, key: str
) -> None:
    base = '[pool]\nurl = "https://pool.example:7460"\ntoken_file = "/etc/slurm/t"\n'
    if line.startswith("url"):
        base = base.replace('url = "https://pool.example:7460"\n', "")
    path = tmp_path / "pool-bridge.toml"
    path.write_text(base + line + "\n")
    with pytest.raises(BridgeConfigError, match=key.replace(".", r"\.")):
        read_bridge_config(path)


@pytest.mark.parametrize("url", ["http://127.0.0.1:7460", "http://localhost:7460"])
def test_api_plain_http_is_taken_only_to_this_machine(tmp_path: Path, url: str) -> None:
    """The token never crosses a network in clear: http:// is refused except to loopback."""
    path = tmp_path / "pool-bridge.toml"
    path.write_text(f'[pool]\nurl = "{url}"\ntoken_file = "/etc/slurm/t"\n')
    assert read_bridge_config(path).url == url
