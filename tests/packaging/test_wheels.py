"""The two distributions of the repository, built as a user's pip builds them (DESIGN.md §5):
the controller's wheel carries neither traces nor plotting and depends on no optional stack;
joulepool-sim's carries the traces with their licences, matplotlib, and `pool simulate`'s
entry point."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Built from a copy, so that the build's own folders never land in the checkout.
SKIP = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")


def wheel(project: Path, tmp: Path) -> zipfile.ZipFile:
    """The wheel pip builds from `project` (pyproject.toml, README.md and src/)."""
    copy = tmp / project.name
    copy.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(project / name, copy / name)
    shutil.copytree(project / "src", copy / "src", ignore=SKIP)
    out = tmp / "wheels"
    args = ["-w", str(out), str(copy)]
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", *args],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = out.glob("*.whl")
    return zipfile.ZipFile(built)


def metadata(whl: zipfile.ZipFile) -> list[str]:
    (name,) = [n for n in whl.namelist() if n.endswith(".dist-info/METADATA")]
    return whl.read(name).decode().splitlines()


def requires(whl: zipfile.ZipFile) -> dict[str, str]:
    """Each Requires-Dist line: the requirement, and its marker ('' where unconditional)."""
    out = {}
    for line in metadata(whl):
        if line.startswith("Requires-Dist: "):
            requirement, _, marker = line.removeprefix("Requires-Dist: ").partition(";")
            out[requirement.strip()] = marker.strip()
    return out


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    return wheel(REPO, tmp_path_factory.mktemp("controller"))


@pytest.fixture(scope="module")
def simulator(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    return wheel(REPO / "sim", tmp_path_factory.mktemp("sim"))


def test_the_controllers_wheel_carries_no_traces_and_no_simulator(
    controller: zipfile.ZipFile,
) -> None:
    names = controller.namelist()
    assert "joulepool/cli/__init__.py" in names
    assert "joulepool/service/ui/index.html" in names
    assert [n for n in names if "traces" in n or "simulate" in n or "joulepool_sim" in n] == []
    assert [n for n in names if n.endswith((".trace", ".csv", ".png"))] == []


def test_the_controller_depends_only_on_its_core_unless_an_extra_is_asked_for(
    controller: zipfile.ZipFile,
) -> None:
    unconditional = sorted(
        re.split(r"[<>=\[ ]", r)[0] for r, m in requires(controller).items() if not m
    )
    assert unconditional == ["cbor2", "msgspec", "pynacl", "rich", "tomli-w"]
    optional = " ".join(f"{r} {m}" for r, m in requires(controller).items() if m)
    for package in ("fastapi", "uvicorn", "psycopg", "httpx", "prometheus-client"):
        assert package in optional, package
    assert "matplotlib" not in optional
    extras = {
        line.split(": ")[1] for line in metadata(controller) if line.startswith("Provides-Extra")
    }
    assert {"serve", "postgres", "prometheus", "nvml", "test"} <= extras


def test_joulepool_sim_carries_the_traces_their_licences_and_the_simulate_command(
    simulator: zipfile.ZipFile,
) -> None:
    names = simulator.namelist()
    traces = "joulepool_sim/data/traces/"
    assert f"{traces}README.md" in names
    for source in ("philly-gavel", "helios-vc", "zeus-power"):
        assert f"{traces}{source}/LICENSE" in names, source
    assert sum(n.startswith(f"{traces}philly-gavel/seed0/") for n in names) > 10
    assert set(requires(simulator)) == {"joulepool==0.1.0", "matplotlib<4,>=3.8"}
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    text = simulator.read(entry_points).decode()
    assert "[joulepool.commands]\nsimulate = joulepool_sim.cli:run" in text
