"""Output for every command: JSON with `--json`, rich tables for people otherwise."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from joulepool.claim_id import printable

if TYPE_CHECKING:
    from rich.console import Console


def console(*, markup: bool = False) -> Console:
    """A console for human output on standard output.

    Markup is off unless asked for: figures, names and reasons are data, and rich would
    read a bracketed word in one (`pip install 'joulepool[nvml]'`) as a style and drop it.
    Text is printed with its unprintable characters escaped (`terminal_safe`).
    """
    from rich.console import Console

    class SafeConsole(Console):
        def print(self, *objects: Any, **kwargs: Any) -> None:
            if not self.is_terminal:
                # Piped output is read by programs and pagers: plain aligned text at its
                # full width, never a box cut at 80 columns.
                objects = tuple(o.plain() if isinstance(o, PlainTable) else o for o in objects)
                kwargs.setdefault("crop", False)
            super().print(
                *(terminal_safe(o) if isinstance(o, str) else o for o in objects), **kwargs
            )

    return SafeConsole(highlight=False, soft_wrap=True, markup=markup)


def terminal_safe(text: str) -> str:
    """`text` with every unprintable character but the newline escaped (API.md, claim ids).

    Ids, classes and names come from tenants and from ledgers this version did not write:
    a terminal must show an escape sequence, NUL or U+202E in one, not obey it.
    """
    if text.isprintable():
        return text
    return "\n".join(printable(line) for line in text.split("\n"))


def print_json(data: Any) -> None:
    """Machine output: one JSON document, keys sorted."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def emit(args: argparse.Namespace, data: Any, human: Callable[[Console], None]) -> None:
    """Print `data` as JSON under `--json`, else call `human` with a console."""
    if getattr(args, "json", False):
        print_json(data)
    else:
        human(console())


class PlainTable:
    """A table's title, headings and cells, kept so that piped output can be plain text."""

    def __init__(self, title: str, columns: Sequence[str], cells: list[list[str]], right: set[str]):
        self.title, self.columns, self.cells, self.right = title, list(columns), cells, right

    def plain(self) -> str:
        """Aligned columns two spaces apart, figures right-aligned; nothing is cut."""
        lines = [self.columns, *self.cells]
        widths = [max(len(line[i]) for line in lines) for i in range(len(self.columns))]
        out = [self.title] if self.title else []
        for line in lines:
            parts = [
                cell.rjust(w) if name in self.right else cell.ljust(w)
                for cell, w, name in zip(line, widths, self.columns, strict=True)
            ]
            out.append("  ".join(parts).rstrip())
        return "\n".join(out)

    def __rich__(self) -> Any:
        from rich.table import Table

        t = Table(title=self.title, title_justify="left")
        for name in self.columns:
            t.add_column(name, justify="right" if name in self.right else "left")
        for row in self.cells:
            t.add_row(*row)
        return t


def table(
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[object]],
    *,
    right: Sequence[str] = (),
) -> Any:
    """A table: rich on a terminal, plain aligned text when piped; columns named in `right`
    are right-aligned (figures)."""
    cells = [["-" if v is None else terminal_safe(str(v)) for v in row] for row in rows]
    return PlainTable(title, columns, cells, set(right))


def add_json(parser: argparse.ArgumentParser) -> None:
    """The `--json` flag every command has."""
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def energy_column(
    name: str, values: Sequence[int | None], units: str = "auto"
) -> tuple[str, list[str]]:
    """A column of µJ figures in one readable unit: its heading, `name (MJ)`, and
    its cells; `--json` carries the exact integers."""
    from joulepool.units import column

    col = column(values, units)
    return f"{name} ({col.label})", [col.show(v) for v in values]


def uj(value: int | None) -> str:
    """Microjoules for people, exactly: joules with the µJ as decimals, or µJ below a joule.

    `--json` carries the integer; this is only its spelling, and it never rounds.
    """
    if value is None:
        return "-"
    if value < 1_000_000:
        return f"{value:,} µJ"
    joules, rest = divmod(value, 1_000_000)
    return f"{joules:,} J" if rest == 0 else f"{joules:,}.{rest:06d} J"
