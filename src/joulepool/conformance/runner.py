"""Running a folder of language-neutral vectors through `pool exec` (CONFORMANCE.md).

Any implementation's `pool exec` can be checked: by default the cases run through this
one in-process (the same function `pool exec` calls, so the same bytes); `command` runs
each case through an external command's standard input instead.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from joulepool.conformance.execute import exec_bytes
from joulepool.errors import InvalidInput
from joulepool.jsonio import MAX_DEPTH, loads_strict

_VECTOR_KEYS = {"section", "must", "title", "case", "expect"}

_VECTOR_DEPTH = MAX_DEPTH + 2
"""A vector file wraps its case one level down; one more lets a vector carry a case nested
one level too deep, which `pool exec` must refuse."""


@dataclass(frozen=True, slots=True)
class Vector:
    """One conformance vector file: a case and the result it must give."""

    path: Path
    section: str
    must: str
    title: str
    case: dict[str, Any]
    expect: dict[str, Any]


@dataclass(slots=True)
class Outcome:
    """One vector's run: passed, or the result that differed."""

    vector: Vector
    passed: bool
    result: Any
    problem: str = ""


@dataclass(slots=True)
class Report:
    """The outcomes of a run, in file order."""

    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def passed(self) -> int:
        """How many vectors gave their expected result."""
        return sum(1 for o in self.outcomes if o.passed)

    @property
    def failed(self) -> int:
        """How many did not."""
        return len(self.outcomes) - self.passed


def load_vector(path: Path) -> Vector:
    """Read one vector file, refusing one that is not of the CONFORMANCE.md form."""
    try:
        doc = loads_strict(path.read_bytes(), max_depth=_VECTOR_DEPTH)
    except InvalidInput as exc:
        raise InvalidInput(str(path), exc.detail) from None
    if not isinstance(doc, dict) or set(doc) != _VECTOR_KEYS:
        raise InvalidInput(str(path), f"a vector has exactly the keys {sorted(_VECTOR_KEYS)}")
    if not isinstance(doc["case"], dict) or not isinstance(doc["expect"], dict):
        raise InvalidInput(str(path), "case and expect must be objects")
    for name in ("section", "must", "title"):
        if not isinstance(doc[name], str):
            raise InvalidInput(f"{path}.{name}", "must be a string")
    if "detail" in doc["expect"]:
        raise InvalidInput(f"{path}.expect.detail", "detail is free text and never compared")
    return Vector(path, doc["section"], doc["must"], doc["title"], doc["case"], doc["expect"])


def load_vectors(folder: Path) -> list[Vector]:
    """Every `*.json` vector under `folder`, recursively, in path order."""
    if not folder.is_dir():
        raise InvalidInput(str(folder), "not a folder of vectors")
    return [load_vector(p) for p in sorted(folder.rglob("*.json"))]


def compare(expect: dict[str, Any], result: Any) -> str:
    """Why `result` is not `expect` as JSON values, or "" where it is; `detail` is ignored."""
    if not isinstance(result, dict):
        return f"result is not an object: {result!r}"
    got = {k: v for k, v in result.items() if k != "detail"}
    missing = sorted(set(expect) - set(got))
    extra = sorted(set(got) - set(expect))
    if missing:
        return f"missing key(s) {missing}"
    if extra:
        return f"unexpected key(s) {extra}"
    for key in sorted(expect):
        if not _same(expect[key], got[key]):
            return f"{key}: expected {json.dumps(expect[key])}, got {json.dumps(got[key])}"
    return ""


def _same(a: Any, b: Any) -> bool:
    # JSON equality with no bool/int confusion: True must not equal 1.
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _run_external(command: Sequence[str], case: dict[str, Any]) -> Any:
    proc = subprocess.run(
        command, input=json.dumps(case).encode(), capture_output=True, timeout=60, check=False
    )
    if proc.returncode != 0:
        raise InvalidInput(
            "exec", f"exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-500:]}"
        )
    return loads_strict(proc.stdout)


def run_vectors(vectors: Sequence[Vector], command: str | None = None, jobs: int = 4) -> Report:
    """Run each vector's case and compare its result with `expect` (CONFORMANCE.md)."""

    def one(vector: Vector) -> Outcome:
        try:
            if command is None:
                result = loads_strict(exec_bytes(json.dumps(vector.case).encode()))
            else:
                result = _run_external(shlex.split(command), vector.case)
        except (InvalidInput, subprocess.TimeoutExpired, OSError) as exc:
            return Outcome(vector, False, None, f"could not run: {exc}")
        problem = compare(vector.expect, result)
        return Outcome(vector, not problem, result, problem)

    if command is None:
        return Report([one(v) for v in vectors])
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return Report(list(pool.map(one, vectors)))


def iter_failures(report: Report) -> Iterator[Outcome]:
    """The outcomes that failed, in file order."""
    return (o for o in report.outcomes if not o.passed)
