"""The repository stands alone: the standard, the design notes, the HTTP API and the
conformance format are inside the repository, the API page lists exactly what the service
serves, the simulator's traces ship with their licences, and nothing points outside the
checkout."""

from __future__ import annotations

import re
from pathlib import Path

from joulepool.service.app import Service, create_app
from joulepool.service.tokens import TokenBook
from joulepool_sim.evaluation import DEFAULT_DATA_DIR

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
# `GET /v1/claims/{id}` as the page writes a route; a query string is not part of the path.
ROUTE = re.compile(r"`(GET|POST|PUT|DELETE|PATCH) (/[^`\s?]*)")
# Paths the page documents that the schema cannot list about itself.
NOT_IN_SCHEMA = {("GET", "/openapi.json")}


def _shape(path: str) -> str:
    """A path with its parameters' names dropped: `{id}` and `{claim_id}` are one route."""
    return re.sub(r"\{[^}]*\}", "{}", path)


def documented_routes() -> set[tuple[str, str]]:
    text = (DOCS / "api.md").read_text(encoding="utf-8")
    return {(m, _shape(p)) for m, p in ROUTE.findall(text)} - NOT_IN_SCHEMA


def served_routes() -> set[tuple[str, str]]:
    app = create_app(Service(opener=lambda: None, tokens=TokenBook([])))  # type: ignore[arg-type,return-value]
    schema = app.openapi()
    return {
        (method.upper(), _shape(path))
        for path, item in schema["paths"].items()
        for method in item
        if method in {"get", "post", "put", "delete", "patch"}
    }


def test_api_md_documents_exactly_what_openapi_serves() -> None:
    served, documented = served_routes(), documented_routes()
    assert served - documented == set(), "served but not in docs/api.md"
    assert documented - served == set(), "in docs/api.md but not served"


def test_the_standard_ships_with_its_licence_and_attribution() -> None:
    standard = DOCS / "standard"
    assert (standard / "pool-v0.1.md").read_text(encoding="utf-8").startswith("<!--")
    licence = (standard / "LICENSE").read_text(encoding="utf-8")
    assert "CC-BY-4.0" in licence and "Attribution" in licence
    for page in ("design.md", "api.md", "conformance.md"):
        assert (DOCS / page).stat().st_size > 1000, page


def test_nothing_points_outside_the_repository() -> None:
    offenders = []
    for root in ("README.md", "docs", "src", "sim", "tests", "benchmarks"):
        base = REPO / root
        files = [base] if base.is_file() else sorted(base.rglob("*"))
        for f in files:
            if f.suffix not in {".md", ".py", ".toml", ".lua"} or f == Path(__file__):
                continue
            text = f.read_text(encoding="utf-8", errors="replace")
            # Spelled in pieces so that this file is not itself a reference to the shelf.
            if any(
                ref in text for ref in (".." + "/shared", "shared" + "/data", "shared" + "/API")
            ):
                offenders.append(str(f.relative_to(REPO)))
    assert offenders == []


def test_simulate_traces_ship_inside_joulepool_sim_with_licences() -> None:
    assert DEFAULT_DATA_DIR.is_absolute()
    assert DEFAULT_DATA_DIR == REPO / "sim" / "src" / "joulepool_sim" / "data" / "traces"
    assert (DEFAULT_DATA_DIR / "philly-gavel" / "seed0").is_dir()
    for source in ("philly-gavel", "helios-vc", "zeus-power"):
        assert (DEFAULT_DATA_DIR / source / "LICENSE").is_file(), source


def test_pool_simulate_runs_from_any_working_folder(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "joulepool",
            "simulate",
            "--first-jobs",
            "40",
            "--gpus",
            "96",
            "--out",
            "report",
            "--json",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["trace"] == "joulepool_sim/data/traces/philly-gavel/seed0"
    assert (tmp_path / "report" / "evaluation.md").is_file()
