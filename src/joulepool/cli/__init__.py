"""The `pool` command line: a thin layer over the typed library (DESIGN.md §5).

Every command has human output (rich tables) and machine output (`--json`). Errors the
library raises on purpose are printed as one line naming what went wrong, never as a
traceback. Heavy modules are imported by the command that needs them, so `pool exec`
starts quickly.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from joulepool import __version__
from joulepool.errors import PoolError

Registrar = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]


def _registrars() -> list[Registrar]:
    from joulepool.cli import conformance_cmd, exec_cmd

    found: list[Registrar] = [exec_cmd.register, conformance_cmd.register]
    for module in _OPTIONAL:
        try:
            mod = __import__(module, fromlist=["register"])
        except ModuleNotFoundError as exc:
            # Only a command group that is absent is skipped; one that fails to import
            # because of a bug inside it must fail loudly, not vanish from the help.
            if exc.name != module:
                raise
            continue
        found.append(mod.register)
    return found


# Command groups that live beside the part of the library they drive.
_OPTIONAL = (
    "joulepool.cli.keys_cmd",
    "joulepool.cli.ledger_cmd",
    "joulepool.cli.witness_cmd",
    "joulepool.cli.pool_cmd",
    "joulepool.cli.demo_cmd",
    "joulepool.cli.serve_cmd",
    "joulepool.meters.cli",
    "joulepool.simulate.cli",
    "joulepool.bridges.slurm.cli",
)


def build_parser() -> argparse.ArgumentParser:
    """The whole `pool` argument parser."""
    parser = argparse.ArgumentParser(
        prog="pool",
        description="joulepool: energy-accounted multi-tenant admission (pool/1).",
    )
    parser.add_argument("--version", action="version", version=f"joulepool {__version__} (pool/1)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for register in _registrars():
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `pool` console script."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    # `pool exec` is the conformance hot path: skip building every other command's parser.
    if args_list[:1] == ["exec"] and len(args_list) == 1:
        from joulepool.cli.exec_cmd import run_exec

        return run_exec()
    parser = build_parser()
    args = parser.parse_args(args_list)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except PoolError as exc:
        from joulepool.cli.output import terminal_safe

        print(f"pool: {exc.code}: {terminal_safe(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("pool: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1


if __name__ == "__main__":
    sys.exit(main())
