"""`pool slurm install-config` for a site with its own job_submit.lua (`--no-job-submit`),
the shipped one-liner pointed at the module's folder, and `build-node-zipapp`'s refusals:
without Slurm, through the command line, typed errors and never a traceback."""

from __future__ import annotations

import subprocess
from pathlib import Path

from joulepool.bridges.slurm.install import shipped_module
from tests.support.servers import pool_cli


def pool(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return pool_cli(*args, stdin=stdin, timeout_s=120)


def install(etc: Path, user: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return pool(
        *("slurm", "install-config", str(etc), "--url", "https://pool.example:7460"),
        *("--token-from", "-", "--map", "phys=vision", "--slurm-user", user, *extra),
        stdin="tok-123\n",
    )


def test_shipped_job_submit_calls_the_module_in_the_installed_folder(
    tmp_path: Path, slurm_user: str
) -> None:
    etc = tmp_path / "etc"
    done = install(etc, slurm_user)
    assert done.returncode == 0, done.stderr
    lua = (etc / "job_submit.lua").read_text()
    assert f'package.path = "{etc}/?.lua;" .. package.path' in lua
    assert "return pool_bridge.job_submit(job_desc, part_list, submit_uid)" in lua
    module = (etc / "pool_bridge.lua").read_text()
    assert f'local CONFIG_PATH = "{etc}/pool-bridge.toml"' in module
    assert module.rstrip().endswith("return M")
    assert "function M.job_submit(job_desc, part_list, submit_uid)" in shipped_module()


def test_a_site_with_its_own_job_submit_gets_the_module_alone(
    tmp_path: Path, slurm_user: str
) -> None:
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "job_submit.lua").write_text("-- the site's own\n")
    done = install(etc, slurm_user, "--no-job-submit")
    assert done.returncode == 0, done.stderr
    assert (etc / "job_submit.lua").read_text() == "-- the site's own\n"
    assert (etc / "pool_bridge.lua").exists()


def test_a_folder_lua_cannot_search_is_refused_naming_it(tmp_path: Path, slurm_user: str) -> None:
    etc = tmp_path / "et;c"
    done = install(etc, slurm_user)
    assert done.returncode != 0
    assert "package.path" in done.stderr and "Traceback" not in done.stderr
    assert not etc.exists() or not (etc / "pool-bridge.token").exists()


def test_node_zipapp_refuses_an_interpreter_that_is_not_a_path(tmp_path: Path) -> None:
    done = pool("slurm", "build-node-zipapp", str(tmp_path / "n.pyz"), "--interpreter", "python3")
    assert done.returncode != 0
    assert "--interpreter" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "n.pyz").exists()
