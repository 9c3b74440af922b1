"""The optional parts of joulepool and what installs each (DESIGN.md §5).

An admission controller on a ledger file needs only `pip install joulepool`: the core
verbs (`pool init/admit/release/usage/claims/ledger/exec`) import nothing else. The HTTP
service, the PostgreSQL store and the Prometheus meters each come with an extra of the
`joulepool` distribution; the trace simulator is a distribution of its own, joulepool-sim,
reached through the `joulepool.commands` entry point it declares. A command that needs an
absent part stops with one line naming what to install, never an ImportError traceback.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import entry_points
from typing import Final

from joulepool.errors import MissingExtra

EXTRAS: Final[Mapping[str, tuple[str, ...]]] = {
    # Only the modules joulepool imports itself: a package they pull in (pydantic,
    # starlette) missing breaks their import, and so is reported by it.
    "serve": ("fastapi", "uvicorn", "prometheus_client"),
    "postgres": ("psycopg",),
    "prometheus": ("httpx", "prometheus_client"),
}
"""Each extra of pyproject.toml that a command checks for, and the modules it brings."""

COMMANDS_GROUP: Final = "joulepool.commands"
"""The entry-point group where another distribution offers a `pool` command."""

SIM_INSTALL: Final = "pip install joulepool-sim (from a joulepool checkout: pip install -e ./sim)"


def require(extra: str, needed_by: str) -> None:
    """Import the modules of `extra`, or raise `MissingExtra` naming it (DESIGN.md §5).

    `needed_by` is what the user asked for, in their words (`pool serve`, `--postgres`).
    """
    for module in EXTRAS[extra]:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise MissingExtra(
                needed_by, f"the [{extra}] extra", f"pip install 'joulepool[{extra}]'", _why(exc)
            ) from None


def plugin_command(name: str, distribution: str, install: str) -> Callable[[Sequence[str]], int]:
    """The runner another distribution declares for `pool NAME`, or `MissingExtra` (DESIGN.md §5).

    The runner takes the arguments after NAME and returns the exit code; it raises
    `PoolError` for a refusal, which the `pool` command prints as one line.
    """
    needed_by, what = f"pool {name}", f"the {distribution} distribution"
    for entry in entry_points(group=COMMANDS_GROUP, name=name):
        try:
            runner: Callable[[Sequence[str]], int] = entry.load()
        except ModuleNotFoundError as exc:
            # Its metadata is here but its package or a dependency is not: an incomplete
            # install. A module missing inside either package is a bug, and is raised.
            top = entry.module.split(".")[0]
            if exc.name is None or (
                exc.name.split(".")[0] in {"joulepool", top} and exc.name != top
            ):
                raise
            raise MissingExtra(needed_by, what, install, _why(exc)) from None
        return runner
    raise MissingExtra(needed_by, what, install, "not installed")


def _why(exc: ImportError) -> str:
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        return f"no module named {exc.name!r}"
    # An installed package that cannot load (psycopg without its libpq): its own first line.
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
