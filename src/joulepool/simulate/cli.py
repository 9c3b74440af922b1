"""`pool simulate`: replay a cluster trace under pool/1 and under a device-count quota.

Writes `evaluation.md` and its PNG figures into `--out`, and prints a per-VC summary (or
the figures as JSON with `--json`). The default data folder is the one
shipped inside the package (`joulepool/data/traces`, with its licences), whatever the
working folder.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from joulepool.cli.output import add_json, emit, table

if TYPE_CHECKING:
    from rich.console import Console


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    return int(text)


def _positive(text: str) -> int:
    value = _count(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _positive_energy(text: str) -> int:
    from joulepool.cli.pool_cmd import energy_flag

    value = energy_flag(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    return value


def _simulate(args: argparse.Namespace) -> int:
    from joulepool.simulate.errors import SimulationConfigError
    from joulepool.simulate.evaluation import Settings, evaluate
    from joulepool.simulate.plots import write_plots
    from joulepool.simulate.report import evaluation_json, gj, write_report

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise SimulationConfigError(f"--out {out}: exists and is not a folder")
    settings = Settings(
        data_dir=Path(args.data_dir),
        seed=args.seed,
        trace_dir=Path(args.trace_dir) if args.trace_dir else None,
        gpu_type=args.gpu_type,
        gpus=args.gpus,
        budget_uj=args.budget_uj,
        tdp_w=args.tdp_w,
        first_jobs=args.first_jobs,
    )
    quiet = args.json

    def progress(message: str) -> None:
        if not quiet:
            print(message, file=sys.stderr)

    evaluation = evaluate(settings, progress)
    out.mkdir(parents=True, exist_ok=True)
    report = write_report(evaluation, out)
    figures = write_plots(evaluation, out)
    result = evaluation_json(evaluation) | {
        "report": str(report),
        "figures": [str(f) for f in figures],
    }

    def human(c: Console) -> None:
        pool1, quota = evaluation.policy("pool1"), evaluation.policy("devices")
        rows = [
            [
                t.vc,
                gj(t.guarantee_uj),
                gj(t.spent_uj),
                gj(t.borrowed_uj),
                gj(quota.tenant(t.vc).spent_uj),
                f"{t.started}/{t.jobs}",
                f"{quota.tenant(t.vc).started}/{t.jobs}",
                t.guesses_refused_borrowing,
            ]
            for t in pool1.tenants
        ]
        c.print(
            table(
                "pool/1 against a device-count quota (energy modelled: ModelBased / Estimator)",
                [
                    "VC",
                    "guarantee GJ",
                    "pool/1 spent GJ",
                    "borrowed GJ",
                    "quota spent GJ",
                    "pool/1 started",
                    "quota started",
                    "guesses refused borrowing",
                ],
                rows,
                right=["guarantee GJ", "pool/1 spent GJ", "borrowed GJ", "quota spent GJ"],
            )
        )
        ms = evaluation.elapsed_ms
        c.print(
            f"replayed {len(evaluation.jobs):,} jobs twice in {ms // 1000}.{ms % 1000 // 100} s"
        )
        c.print(f"wrote {report} and {', '.join(str(f) for f in figures)}")

    emit(args, result, human)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `pool simulate`."""
    from joulepool.simulate.evaluation import (
        DEFAULT_BUDGET_UJ,
        DEFAULT_DATA_DIR,
        DEFAULT_GPUS,
        DEFAULT_TDP_W,
    )

    p = sub.add_parser(
        "simulate",
        help="replay a cluster trace under pool/1 and a device-count quota; write a report",
    )
    p.add_argument(
        "--data-dir",
        default=str(DEFAULT_DATA_DIR),
        metavar="DIR",
        help="the traces folder (default: the traces shipped with joulepool, seed 0 only)",
    )
    p.add_argument(
        "--seed", type=_count, default=0, help="the Gavel trace seed: philly-gavel/seed<N> (0)"
    )
    p.add_argument("--trace-dir", metavar="DIR", help="a trace folder of <vc>.trace files instead")
    p.add_argument(
        "--gpu-type", default="v100", help="GPU type for Gavel rates and Zeus power (v100)"
    )
    p.add_argument(
        "--gpus",
        type=_positive,
        default=DEFAULT_GPUS,
        help=f"cluster GPUs, split among VCs by size (default: {DEFAULT_GPUS})",
    )
    p.add_argument(
        "--budget",
        "--budget-uj",
        dest="budget_uj",
        type=_positive_energy,
        default=DEFAULT_BUDGET_UJ,
        metavar="ENERGY",
        help="the cluster's energy budget for the window: 500GJ, 2.5kWh, a bare number in µJ "
        "(default: 500GJ)",
    )
    p.add_argument(
        "--tdp-w",
        type=_positive,
        default=DEFAULT_TDP_W,
        help=f"the GPU's TDP for Estimator figures, W (default: {DEFAULT_TDP_W})",
    )
    p.add_argument(
        "--first-jobs", type=_positive, metavar="N", help="replay only the first N arrivals"
    )
    p.add_argument("--out", default="docs", metavar="DIR", help="where to write the report (docs)")
    add_json(p)
    p.set_defaults(handler=_simulate)
