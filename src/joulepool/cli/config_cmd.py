"""`pool config history DIR`: every configuration put in force, verified, and every reload
`pool serve` logged, with what it changed (docs/reliability.md §18)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from joulepool.cli.output import add_json, emit


def _history(args: argparse.Namespace) -> int:
    from joulepool.cli.paths import deployment_dir
    from joulepool.deployment.configs import config_diff, config_history, read_reload_log
    from joulepool.deployment.keys import deployment_keys
    from joulepool.periods import utc_text

    folder = deployment_dir(args.dir)
    _key, keys = deployment_keys(folder, read_only=True)
    history = config_history(folder, keys)
    configurations: list[dict[str, Any]] = []
    previous: dict[str, Any] | None = None
    for applied in history.applied:
        doc = json.loads(applied.text)
        configurations.append({**applied.to_json(), "changes": config_diff(previous, doc)})
        previous = doc
    reloads = read_reload_log(folder)

    def human(c: Any) -> None:
        from joulepool.cli.output import table

        c.print(
            table(
                f"{len(configurations)} configuration(s) put in force in {folder}",
                ["#", "digest", "since", "from entry", "applied by", "changes"],
                [
                    [
                        r["position"],
                        r["digest"][:12],
                        utc_text(r["since_ms"]),
                        r["from_length"],
                        r["applied_by"],
                        changes_words(r["changes"]),
                    ]
                    for r in configurations
                ],
            )
        )
        for r in reloads:
            if "unreadable" in r:
                c.print(f"reload log line {r['unreadable']}: unreadable")
                continue
            words = "taken" if r["ok"] else f"REFUSED: {r['message']}"
            c.print(
                f"reload {utc_text(r['at_ms'])} ({r['trigger']}, {r['who']}): {words}; "
                f"configuration: {changes_words(r['config'])}; "
                f"tokens: {tokens_words(r['tokens'])}"
            )

    emit(args, {"configurations": configurations, "reloads": reloads}, human)
    return 0


def changes_words(diff: dict[str, Any]) -> str:
    """A configuration diff (`deployment.configs.config_diff`) as an operator reads it."""
    if not diff:
        return "unchanged"
    parts = []
    if diff.get("recorded"):
        parts.append("first record")
    if diff.get("entitlements_added") and not diff.get("recorded"):
        parts.append("added " + ", ".join(diff["entitlements_added"]))
    if diff.get("entitlements_removed"):
        parts.append("removed " + ", ".join(diff["entitlements_removed"]))
    for node, fields in diff.get("entitlements_changed", {}).items():
        for name, (old, new) in fields.items():
            parts.append(f"{node}.{name} {old}→{new}")
    if "period" in diff:
        old, new = diff["period"]
        parts.append(f"period {old}→{new}")
    for name, (old, new) in diff.get("policies", {}).items():
        parts.append(f"{name} {old}→{new}")
    return "; ".join(parts)


def tokens_words(diff: dict[str, Any]) -> str:
    """A tokens diff (`deployment.configs.tokens_diff`), by name only."""
    if not diff:
        return "unchanged"
    parts = []
    if diff.get("added"):
        parts.append("added " + ", ".join(diff["added"]))
    if diff.get("removed"):
        parts.append("removed " + ", ".join(diff["removed"]))
    for name, (old, new) in diff.get("scope_changed", {}).items():
        parts.append(f"{name} scope {old}→{new}")
    return "; ".join(parts)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`pool config` (docs/reliability.md §18)."""
    p = sub.add_parser("config", help="the configurations put in force, and the reload log")
    csub = p.add_subparsers(dest="config_command", metavar="SUBCOMMAND", required=True)
    h = csub.add_parser(
        "history",
        help="every configuration put in force (verified statements) and every reload with "
        "what it changed",
    )
    h.add_argument("dir", metavar="DIR", help="the deployment folder")
    add_json(h)
    h.set_defaults(handler=_history)
