"""`pool slurm ...`: the Slurm bridge's commands (docs/slurm.md)."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from joulepool.cli.output import add_json, emit, table

if TYPE_CHECKING:
    from rich.console import Console

DEFAULT_CONFIG = Path("/etc/slurm/pool-bridge.toml")


def _config_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config", type=Path, default=DEFAULT_CONFIG, help=f"the bridge's file ({DEFAULT_CONFIG})"
    )


def _agent(args: argparse.Namespace) -> int:
    from joulepool.bridges.slurm.agent import Agent
    from joulepool.bridges.slurm.config import read_bridge_config, slurm_env

    agent = Agent.from_config(read_bridge_config(args.config), slurm_env())
    stopping = False

    def stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"pool slurm agent: {args.config}, every {args.interval} s", file=sys.stderr, flush=True)
    if args.once:
        agent.run_pass()
        return 0
    agent.run_forever(args.interval, lambda: stopping)
    return 0


def held_jobs() -> list[dict[str, Any]]:
    """Each job the bridge holds, with Pool's reason (§4.5)."""
    from joulepool.bridges.slurm.config import HELD_STATES, slurm_env
    from joulepool.bridges.slurm.jobs import list_jobs

    out = []
    for job in list_jobs(slurm_env()):
        note = job.note
        if job.state != "PENDING" or note is None or note.state not in HELD_STATES:
            continue
        out.append(
            {
                "job": job.job_id,
                "user": job.user,
                "account": job.account,
                "entitlement": note.entitlement,
                "claim": note.claim,
                "slurm_reason": job.reason,
                "pool_state": note.state,
                "pool_reason": note.reason,
                "renews_ms": note.renews_ms,
                "explanation": _explain(note.state, note.reason, note.renews_ms),
            }
        )
    return out


def _explain(state: str, reason: str | None, renews_ms: int | None = None) -> str:
    from joulepool.admission import DenyReason, QueueReason
    from joulepool.views.explain import reason_text, renewal

    if state == "unreachable":
        return "Pool did not answer at submission; the agent asks again until it does"
    try:
        if state == "queued" and reason is not None:
            text = reason_text(QueueReason(reason))
            if renews_ms is not None:
                # The team's period budget is spent: the agent asks again when it renews.
                text += f"; it {renewal(renews_ms, 'period')}"
            return text
        if state == "denied" and reason is not None:
            return reason_text(DenyReason(reason))
    except ValueError:
        pass
    return reason or state


def _status(args: argparse.Namespace) -> int:
    rows = held_jobs()

    def human(c: Console) -> None:
        if not rows:
            c.print("no job is held by Pool")
            return
        c.print(
            table(
                "jobs held by Pool",
                ["job", "user", "account", "entitlement", "slurm", "pool", "why"],
                [
                    [
                        r["job"],
                        r["user"],
                        r["account"],
                        r["entitlement"],
                        r["slurm_reason"],
                        f"{r['pool_state']} ({r['pool_reason']})",
                        r["explanation"],
                    ]
                    for r in rows
                ],
            )
        )

    emit(args, {"held": rows}, human)
    return 0


def _epilog(args: argparse.Namespace) -> int:
    from joulepool.bridges.slurm.epilog import main

    argv = ["--config", str(args.config)]
    if args.job is not None:
        argv += ["--job", str(args.job)]
    return main(argv)


def _check(args: argparse.Namespace) -> int:
    from joulepool.bridges.slurm.config import read_bridge_config, read_token

    config = read_bridge_config(args.config)
    read_token(config.token_file)
    result = {
        "config": str(config.path),
        "url": config.url,
        "on_unreachable": config.on_unreachable,
        "timeout_ms": config.timeout_ms,
        "accounts": config.accounts,
        "ca_file": None if config.ca_file is None else str(config.ca_file),
        "gpu_energy": config.gpu_energy,
        "gpu_wait_s": config.gpu_wait_s,
        "gpus_per_node": config.gpus_per_node,
        "reconcile_after_s": config.reconcile_after_s,
        "mode": config.mode,
        "cpu_only": config.cpu_only,
        "default_estimate": config.default_power_w,
        "account_estimate": config.account_estimate,
        "partition_estimate": config.partition_estimate,
        "exempt_accounts": sorted(config.exempt_accounts),
        "exempt_partitions": sorted(config.exempt_partitions),
    }
    if not args.online:
        emit(
            args,
            result,
            lambda c: c.print(f"{config.path}: ok, {len(config.accounts)} account(s) mapped"),
        )
        return 0
    from joulepool.bridges.slurm.config import slurm_env
    from joulepool.bridges.slurm.online import check_online

    findings = check_online(config, slurm_env(), args.dcgm_url)
    result["online"] = [f.to_json() for f in findings]
    failed = [f for f in findings if not f.ok]

    def human(c: Console) -> None:
        for f in findings:
            c.print(f"{'ok  ' if f.ok else 'FAIL'} {f.check}: {f.detail}", markup=False)
        c.print(f"{config.path}: {len(failed)} of {len(findings)} online check(s) failed")

    emit(args, result, human)
    return 1 if failed else 0


def _uninstall(args: argparse.Namespace) -> int:
    from joulepool.bridges.slurm.config import slurm_env
    from joulepool.bridges.slurm.uninstall import release_holds

    released = release_holds(slurm_env())
    emit(
        args,
        {"released": released},
        lambda c: c.print(
            f"released {len(released)} job(s) the bridge held"
            + (f": {', '.join(map(str, released))}" if released else "")
        ),
    )
    return 0


def _node_zipapp(args: argparse.Namespace) -> int:
    from joulepool.bridges.slurm.nodeapp import build_node_zipapp

    out = build_node_zipapp(args.out, args.interpreter)
    emit(args, {"zipapp": str(out)}, lambda c: c.print(f"wrote {out}"))
    return 0


def _install(args: argparse.Namespace) -> int:
    from joulepool.bridges.slurm.config import BridgeConfigError
    from joulepool.bridges.slurm.install import install_config

    accounts = {}
    for pair in args.map or []:
        account, sep, ent = pair.partition("=")
        if not sep:
            raise BridgeConfigError(f"--map {pair}", "must be ACCOUNT=ENTITLEMENT")
        accounts[account] = ent
    if args.token_from == "-":  # noqa: S105 (stdin, not a password)
        token = sys.stdin.readline()
    else:
        try:
            token = Path(args.token_from).read_text(encoding="utf-8")
        except OSError as exc:
            raise BridgeConfigError(
                f"--token-from {args.token_from}", exc.strerror or "unreadable"
            ) from None
        except UnicodeDecodeError:
            raise BridgeConfigError(
                f"--token-from {args.token_from}", "not a token: not UTF-8 text"
            ) from None
    done = install_config(
        Path(args.etc),
        url=args.url,
        token=token,
        accounts=accounts,
        cluster=args.cluster,
        timeout_ms=args.timeout_ms,
        fail_open=args.fail_open,
        python=args.python,
        slurm_user=args.slurm_user,
        slurm_conf=args.slurm_conf,
        force=args.force,
        gpu=args.gpu,
        dcgm_url=args.dcgm_url,
        ca_file=args.ca_file,
        job_submit=not args.no_job_submit,
        node_python=args.node_python,
    )
    result = {
        "files": {k: str(v) for k, v in done.files.items()},
        "slurm_conf_lines": done.slurm_conf_lines,
        "agent": done.agent_command,
    }

    def human(c: Console) -> None:
        for path in done.files.values():
            c.print(f"wrote {path}")
        c.print("add to slurm.conf, then `scontrol reconfigure`:")
        for line in done.slurm_conf_lines:
            c.print(f"  {line}")
        c.print(f"run the agent as root: {done.agent_command}")

    emit(args, result, human)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `pool slurm` and its subcommands."""
    s = sub.add_parser("slurm", help="the Slurm bridge: admission at sbatch, energy at job end")
    ssub = s.add_subparsers(dest="slurm_command", metavar="SUBCOMMAND", required=True)

    a = ssub.add_parser("agent", help="release Pool's holds when Pool admits held jobs")
    _config_arg(a)
    a.add_argument("--interval", type=float, default=1.0, help="seconds between passes (1)")
    a.add_argument("--once", action="store_true", help="one pass, then exit")
    a.set_defaults(handler=_agent)

    st = ssub.add_parser("status", help="each job Pool holds, with Pool's reason")
    add_json(st)
    st.set_defaults(handler=_status)

    e = ssub.add_parser("epilog", help="report a finished job's energy (EpilogSlurmctld)")
    _config_arg(e)
    e.add_argument("--job", type=int, help="job id (default: $SLURM_JOB_ID)")
    e.set_defaults(handler=_epilog)

    c = ssub.add_parser("check-config", help="validate the bridge's file and token")
    _config_arg(c)
    c.add_argument(
        "--online",
        action="store_true",
        help="also ask Pool (token scope, entitlements) and Slurm (energy accounting)",
    )
    c.add_argument(
        "--dcgm-url",
        metavar="URL",
        help="with --online: each node's DCGM exporter, {node} for its name",
    )
    add_json(c)
    c.set_defaults(handler=_check)

    u = ssub.add_parser(
        "uninstall", help="release every job the bridge holds (after unhooking it from Slurm)"
    )
    add_json(u)
    u.set_defaults(handler=_uninstall)

    z = ssub.add_parser(
        "build-node-zipapp",
        help="the node side (Prolog/Epilog, EpilogSlurmctld) as one file, standard library only",
    )
    z.add_argument("out", metavar="OUT", type=Path, help="the zipapp to write, e.g. pool-node.pyz")
    z.add_argument(
        "--interpreter",
        default="/usr/bin/python3 -I",
        help="its #! line, when run directly (/usr/bin/python3 -I)",
    )
    add_json(z)
    z.set_defaults(handler=_node_zipapp)

    i = ssub.add_parser("install-config", help="write job_submit.lua, the config, token and epilog")
    i.add_argument("etc", metavar="ETC", help="the folder of slurm.conf, e.g. /etc/slurm")
    i.add_argument("--url", required=True, help="pool serve's address, http(s)://host:port")
    i.add_argument("--ca-file", type=Path, help="CAs vouching for pool serve's certificate (https)")
    i.add_argument(
        "--token-from", required=True, metavar="FILE", help="a file holding an operator token, or -"
    )
    i.add_argument("--map", action="append", metavar="ACCOUNT=ENTITLEMENT", help="repeatable")
    i.add_argument("--cluster", default="slurm", help="part of every claim id (ClusterName)")
    i.add_argument("--timeout-ms", type=int, default=500, help="Pool's deadline at submission")
    i.add_argument("--fail-open", action="store_true", help="run jobs unaccounted if Pool is down")
    i.add_argument("--python", help="interpreter SlurmUser runs the epilog with (this one)")
    i.add_argument("--slurm-user", default="slurm", help="owner of the token file (SlurmUser)")
    i.add_argument("--slurm-conf", type=Path, help="slurm.conf path (ETC/slurm.conf)")
    i.add_argument("--force", action="store_true", help="replace the bridge's files")
    i.add_argument(
        "--gpu", action="store_true", help="also slurmd's Prolog/Epilog charging GPU energy"
    )
    i.add_argument("--dcgm-url", help="the nodes' DCGM exporter, where NVML cannot be read")
    i.add_argument(
        "--node-python",
        help="the nodes' Python 3.11+ for the GPU Prolog/Epilog, e.g. /usr/bin/python3 (this one)",
    )
    i.add_argument(
        "--no-job-submit",
        action="store_true",
        help="write pool_bridge.lua but not job_submit.lua: the site's own calls the module",
    )
    add_json(i)
    i.set_defaults(handler=_install)
