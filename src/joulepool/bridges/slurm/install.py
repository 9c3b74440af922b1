"""`pool slurm install-config`: lay out the bridge's files beside slurm.conf.

    ETC/pool_bridge.lua       the bridge as a Lua module, pointed at ETC/pool-bridge.toml
    ETC/job_submit.lua        the shipped one-liner over it (not with `job_submit=False`: a
                              site's own job_submit.lua calls the module instead)
    ETC/pool-bridge.toml      Pool's address, the fail mode, the account mapping
    ETC/pool-bridge.token     the bearer token, mode 0600, owned by SlurmUser
    ETC/pool-node.pyz         the node side as a zipapp, standard library only (nodeapp.py)
    ETC/pool-epilog.sh        EpilogSlurmctld: `python3 -I pool-node.pyz ctld-epilog`
    ETC/pool-gpu-prolog.sh    with `gpu`: slurmd's Prolog and Epilog on every GPU node,
    ETC/pool-gpu-epilog.sh    reading the job's GPUs (`pool-node.pyz prolog|epilog`)

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

from joulepool.bridges.slurm.config import (
    ACCOUNT,
    SAFE,
    BridgeConfigError,
    read_bridge_config,
)
from joulepool.bridges.slurm.nodeapp import build_node_zipapp
from joulepool.files import write_atomically

LUA = "job_submit.lua"
MODULE = "pool_bridge.lua"
CONFIG = "pool-bridge.toml"
TOKEN = "pool-bridge.token"  # noqa: S105 (a file name)
EPILOG = "pool-epilog.sh"
GPU_PROLOG = "pool-gpu-prolog.sh"
GPU_EPILOG = "pool-gpu-epilog.sh"
NODE_APP = "pool-node.pyz"
GPU_STATE_DIR = Path("/var/spool/pool-gpu")


def shipped_lua() -> str:
    """The job_submit.lua shipped with this package: one call into `shipped_module()`."""
    return (importlib.resources.files("joulepool.bridges.slurm") / LUA).read_text(encoding="utf-8")


def shipped_module() -> str:
    """pool_bridge.lua, the bridge's job_submit logic as a Lua module (pool/1 §4)."""
    return (importlib.resources.files("joulepool.bridges.slurm") / MODULE).read_text(
        encoding="utf-8"
    )


def chained_lua(etc: Path) -> str:
    """The shipped job_submit.lua, finding pool_bridge.lua in `etc` (docs/slurm.md, Chaining)."""
    if re.search(r'[";?\\\s]', str(etc)):
        raise BridgeConfigError(
            str(etc), "a folder for Lua's package.path: no quote, ';', '?', '\\' or space"
        )
    lua, n = re.subn(
        r'^package\.path = ".*" \.\. package\.path$',
        f'package.path = "{etc}/?.lua;" .. package.path',
        shipped_lua(),
        count=1,
        flags=re.M,
    )
    assert n == 1, "the shipped job_submit.lua lost its package.path line"
    return lua


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
    gpu_energy: bool = False,
    ca_file: Path | None = None,
) -> str:
    """The text of `pool-bridge.toml` (the TOML subset job_submit.lua reads)."""
    lines = [
        "# joulepool Slurm bridge: read by job_submit.lua (inside slurmctld), the epilog and",
        "# `pool slurm agent`. Check after editing: pool slurm check-config THIS_FILE",
        "[pool]",
        f'url = "{url}"',
        *([f'ca_file = "{ca_file}"'] if ca_file is not None else []),
        f'token_file = "{token_file}"',
        f"timeout_ms = {timeout_ms}",
        "# hold: a job waits while Pool is unreachable (fail-closed); admit: it runs unaccounted",
        f'on_unreachable = "{"admit" if fail_open else "hold"}"',
        f'cluster = "{cluster}"',
        "# true: every GPU node runs pool-gpu-prolog.sh/-epilog.sh, and a job's GPU energy is",
        "# added to RAPL's; false: a job that held GPUs is charged its reservation (Estimator)",
        f"gpu_energy = {'true' if gpu_energy else 'false'}",
        "# the agent releases a claim whose job ended unreported this many seconds ago",
        "reconcile_after_s = 60",
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
    gpu: bool = False,
    dcgm_url: str | None = None,
    gpu_state_dir: Path = GPU_STATE_DIR,
    node_python: str | None = None,
    ca_file: Path | None = None,
    job_submit: bool = True,
) -> Installed:
    """Write the bridge's files into `etc` (see the module docstring).

    With `gpu`, also the node-side Prolog and Epilog (`gpu.py`), run by slurmd as root with
    `node_python` (any Python 3.11+ on the nodes: the zipapp needs only the standard
    library; this one by default), reading NVML, else the DCGM exporter at `dcgm_url`.
    Implements the bridge's side of §2.3 (figures and grades) and §6.2 (release).
    """
    if dcgm_url is not None and not re.fullmatch(r"https?://[^\s'\"]+", dcgm_url):
        raise BridgeConfigError("--dcgm-url", "must be an http:// or https:// URL")
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
    lua = chained_lua(etc)
    ca_file = None if ca_file is None else ca_file.resolve()
    names = (
        ((LUA,) if job_submit else ())
        + (MODULE, CONFIG, TOKEN, NODE_APP, EPILOG)
        + ((GPU_PROLOG, GPU_EPILOG) if gpu else ())
    )
    paths = {name: etc / name for name in names}
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
        url,
        token_path,
        accounts,
        cluster=cluster,
        timeout_ms=timeout_ms,
        fail_open=fail_open,
        gpu_energy=gpu,
        ca_file=ca_file,
    )
    if gpu:
        # The agent samples running jobs from the same exporter and the Prolog's start
        # readings (`sampling.py`; a dcgm_url here names one exporter for every node).
        sampling = f'gpu_state_dir = "{gpu_state_dir}"\n'
        if dcgm_url is not None:
            sampling += f'dcgm_url = "{dcgm_url}"\n'
        text = text.replace("[pool]\n", "[pool]\n" + sampling, 1)
    _write(paths[CONFIG], text, 0o644)
    read_bridge_config(paths[CONFIG])

    module, n = re.subn(
        r'^local CONFIG_PATH = ".*"$',
        f'local CONFIG_PATH = "{paths[CONFIG]}"',
        shipped_module(),
        count=1,
        flags=re.M,
    )
    assert n == 1, "the shipped pool_bridge.lua lost its CONFIG_PATH line"
    _write(paths[MODULE], module, 0o644)
    if job_submit:
        _write(paths[LUA], lua, 0o644)

    # The scripts run the zipapp with -I: no PYTHONPATH, no user site, nothing of a
    # source checkout or a virtual environment; the standard library is enough.
    build_node_zipapp(paths[NODE_APP])
    app = shlex.quote(str(paths[NODE_APP]))
    interpreter = python or sys.executable
    epilog = "\n".join(
        [
            "#!/bin/sh",
            "# EpilogSlurmctld of the joulepool bridge (pool slurm install-config).",
            "# slurmctld passes no SLURM_CONF to its scripts; sacct and squeue need it.",
            f"export SLURM_CONF={shlex.quote(str(conf))}",
            f"exec {shlex.quote(interpreter)} -I {app} ctld-epilog"
            f" --config {shlex.quote(str(paths[CONFIG]))}",
            "",
        ]
    )
    _write(paths[EPILOG], epilog, 0o755)
    conf_lines = ["JobSubmitPlugins=lua", f"EpilogSlurmctld={paths[EPILOG]}"]
    if gpu:
        for phase, name in (("prolog", GPU_PROLOG), ("epilog", GPU_EPILOG)):
            argv = [node_python or sys.executable, "-I", str(paths[NODE_APP]), phase]
            argv += ["--state-dir", str(gpu_state_dir)]
            if dcgm_url is not None:
                argv += ["--dcgm-url", dcgm_url]
            script = "\n".join(
                [
                    "#!/bin/sh",
                    f"# slurmd's {phase.title()} of the joulepool bridge: the job's GPU energy.",
                    f"export SLURM_CONF={shlex.quote(str(conf))}",
                    "exec " + " ".join(shlex.quote(a) for a in argv),
                    "",
                ]
            )
            _write(paths[name], script, 0o755)
        conf_lines += [
            f"Prolog={paths[GPU_PROLOG]}",
            f"Epilog={paths[GPU_EPILOG]}",
            # Alloc: the Prolog reads the GPUs at allocation; Contain: an .extern step on
            # every node, whose energy is a multi-node job's RAPL figure.
            "PrologFlags=Alloc,Contain",
            # sacct's AllocTRES lists a job's GPUs only where GPUs are accounted.
            "AccountingStorageTRES=gres/gpu",
        ]
    return Installed(
        paths,
        conf_lines,
        f"SLURM_CONF={conf} pool slurm agent --config {paths[CONFIG]}",
    )


def _write(path: Path, text: str, mode: int) -> None:
    write_atomically(path, text.encode("utf-8"), mode)
