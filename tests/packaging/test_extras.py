"""The core and its extras (DESIGN.md §5): the core verbs import neither the web stack,
PostgreSQL, Prometheus nor plotting, and still run when those packages are not there; a
command that needs an absent extra says in one line what to install, never a traceback.

Each command runs in its own interpreter. "Not there" is made real with a `sitecustomize`
on PYTHONPATH that answers every import of the hidden packages as an interpreter without
them would (ModuleNotFoundError): the code under test runs unchanged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VECTOR = REPO / "conformance" / "vectors" / "01-2.1-both-guarantees-met-exactly-admits.json"

HIDING_SITE = """
import importlib.abc
import os
import sys


class Hidden(importlib.abc.MetaPathFinder):
    def __init__(self, names):
        self.names = names

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


sys.meta_path.insert(0, Hidden(frozenset(os.environ["HIDE_MODULES"].split(","))))
"""

# `pool VERB ...`, then the modules it left imported, written where MODULES_OUT says.
RUNNER = """
import json, os, sys
from joulepool.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
with open(os.environ["MODULES_OUT"], "w") as f:
    json.dump(sorted(sys.modules), f)
sys.exit(code)
"""

SERVE = ("fastapi", "starlette", "pydantic", "pydantic_core", "uvicorn", "uvloop", "httptools")
POSTGRES = ("psycopg", "psycopg_binary")
PROMETHEUS = ("httpx", "prometheus_client")
SIM = ("joulepool_sim", "matplotlib", "numpy")
OPTIONAL = SERVE + POSTGRES + PROMETHEUS + SIM
"""Every package an extra (or joulepool-sim) brings that joulepool could import."""


def hiding(env: dict[str, str], tmp_path: Path, hide: tuple[str, ...]) -> dict[str, str]:
    """`env` with the packages `hide` made unimportable in any interpreter started with it."""
    site = tmp_path / "hiding-site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(HIDING_SITE)
    path = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    return env | {"PYTHONPATH": path, "HIDE_MODULES": ",".join(hide)}


def pool(
    args: list[str], tmp_path: Path, hide: tuple[str, ...] = (), stdin: str = ""
) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run `pool ARGS` in a fresh interpreter; its result and the top-level modules it imported."""
    env = dict(os.environ, MODULES_OUT=str(tmp_path / "modules.json"))
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=hiding(env, tmp_path, hide) if hide else env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    modules = json.loads((tmp_path / "modules.json").read_text())
    return done, {m.split(".")[0] for m in modules}


def core_verbs(folder: Path) -> list[tuple[list[str], str, int]]:
    """Every core verb on a fresh deployment, in an order that works: argv, stdin, exit code."""
    d = str(folder)
    case = json.dumps(json.loads(VECTOR.read_text())["case"])
    admit = ["--gang-size", "1", "--devices-per-member", "1", "--estimate", "1MJ"]
    return [
        (["init", d], "", 0),
        (
            [
                "admit",
                d,
                "--id",
                "job-1",
                "--entitlement",
                "vision",
                *admit,
                "--grade",
                "ModelBased",
            ],
            "",
            0,
        ),
        (["claims", d], "", 0),
        (["usage", d], "", 0),
        (["release", d, "job-1", "--actual-uj", "1J", "--grade", "HwShunt"], "", 0),
        (["ledger", "verify", d], "", 0),
        (["exec"], case + "\n", 0),
        (["conformance", "run", str(REPO / "conformance" / "vectors")], "", 0),
        (["--help"], "", 0),
    ]


def test_core_verbs_import_no_optional_stack(tmp_path: Path) -> None:
    for argv, stdin, code in core_verbs(tmp_path / "dep"):
        done, modules = pool(argv, tmp_path, stdin=stdin)
        assert done.returncode == code, (argv, done.stderr)
        assert sorted(modules & set(OPTIONAL)) == [], argv


def test_core_verbs_run_with_every_optional_package_hidden(tmp_path: Path) -> None:
    for argv, stdin, code in core_verbs(tmp_path / "dep"):
        done, _ = pool(argv, tmp_path, hide=OPTIONAL, stdin=stdin)
        assert done.returncode == code, (argv, done.stderr)
        assert "Traceback" not in done.stderr, argv


def test_the_hiding_site_hides(tmp_path: Path) -> None:
    """The rig itself: a hidden package cannot be imported, the same one unhidden can."""
    code = ["-c", "import fastapi"]
    hidden = subprocess.run(
        [sys.executable, *code],
        env=hiding(dict(os.environ), tmp_path, ("fastapi",)),
        capture_output=True,
        text=True,
        check=False,
    )
    assert hidden.returncode == 1
    assert "ModuleNotFoundError: No module named 'fastapi'" in hidden.stderr
    assert subprocess.run([sys.executable, *code], check=False).returncode == 0


@pytest.mark.parametrize(
    ("args", "hide", "says"),
    [
        (
            ["serve", "{dep}"],
            SERVE,
            "pool: missing_extra: pool serve needs the [serve] extra (no module named 'fastapi'): "
            "pip install 'joulepool[serve]'",
        ),
        (
            ["serve", "{dep}", "--postgres", "postgresql:///nowhere"],
            POSTGRES,
            "pool: missing_extra: pool serve --postgres needs the [postgres] extra "
            "(no module named 'psycopg'): pip install 'joulepool[postgres]'",
        ),
        (
            [
                "ledger",
                "export",
                "{tmp}/out.cbor",
                "--postgres",
                "postgresql:///nowhere",
                "--ledger",
                "x",
            ],
            POSTGRES,
            "pool: missing_extra: pool ledger export --postgres needs the [postgres] extra "
            "(no module named 'psycopg'): pip install 'joulepool[postgres]'",
        ),
        (
            ["meter", "list", "--prometheus", "http://127.0.0.1:9/metrics", "--no-nvml"],
            PROMETHEUS,
            "pool: missing_extra: a DCGM exporter or Kepler meter needs the [prometheus] extra "
            "(no module named 'httpx'): pip install 'joulepool[prometheus]'",
        ),
        (
            ["simulate", "--first-jobs", "1"],
            SIM,
            "pool: missing_extra: pool simulate needs the joulepool-sim distribution "
            "(no module named 'joulepool_sim'): pip install joulepool-sim "
            "(from a joulepool checkout: pip install -e ./sim)",
        ),
    ],
    ids=["serve", "serve-postgres", "export-postgres", "prometheus-meter", "simulate"],
)
def test_a_missing_extra_is_one_line_naming_it(
    args: list[str], hide: tuple[str, ...], says: str, tmp_path: Path
) -> None:
    dep = tmp_path / "dep"
    assert pool(["init", str(dep)], tmp_path)[0].returncode == 0
    argv = [a.format(dep=dep, tmp=tmp_path) for a in args]
    done, modules = pool(argv, tmp_path, hide=hide)
    assert (done.returncode, done.stderr.strip()) == (1, says)
    assert sorted(modules & set(hide)) == []
