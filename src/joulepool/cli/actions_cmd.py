"""`pool actions`: the action log, and what the run-time policies (`[runtime]`, `[idle]`,
`[preemption]`) say is due now (DESIGN.md §7; API.md `GET /v1/actions`, `GET /v1/actions/due`).

With DIR it reads `DIR/actions.jsonl` beside the ledger (nothing is locked or written); with
`--url` it asks `pool serve`, and `--due` always does (what is due rests on live readings,
which only the service holds). `--json` prints what the HTTP API answers.
"""

from __future__ import annotations

import argparse
from typing import Any

from joulepool.cli.output import add_json, emit, table


def _actions(args: argparse.Namespace) -> int:
    from joulepool.cli.live_cmd import ask, client_of
    from joulepool.errors import InvalidInput

    client = client_of(args)
    params = {
        "entitlement": args.entitlement,
        "kind": args.kind,
        "rule": args.rule,
        "since_ms": args.since,
        "claim": args.claim,
        "limit": args.limit,
    }
    if args.due:
        if client is None:
            raise InvalidInput("--due", "what is due rests on live readings: ask a service (--url)")
        data = ask(client, "/v1/actions/due")
        emit(args, data, lambda c: _show_due(c, data))
        return 0
    if client is not None:
        data = ask(client, "/v1/actions", params)
    else:
        if args.dir is None:
            raise InvalidInput("DIR", "give a deployment folder, or --url to ask a service")
        data = {"actions": _read(args)}
    emit(args, data, lambda c: _show(c, data["actions"]))
    return 0


def _read(args: argparse.Namespace) -> list[dict[str, Any]]:
    from pathlib import Path

    from joulepool.deployment.actions import open_action_log
    from joulepool.deployment.config import CONFIG, read_config
    from joulepool.errors import InvalidInput

    folder = Path(args.dir)
    tree = read_config(folder / CONFIG).tree
    if args.entitlement is not None and args.entitlement not in tree:
        raise InvalidInput("--entitlement", f"no entitlement {args.entitlement!r}")
    from joulepool.deployment.actions import matching

    roots = [] if args.entitlement is None else [args.entitlement]
    keep = matching(tree, roots, args.kind, args.since, args.claim, args.rule)
    return open_action_log(folder).read(keep, args.limit)


def _evidence(e: dict[str, Any]) -> list[object]:
    return [e.get("energy_uj"), e.get("grade") or e.get("unknown"), e.get("reserved_uj")]


def _show(c: Any, rows: list[dict[str, Any]]) -> None:
    from joulepool.periods import utc_text

    cells = [
        [
            utc_text(r["at_ms"]),
            r["claim"],
            r.get("job"),
            r.get("rule") or "over_reservation",
            r["kind"],
            r["outcome"],
            r.get("reason") or r.get("detail"),
            *_evidence(r.get("evidence") or {}),
        ]
        for r in rows
    ]
    heads = [
        "at",
        "claim",
        "job",
        "rule",
        "kind",
        "outcome",
        "why",
        "energy µJ",
        "grade",
        "reserved µJ",
    ]
    c.print(table("action log, newest first", heads, cells, right=("energy µJ", "reserved µJ")))
    if not rows:
        c.print("no actions recorded")


def _show_due(c: Any, data: dict[str, Any]) -> None:
    policy = data["policy"]
    cells = [
        [
            r["claim"],
            r.get("job"),
            r.get("rule") or "over_reservation",
            r["kind"],
            r["reason"] if r.get("for") is None else f"{r['reason']} ({r['for']})",
            *_evidence(r["evidence"]),
        ]
        for r in data["due"]
    ]
    heads = ["claim", "job", "rule", "due", "why", "energy µJ", "grade", "reserved µJ"]
    title = (
        f"due now (over_reservation = {policy['over_reservation']}, margin "
        f"{policy['margin_pct']} %, notice {policy['notice_s']} s"
    )
    others = data.get("policies") or {}
    idle, preempt = others.get("idle"), others.get("preemption")
    if isinstance(idle, dict):
        title += f"; idle = {idle.get('action')} when {idle.get('when')}"
    if isinstance(preempt, dict):
        title += f"; preemption = {preempt.get('action')} after {preempt.get('after_s')} s"
    title += ")"
    c.print(table(title, heads, cells, right=("energy µJ", "reserved µJ")))
    if not data["due"]:
        c.print("nothing is due")


def _count(text: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 20:
        raise argparse.ArgumentTypeError(f"{text!r} is not a non-negative integer")
    return int(text)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `pool actions`."""
    from joulepool.cli.live_cmd import add_client

    p = sub.add_parser(
        "actions", help="the action log (acts on running jobs, and acts withheld), or what is due"
    )
    p.add_argument("dir", metavar="DIR", nargs="?", help="the deployment (or --url)")
    p.add_argument("--due", action="store_true", help="what policy says is due now (asks --url)")
    p.add_argument("--entitlement", metavar="E", help="only E and its descendants")
    p.add_argument("--kind", help="only this kind (notice, signal, requeue, cancel, ...)")
    p.add_argument(
        "--rule", choices=("over_reservation", "idle", "preemption"), help="only this rule's"
    )
    p.add_argument(
        "--since", type=_count, metavar="MS", help="only records at or after MS (epoch ms)"
    )
    p.add_argument("--claim", metavar="ID", help="only this claim's records")
    p.add_argument(
        "--limit", type=_count, default=100, metavar="N", help="at most N (default: 100)"
    )
    add_client(p)
    add_json(p)
    p.set_defaults(handler=_actions)
