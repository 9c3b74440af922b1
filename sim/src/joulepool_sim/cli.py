"""`pool simulate`: replay cluster traces under pool/1 and three baselines, seeds × budgets.

Writes `evaluation.md` and its PNG figures into `--out`, and prints a per-VC summary (or
the figures as JSON with `--json`). The default data folder is the one shipped inside this
distribution (`joulepool_sim/data/traces`, with its licences), whatever the working folder.

joulepool-sim declares `run` under the `joulepool.commands` entry point, so `pool simulate
...` hands it its arguments; the `joulepool-sim` console script is the same command.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from fractions import Fraction
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


def _seeds(text: str) -> tuple[int, ...]:
    return tuple(_count(part) for part in text.split(","))


def _budgets(text: str) -> tuple[int, ...]:
    return tuple(_positive_energy(part) for part in text.split(","))


def _fraction(text: str) -> Fraction:
    try:
        value = Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(
            f"expected a number such as 2 or 1/2, got {text!r}"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return value


def _simulate(args: argparse.Namespace) -> int:
    from joulepool_sim.errors import SimulationConfigError
    from joulepool_sim.evaluation import POLICY_ORDER, Settings, evaluate
    from joulepool_sim.plots import write_plots
    from joulepool_sim.report import TITLES, evaluation_json, gj, write_report

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise SimulationConfigError(f"--out {out}: exists and is not a folder")
    settings = Settings(
        data_dir=Path(args.data_dir),
        seeds=(0,) if args.trace_dir else args.seeds,
        trace_dir=Path(args.trace_dir) if args.trace_dir else None,
        budgets_uj=args.budgets,
        period=args.period,
        gpu_type=args.gpu_type,
        gpus=args.gpus,
        tdp_w=args.tdp_w,
        first_jobs=args.first_jobs,
        sample=args.sample,
        error_seed=args.error_seed,
        error_median=args.error_median,
        error_sigma=args.error_sigma,
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
        rows = []
        for cell in evaluation.cells:
            for key in POLICY_ORDER:
                s = cell.summaries[key]
                rows.append(
                    [
                        str(cell.seed),
                        gj(cell.budget_uj),
                        TITLES[key],
                        f"{s.completed}/{s.jobs}",
                        gj(s.spent_uj),
                        gj(s.beyond_budget_uj),
                        gj(s.overrun_uj),
                        gj(s.borrowed_on_guess_uj),
                    ]
                )
        c.print(
            table(
                "every policy on the same jobs and budget (energy modelled, releases measured)",
                [
                    "seed",
                    "budget GJ",
                    "policy",
                    "completed",
                    "spent GJ",
                    "beyond budget GJ",
                    "overrun GJ",
                    "borrowed on a guess GJ",
                ],
                rows,
                right=["budget GJ", "spent GJ", "beyond budget GJ", "overrun GJ"],
            )
        )
        ms = evaluation.elapsed_ms
        c.print(f"replayed {len(evaluation.cells)} cells in {ms // 1000}.{ms % 1000 // 100} s")
        c.print(f"wrote {report} and {', '.join(str(f) for f in figures)}")

    emit(args, result, human)
    return 0


def build_parser(prog: str = "pool simulate") -> argparse.ArgumentParser:
    """The parser of `pool simulate`, each option's default in its help (DESIGN.md §5)."""
    from joulepool.cli import DefaultsShown
    from joulepool_sim.evaluation import (
        DEFAULT_BUDGETS_UJ,
        DEFAULT_DATA_DIR,
        DEFAULT_GPUS,
        DEFAULT_SAMPLE,
        DEFAULT_SEEDS,
        DEFAULT_TDP_W,
    )

    p = argparse.ArgumentParser(
        prog=prog,
        description="Replay cluster traces under pool/1 and three baselines; write a report.",
        formatter_class=DefaultsShown,
    )
    p.add_argument(
        "--data-dir",
        default=str(DEFAULT_DATA_DIR),
        metavar="DIR",
        help="the traces folder (default: the traces shipped with joulepool-sim, seeds 0-2)",
    )
    p.add_argument(
        "--seeds",
        type=_seeds,
        default=DEFAULT_SEEDS,
        metavar="N,N,...",
        help="Gavel trace seeds: philly-gavel/seed<N> (default: 0,1,2)",
    )
    p.add_argument(
        "--trace-dir", metavar="DIR", help="a trace folder of <vc>.trace files instead of seeds"
    )
    p.add_argument(
        "--budgets",
        type=_budgets,
        default=DEFAULT_BUDGETS_UJ,
        metavar="E,E,...",
        help="the cluster's energy budget per period, each e.g. 35GJ or µJ (default: 6GJ,9GJ,12GJ)",
    )
    p.add_argument(
        "--period", choices=("week", "month"), default="week", help="budget period (week)"
    )
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
        "--tdp-w",
        type=_positive,
        default=DEFAULT_TDP_W,
        help=f"the GPU's TDP for TDP-modelled jobs, W (default: {DEFAULT_TDP_W})",
    )
    p.add_argument("--error-seed", type=_count, default=0, help="seed of users' estimate errors")
    p.add_argument(
        "--error-median",
        type=_fraction,
        default=Fraction(2),
        help="median of users' estimate / actual (default: 2)",
    )
    p.add_argument(
        "--error-sigma",
        type=_fraction,
        default=Fraction(1),
        help="sigma of ln(estimate / actual) (default: 1)",
    )
    p.add_argument(
        "--sample",
        type=_positive,
        default=DEFAULT_SAMPLE,
        metavar="N",
        help=f"replay every Nth job of each VC (default: {DEFAULT_SAMPLE}; 1 for all)",
    )
    p.add_argument(
        "--first-jobs", type=_positive, metavar="N", help="replay only the first N arrivals"
    )
    p.add_argument("--out", default="docs", metavar="DIR", help="where to write the report (docs)")
    add_json(p)
    return p


def run(argv: Sequence[str]) -> int:
    """`pool simulate ARGS...`: the `joulepool.commands` entry point (DESIGN.md §5).

    A refusal is raised as `PoolError`, for the `pool` command to print as one line.
    """
    return _simulate(build_parser().parse_args(list(argv)))


def main(argv: Sequence[str] | None = None) -> int:
    """The `joulepool-sim` console script: `pool simulate` under its own name (DESIGN.md §5)."""
    from joulepool.cli import main as pool_main

    return pool_main(["simulate", *(sys.argv[1:] if argv is None else argv)])
