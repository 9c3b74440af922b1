"""`pool report DIR --start --end --by entitlement|class [--csv]`: energy charged over a range,
as `sreport` reports one (`joulepool.views.report`; docs/operations.md "Reports")."""

from __future__ import annotations

import argparse
import csv
import sys
from datetime import UTC, date, datetime
from typing import Any

from joulepool.cli.output import add_json, emit, table
from joulepool.cli.pool_cmd import add_units, read_source


def instant_ms(text: str, where: str) -> int:
    """`2026-11-01` (00:00 UTC) or `2026-11-01T12:00Z` / `...+01:00`, as ms since the epoch
    (docs/operations.md "Reports"). A date and time without its offset is refused: which
    zone it meant is unknown, and unknown is not a value."""
    from joulepool.errors import InvalidInput

    words = f"{text!r}: a date (2026-11-01, 00:00 UTC) or a date and time with its offset (2026-11-01T12:00Z)"
    try:
        if "T" not in text and " " not in text.strip():
            day = date.fromisoformat(text)
            return int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()) * 1000
        when = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(where, words) from None
    if when.tzinfo is None:
        raise InvalidInput(where, f"{words}; it has no offset")
    if when.timestamp() < 0:
        raise InvalidInput(where, f"{text!r} is before 1970")
    return int(when.timestamp() * 1000)


def _report(args: argparse.Namespace) -> int:
    from joulepool.cli.paths import deployment_dir
    from joulepool.deployment.open import open_pool
    from joulepool.errors import InvalidInput
    from joulepool.periods import utc_text
    from joulepool.units import column
    from joulepool.views.report import SUMS, report

    start = instant_ms(args.start, "--start")
    pool = open_pool(deployment_dir(args.dir), read_only=True)
    try:
        end = pool.now_ms() if args.end is None else instant_ms(args.end, "--end")
        if end <= start:
            raise InvalidInput("--end", f"{utc_text(end)} is not after --start {utc_text(start)}")
        out = report(pool, start, end, args.by)
        out["read"] = read_source(pool)
    finally:
        pool.close()
    key = args.by
    if args.csv:
        # Exact µJ, one row a group, for a spreadsheet: the human table rounds, this never does.
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow([key, *SUMS])
        for row in out["rows"]:
            writer.writerow(["" if row[key] is None else row[key], *(row[k] for k in SUMS)])
        writer.writerow(["total", *(out["total"][k] for k in SUMS)])
        return 0

    def human(c: Any) -> None:
        energies = [k for k in SUMS if k.endswith("_uj")]
        shown = [r.get("subtree", r) for r in out["rows"]]
        one = column([r[k] for r in [*shown, out["total"]] for k in energies], args.units)
        names = [f"{k.removesuffix('_uj')} ({one.label})" for k in energies]
        body = []
        for row, figures in zip(out["rows"], shown, strict=True):
            name = row[key]
            label = "(no class)" if name is None else str(name) + (" Σ" if "subtree" in row else "")
            body.append([label, figures["claims"], *(one.show(figures[k]) for k in energies)])
        body.append(
            ["total", out["total"]["claims"], *(one.show(out["total"][k]) for k in energies)]
        )
        c.print(
            table(
                f"energy charged by {key}, claims released from {utc_text(start)} "
                f"to {utc_text(end)} (end excluded)",
                [key, "claims", *names],
                body,
                right=["claims", *names],
            )
        )
        c.print(
            "by release time: a claim counts where its Released entry is dated; "
            "measured = HwShunt or ModelBased, estimated = Estimator"
        )
        if any("subtree" in r for r in out["rows"]):
            c.print("Σ: an interior node's figures are its whole subtree's (--json: `subtree`)")

    emit(args, out, human)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `pool report`."""
    p = sub.add_parser(
        "report", help="energy charged over a range, by entitlement or class (sreport's job)"
    )
    p.add_argument("dir", metavar="DIR")
    p.add_argument(
        "--start",
        required=True,
        metavar="WHEN",
        help="first instant, included: 2026-11-01 (00:00 UTC) or 2026-11-01T12:00Z",
    )
    p.add_argument(
        "--end", metavar="WHEN", help="last instant, excluded, as --start (default: now)"
    )
    p.add_argument("--by", choices=("entitlement", "class"), default="entitlement")
    p.add_argument("--csv", action="store_true", help="comma-separated, exact µJ, with a total row")
    add_units(p)
    add_json(p)
    p.set_defaults(handler=_report)
