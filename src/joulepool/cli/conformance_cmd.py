"""`pool conformance run DIR`: a folder of vectors through `pool exec` (CONFORMANCE.md)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _run(args: argparse.Namespace) -> int:
    from joulepool.conformance.runner import iter_failures, load_vectors, run_vectors

    vectors = load_vectors(Path(args.dir))
    if not vectors:
        from joulepool.errors import InvalidInput

        raise InvalidInput(args.dir, "a folder with no vectors (*.json) under it")
    report = run_vectors(vectors, command=args.command, jobs=args.jobs)
    if args.json:
        print(
            json.dumps(
                {
                    "passed": report.passed,
                    "failed": report.failed,
                    "failures": [
                        {"path": str(o.vector.path), "problem": o.problem, "result": o.result}
                        for o in iter_failures(report)
                    ],
                },
                indent=2,
            )
        )
    else:
        for o in iter_failures(report):
            print(f"FAIL {o.vector.path} (§{o.vector.section}, must {o.vector.must}): {o.problem}")
            if args.verbose:
                print(f"     {o.vector.title}")
                print(f"     got {json.dumps(o.result, sort_keys=True)}")
        print(f"{report.passed} passed, {report.failed} failed")
    return 0 if report.failed == 0 else 1


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `pool conformance run`."""
    p = sub.add_parser("conformance", help="run conformance vectors")
    csub = p.add_subparsers(dest="conformance_command", metavar="SUBCOMMAND", required=True)
    run = csub.add_parser(
        "run",
        help="run every vector under DIR and print 'N passed, N failed'",
        description="Run every vector under DIR through pool exec and compare each result "
        "with its expectation. Exits non-zero on any failure.",
    )
    run.add_argument("dir", metavar="DIR", help="folder of vector files (*.json, recursively)")
    run.add_argument(
        "--command",
        metavar="CMD",
        help="run each case through this command's stdin instead of in-process, e.g. "
        "'pool exec' or another implementation's",
    )
    run.add_argument("--jobs", type=int, default=4, help="parallel cases with --command (4)")
    run.add_argument("--json", action="store_true", help="machine-readable report")
    run.add_argument("-v", "--verbose", action="store_true", help="show each failure's result")
    run.set_defaults(handler=_run)
