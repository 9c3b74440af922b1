"""`pool meter list` and `pool meter read`: the host's meters, and readings from one (§2.3, §2.7).

A thin layer over `joulepool.meters`: human output as rich tables, machine output with
`--json`. A meter that cannot be read is raised as `MeterUnavailable`, which `pool` prints
with its reason and exits non-zero on; it is never shown as a reading of 0.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from decimal import Decimal, InvalidOperation

from joulepool.cli.output import console
from joulepool.errors import InvalidInput

_DEFAULT_ROOT = "/sys/class/powercap"


def _seconds_to_us(text: str, field: str) -> int:
    """Decimal seconds as whole µs, exactly: `0.5` is 500000; no float decides."""
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise InvalidInput(field, f"{text!r} is not a number of seconds") from None
    if not value.is_finite() or value < 0:
        raise InvalidInput(field, f"{text!r} is not a non-negative number of seconds")
    micro = value * 1_000_000
    if micro != micro.to_integral_value():
        raise InvalidInput(field, f"{text!r} is finer than a microsecond")
    return int(micro)


def format_uw(uw: int | None) -> str:
    """Microwatts as watts by integer arithmetic, `12.500000 W`; `-` for no rate (§2.7)."""
    if uw is None:
        return "-"
    return f"{uw // 1_000_000}.{uw % 1_000_000:06d} W"


def _check_timeout(timeout_ms: int) -> None:
    if timeout_ms < 1:
        raise InvalidInput("--timeout-ms", "must be at least 1")


def _list(args: argparse.Namespace) -> int:
    from joulepool.meters.discovery import discover
    from joulepool.meters.grades import grade_table_markdown

    if args.grades:
        print(grade_table_markdown(), end="")
        return 0
    _check_timeout(args.timeout_ms)
    statuses = discover(
        args.powercap_root, args.prometheus, nvml=not args.no_nvml, timeout_ms=args.timeout_ms
    )
    if args.json:
        print(json.dumps({"meters": [s.to_json() for s in statuses]}, indent=2))
        return 0
    from rich.table import Table

    table = Table(title="meters on this host")
    for column in ("name", "kind", "grade", "resolution", "status"):
        table.add_column(column)
    for s in statuses:
        status = (
            "available" if s.available else f"unavailable: {s.reason.value if s.reason else '?'}"
        )
        table.add_row(
            s.name,
            s.kind.value if s.kind else "-",
            s.grade.value if s.grade else "-",
            f"{s.resolution_uj} µJ" if s.resolution_uj is not None else "-",
            f"{status}\n{s.detail}" if s.detail else status,
        )
    console().print(table)
    return 0


def _read(args: argparse.Namespace) -> int:
    from joulepool.idle import mean_uw
    from joulepool.meters.discovery import resolve
    from joulepool.meters.reading import energy_between

    interval_us = _seconds_to_us(args.interval, "--interval")
    if args.count < 1:
        raise InvalidInput("--count", "must be at least 1")
    _check_timeout(args.timeout_ms)
    meter = resolve(args.name, args.powercap_root, args.prometheus, args.timeout_ms)
    readings = []
    for i in range(args.count):
        if i:
            time.sleep(interval_us / 1_000_000)
        readings.append(meter.read())
    steps = []
    for a, b in itertools.pairwise(readings):
        energy = energy_between(a, b)
        span = b.read_at_us - a.read_at_us
        steps.append((a, b, energy, mean_uw(energy.uj, span)))
    if args.json:
        out = {
            "meter": meter.name,
            "kind": meter.kind.value,
            "grade": meter.grade.value,
            "readings": [r.to_json() for r in readings],
            "intervals": [
                {
                    "from_us": a.read_at_us,
                    "to_us": b.read_at_us,
                    "span_us": b.read_at_us - a.read_at_us,
                    "uj": energy.uj,
                    "grade": energy.grade.value,
                    "mean_uw": mean,
                }
                for a, b, energy, mean in steps
            ],
        }
        print(json.dumps(out, indent=2))
        return 0
    from rich.table import Table

    screen = console()
    table = Table(title=f"{meter.name} ({meter.kind.value}, {meter.grade.value})")
    for column in ("read at µs", "counter µJ", "resolution", "energy since last", "mean power"):
        table.add_column(column, justify="right")
    table.add_row(
        str(readings[0].read_at_us),
        str(readings[0].counter_uj),
        f"{readings[0].resolution_uj} µJ",
        "-",
        "-",
    )
    for a, b, energy, mean in steps:
        table.add_row(
            str(b.read_at_us),
            str(b.counter_uj),
            f"{b.resolution_uj} µJ",
            f"{energy.uj} µJ over {b.read_at_us - a.read_at_us} µs ({energy.grade.value})",
            format_uw(mean),
        )
    screen.print(table)
    return 0


def _sources(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--powercap-root",
        default=_DEFAULT_ROOT,
        metavar="DIR",
        help=f"where the RAPL zones are ({_DEFAULT_ROOT})",
    )
    p.add_argument(
        "--prometheus",
        action="append",
        default=[],
        metavar="URL",
        help="a DCGM exporter or Kepler /metrics endpoint to scrape (repeatable)",
    )
    p.add_argument(
        "--timeout-ms", type=int, default=5000, metavar="MS", help="scrape timeout (5000)"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `pool meter list` and `pool meter read` (§2.3, §2.7)."""
    p = sub.add_parser("meter", help="graded energy meters on this host")
    msub = p.add_subparsers(dest="meter_command", metavar="SUBCOMMAND", required=True)

    ls = msub.add_parser(
        "list",
        help="the meters this host has, with grade and resolution, and why any is missing",
        description="Probe RAPL (powercap), NVML and any Prometheus endpoints named, reading each "
        "meter once. A meter that gives no figure is listed with its reason.",
    )
    _sources(ls)
    ls.add_argument("--no-nvml", action="store_true", help="do not probe NVML")
    ls.add_argument(
        "--grades", action="store_true", help="print the grade table (Markdown) and exit"
    )
    ls.set_defaults(handler=_list)

    rd = msub.add_parser(
        "read",
        help="readings of one meter and the power between them",
        description="Read meter NAME (as `pool meter list` names it) COUNT times, INTERVAL seconds "
        "apart, and show the energy and mean power between consecutive readings. Exits "
        "non-zero with the reason where the meter cannot be read.",
    )
    rd.add_argument("name", metavar="NAME", help="e.g. rapl:intel-rapl:0, nvml:0, dcgm:GPU-…")
    rd.add_argument("--interval", default="1", metavar="S", help="seconds between readings (1)")
    rd.add_argument("--count", type=int, default=2, metavar="N", help="number of readings (2)")
    _sources(rd)
    rd.set_defaults(handler=_read)
