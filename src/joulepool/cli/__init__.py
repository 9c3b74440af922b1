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

    found: list[Registrar] = [exec_cmd.register, conformance_cmd.register, _register_simulate]
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
    "joulepool.cli.live_cmd",
    "joulepool.cli.actions_cmd",
    "joulepool.cli.keys_cmd",
    "joulepool.cli.config_cmd",
    "joulepool.cli.ledger_cmd",
    "joulepool.cli.witness_cmd",
    "joulepool.cli.pool_cmd",
    "joulepool.cli.report_cmd",
    "joulepool.cli.completion_cmd",
    "joulepool.cli.demo_cmd",
    "joulepool.cli.serve_cmd",
    "joulepool.cli.meter_cmd",
    "joulepool.cli.proof_cmd",
    "joulepool.bridges.slurm.cli",
)


def _register_simulate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    # Only its line in `pool --help`: `main` hands `pool simulate ...` whole to joulepool-sim,
    # whose own parser reads the arguments, so none of it is imported to build this parser.
    p = sub.add_parser(
        "simulate",
        help="replay cluster traces under pool/1 and three baselines (needs joulepool-sim)",
        add_help=False,
    )
    p.set_defaults(handler=lambda _args: _simulate([]))


def _simulate(argv: Sequence[str]) -> int:
    from joulepool.extras import SIM_INSTALL, plugin_command

    return plugin_command("simulate", "joulepool-sim", SIM_INSTALL)(argv)


EXIT_CODES = """exit codes:
  0 admit, or success        `pool admit` admitted the claim (or the command did its work)
  1 error                    one line on stderr: `pool: <code>: <what was wrong>`
  2 usage                    a flag or argument was refused before anything ran
  3 queue                    `pool admit`: the claim may start later (and `pool estimate`:
                             no estimate earned yet)
  4 deny                     `pool admit`: the claim can never start as it stands
  5 alarm                    `pool proof follow`: the log rolled back or forked
  130 interrupted

Energies are typed with their unit: 4MJ, 2.5kWh, 750J, 123uJ (a bare number is µJ).
The standard and this project's pages: docs/standard/, docs/design.md, docs/api.md."""
"""What `pool --help` says of exit codes; the README repeats it."""


class DefaultsShown(argparse.HelpFormatter):
    """Help that states every default: `(default: X)` where the text has none,
    `(X)` at the end of a help text rewritten to `(default: X)`."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if default in (None, False, [], argparse.SUPPRESS) or action.required:
            return action.help
        if "default" in text:
            return text
        shown = str(default).replace("%", "%%")
        if text.endswith(")") and "(" in text:
            start = text.rindex("(")
            said = text[start + 1 : -1]
            # `(1)` for a default of 1.0 says the same figure: it becomes `(default: 1)`.
            if said == shown or (
                isinstance(default, float) and said.isdigit() and float(said) == default
            ):
                return text[:start] + f"(default: {said})"
        return f"{text} (default: {shown})".lstrip()


def show_defaults(parser: argparse.ArgumentParser) -> None:
    """Make `parser` and every subcommand's help state each option's default (DESIGN.md §5)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                sub.formatter_class = DefaultsShown
                show_defaults(sub)
        elif action.help is None and action.default not in (None, False, [], argparse.SUPPRESS):
            # argparse prints nothing for an option without help, not even its default.
            action.help = "(default: %(default)s)"


def build_parser() -> argparse.ArgumentParser:
    """The whole `pool` argument parser."""
    parser = argparse.ArgumentParser(
        prog="pool",
        description="joulepool: energy-accounted multi-tenant admission (pool/1).",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"joulepool {__version__} (pool/1)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for register in _registrars():
        register(sub)
    show_defaults(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `pool` console script."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    # `pool exec` is the conformance hot path: skip building every other command's parser.
    if args_list[:1] == ["exec"] and len(args_list) == 1:
        from joulepool.cli.exec_cmd import run_exec

        return run_exec()
    if args_list[:1] == ["progress"]:
        # One line in a training loop: no other command's parser, no web stack.
        from joulepool.cli.live_cmd import run_progress

        return run_progress(args_list[1:])
    try:
        if args_list[:1] == ["simulate"]:
            return _simulate(args_list[1:])
        parser = build_parser()
        args = parser.parse_args(args_list)
        handler: Callable[[argparse.Namespace], int] = args.handler
        return handler(args)
    except PoolError as exc:
        from joulepool.cli.output import terminal_safe

        print(f"pool: {exc.code}: {terminal_safe(str(exc))}", file=sys.stderr)
        return 1
    except OSError as exc:
        # A path the checks before did not foresee: still one line naming it.
        from joulepool.cli.output import terminal_safe

        where = exc.filename if exc.filename is not None else "pool"
        reason = exc.strerror or type(exc).__name__
        print(f"pool: path_error: {terminal_safe(str(where))}: {reason}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("pool: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1


if __name__ == "__main__":
    sys.exit(main())
