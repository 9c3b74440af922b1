"""`pool slurm install-config`: lay out the bridge's files beside slurm.conf.

    ETC/job_submit.lua        the shipped script, pointed at ETC/pool-bridge.toml
    ETC/pool-bridge.toml      Pool's address, the fail mode, the account mapping
    ETC/pool-bridge.token     the bearer token, mode 0600, owned by SlurmUser
    ETC/pool-epilog.sh        EpilogSlurmctld: runs joulepool.bridges.slurm.epilog

and say which slurm.conf lines to add. Nothing is overwritten unless asked (`force`).
"""

from __future__ import annotations

import importlib.resources
import os
import pwd
import re
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import joulepool
from joulepool.bridges.slurm.config import (
    ACCOUNT,
    SAFE,
    BridgeConfigError,
    read_bridge_config,
)
from joulepool.files import write_atomically

LUA = "job_submit.lua"
CONFIG = "pool-bridge.toml"
TOKEN = "pool-bridge.token"  # noqa: S105 (a file name)
EPILOG = "pool-epilog.sh"


def shipped_lua() -> str:
    """The job_submit.lua shipped with this package."""
    return (importlib.resources.files("joulepool.bridges.slurm") / LUA).read_text(encoding="utf-8")


@dataclass(frozen=True, slots=True)
class Installed:
    """What `install_config` wrote, and the slurm.conf lines it needs."""

    files: dict[str, Path]
    slurm_conf_lines: list[str]
    agent_command: str


def config_text(
    url: str,
    token_file: Path,
    accounts: Mapping[str, str],
    *,
    cluster: str,
    timeout_ms: int,
    fail_open: bool,
) -> str:
    """The text of `pool-bridge.toml` (the TOML subset job_submit.lua reads)."""
    lines = [
        "# joulepool Slurm bridge: read by job_submit.lua (inside slurmctld), the epilog and",
        "# `pool slurm agent`. Check after editing: pool slurm check-config THIS_FILE",
        "[pool]",
        f'url = "{url}"',
        f'token_file = "{token_file}"',
        f"timeout_ms = {timeout_ms}",
        "# hold: a job waits while Pool is unreachable (fail-closed); admit: it runs unaccounted",
        f'on_unreachable = "{"admit" if fail_open else "hold"}"',
        f'cluster = "{cluster}"',
        "",
        "# Slurm account = Pool entitlement. A job of an account not listed is rejected.",
        "[accounts]",
    ]
    lines += [f'{account} = "{ent}"' for account, ent in sorted(accounts.items())]
    return "\n".join(lines) + "\n"


def install_config(
    etc: Path,
    *,
    url: str,
    token: str,
    accounts: Mapping[str, str],
    cluster: str = "slurm",
    timeout_ms: int = 500,
    fail_open: bool = False,
    python: str | None = None,
    slurm_user: str = "slurm",
    slurm_conf: Path | None = None,
    force: bool = False,
) -> Installed:
    """Write the bridge's files into `etc` (see the module docstring)."""
    for account, ent in accounts.items():
        if not ACCOUNT.match(account):
            raise BridgeConfigError(
                f"--map {account}", "an account of letters, digits, _ and - only"
            )
        if not SAFE.match(ent):
            raise BridgeConfigError(
                f"--map {account}={ent}", "an entitlement of letters, digits and _.:@+/- only"
            )
    token = token.strip()
    if not token or any(c.isspace() for c in token):
        raise BridgeConfigError("token", "must be one token (pool token add DIR --scope operator)")
    try:
        owner = pwd.getpwnam(slurm_user)
    except KeyError:
        raise BridgeConfigError("--slurm-user", f"no user {slurm_user!r} on this host") from None
    etc = etc.resolve()
    paths = {name: etc / name for name in (LUA, CONFIG, TOKEN, EPILOG)}
    if not force:
        present = [str(p) for p in paths.values() if p.exists()]
        if present:
            raise BridgeConfigError(
                present[0], "exists; pass --force to replace the bridge's files"
            )
    etc.mkdir(parents=True, exist_ok=True)
    conf = slurm_conf or etc / "slurm.conf"

    token_path = paths[TOKEN]
    fd = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(token + "\n")
    os.chmod(token_path, 0o600)
    if os.geteuid() == 0:
        os.chown(token_path, owner.pw_uid, owner.pw_gid)

    text = config_text(
        url, token_path, accounts, cluster=cluster, timeout_ms=timeout_ms, fail_open=fail_open
    )
    _write(paths[CONFIG], text, 0o644)
    read_bridge_config(paths[CONFIG])

    lua, n = re.subn(
        r'^local CONFIG_PATH = ".*"$',
        f'local CONFIG_PATH = "{paths[CONFIG]}"',
        shipped_lua(),
        count=1,
        flags=re.M,
    )
    assert n == 1, "the shipped job_submit.lua lost its CONFIG_PATH line"
    _write(paths[LUA], lua, 0o644)

    package_root = Path(joulepool.__file__).resolve().parent.parent
    interpreter = python or sys.executable
    epilog = "\n".join(
        [
            "#!/bin/sh",
            "# EpilogSlurmctld of the joulepool bridge (pool slurm install-config).",
            "# slurmctld passes no SLURM_CONF to its scripts; sacct and squeue need it.",
            f"export SLURM_CONF={shlex.quote(str(conf))}",
            f'export PYTHONPATH={shlex.quote(str(package_root))}"${{PYTHONPATH:+:$PYTHONPATH}}"',
            f"exec {shlex.quote(interpreter)} -m joulepool.bridges.slurm.epilog"
            f" --config {shlex.quote(str(paths[CONFIG]))}",
            "",
        ]
    )
    _write(paths[EPILOG], epilog, 0o755)
    return Installed(
        paths,
        ["JobSubmitPlugins=lua", f"EpilogSlurmctld={paths[EPILOG]}"],
        f"SLURM_CONF={conf} pool slurm agent --config {paths[CONFIG]}",
    )


def _write(path: Path, text: str, mode: int) -> None:
    write_atomically(path, text.encode("utf-8"), mode)
