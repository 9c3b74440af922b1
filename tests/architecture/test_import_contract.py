"""The layering of DESIGN.md §5, read from the source: which part may import which.

From the bottom: the standard's pure decisions (the package root's modules but `pool`);
`ledger` (bytes, seal, replay, snapshots); `stores` (where entries live); `pool` (the one
stateful facade); then the shells that wire and present it. Every import counts, a lazy
one inside a function and a type-only one alike: an arrow against the grain is one
whether or not it runs at import time.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "joulepool"

PURE, LEDGER, STORES, POOL = "pure", "ledger", "stores", "pool"

MAY_IMPORT: dict[str, set[str]] = {
    PURE: {PURE},
    LEDGER: {PURE},
    STORES: {PURE, LEDGER},
    POOL: {PURE, LEDGER, STORES},
    "conformance": {PURE, LEDGER},
    "views": {PURE, LEDGER, POOL},
    "deployment": {PURE, LEDGER, STORES, POOL, "transparency"},
    "meters": {PURE},
    "transparency": {PURE, LEDGER},
    "bridges": {PURE, "meters", "views"},
    "service": {
        PURE,
        LEDGER,
        STORES,
        POOL,
        "conformance",
        "deployment",
        "views",
        "meters",
        "transparency",
    },
}
"""For each part, the other parts it may import; a part not listed here (the CLI, the
package's entry points) may import any."""

COMMAND_MODULES = {"joulepool.bridges.slurm.cli": {"cli"}}
"""Modules that present a part as `pool` subcommands and so may use the CLI's output."""

NODE_SIDE = (
    "joulepool.bridges.slurm.epilog",
    "joulepool.bridges.slurm.agent",
    "joulepool.bridges.slurm.jobs",
    "joulepool.bridges.slurm.config",
)
"""What Slurm runs as its own user on every node or beside slurmctld: the standard library
and joulepool's own modules only."""


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def part_of(module: str) -> str:
    """The part of DESIGN.md §5 a module belongs to."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in ("__init__", "__main__"):
        return "entry"
    if parts[1] == "pool":
        return POOL
    if (PACKAGE / parts[1]).is_dir():
        return parts[1]
    return PURE


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """Every joulepool module `path` imports, wherever the import statement stands."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            if name == "joulepool" or name.startswith("joulepool."):
                yield node.lineno, name


def sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_s5_every_import_follows_the_layering() -> None:
    wrong = []
    for path in sources():
        module = module_name(path)
        mine = part_of(module)
        allowed = MAY_IMPORT.get(mine)
        if allowed is None:
            continue
        allowed = allowed | {mine} | COMMAND_MODULES.get(module, set())
        for line, target in imports(path):
            theirs = part_of(target)
            if theirs != "entry" and theirs not in allowed:
                wrong.append(f"{path.relative_to(PACKAGE)}:{line}: {mine} imports {target}")
    assert not wrong, "imports against DESIGN.md §5:\n" + "\n".join(wrong)


def test_s5_the_layering_names_every_part_of_the_package() -> None:
    """A new folder must be placed in the layering, not slip past the check above."""
    parts = {part_of(module_name(p)) for p in sources()}
    unplaced = parts - set(MAY_IMPORT) - {"cli", "entry"}
    assert not unplaced, f"parts not placed in MAY_IMPORT: {sorted(unplaced)}"


def test_s5_no_module_imports_itself_back_at_import_time() -> None:
    """No cycle among the imports that run when a module is imported (those at its top
    level, outside `if TYPE_CHECKING:`)."""
    graph: dict[str, set[str]] = {}
    for path in sources():
        module = module_name(path)
        edges = graph.setdefault(module, set())
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module]
                targets += [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            edges.update(t for t in targets if t.startswith("joulepool."))
    known = set(graph)
    graph = {m: {t for t in ts if t in known and t != m} for m, ts in graph.items()}
    cycles = [c for c in _components(graph) if len(c) > 1]
    assert not cycles, f"import cycles: {cycles}"


def _components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components (Tarjan), iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                out.append(sorted(component))
    return out


@pytest.mark.parametrize("module", NODE_SIDE)
def test_s5_what_slurm_runs_imports_the_standard_library_and_joulepool_only(module: str) -> None:
    code = (
        "import sys\n"
        f"import {module}\n"
        "std = set(sys.stdlib_module_names)\n"
        "print(sorted({n.split('.')[0] for n in sys.modules}"
        " - std - {'joulepool'} - {n for n in sys.modules if n.startswith('_')}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]", f"{module} imports {out.stdout.strip()}"


def test_the_contract_check_catches_an_arrow_against_the_grain(tmp_path: Path) -> None:
    """The checker itself: a ledger module importing a store is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from joulepool.stores.file import FileStore\n")
    found = [(line, t, part_of(t)) for line, t in imports(bad)]
    assert found == [(2, "joulepool.stores.file", STORES)]
    assert STORES not in MAY_IMPORT[LEDGER]
