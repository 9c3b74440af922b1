"""`pool exec`: one conformance case on standard input, its result on standard output."""

from __future__ import annotations

import argparse
import sys


def run_exec() -> int:
    """Read one case, write one result, exit 0 for every case (CONFORMANCE.md)."""
    from joulepool.conformance.execute import exec_bytes

    data = sys.stdin.buffer.read()
    out = exec_bytes(data)
    sys.stdout.buffer.write(out)
    sys.stdout.buffer.flush()
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `pool exec`."""
    p = sub.add_parser(
        "exec",
        help="run one conformance case (JSON on stdin) and print its result",
        description="Read one pool/1 conformance case as JSON on standard input and write "
        "its result as JSON on standard output (CONFORMANCE.md). Exit status 0 for every case.",
    )
    p.set_defaults(handler=lambda _args: run_exec())
