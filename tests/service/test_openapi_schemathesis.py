"""schemathesis against the live `/openapi.json`: whatever it generates, valid or
not, no response is a 500 and every response matches the published schema."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.servers import Deployment, Serve, serving, wait_known

CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Deployment, Serve]]:
    yield from serving(tmp_path_factory.mktemp("st") / "d")


@pytest.mark.parametrize("who", ["operator", "tenant", "bridge"])
def test_schemathesis_finds_no_server_error_and_no_schema_mismatch(
    served: tuple[Deployment, Serve], who: str, tmp_path: Path
) -> None:
    deployment, serve = served
    token = {
        "operator": deployment.operator,
        "tenant": deployment.tenants["robotics"],
        "bridge": deployment.add_token("st-bridge", "bridge:research") if who == "bridge" else "",
    }[who]
    if who == "bridge":
        wait_known(serve, token)
    st = Path(sys.executable).with_name("schemathesis")
    command = [str(st) if st.exists() else (shutil.which("schemathesis") or "schemathesis")]
    proc = subprocess.run(
        [
            *command,
            "run",
            f"{serve.url}/openapi.json",
            "-H",
            f"Authorization: Bearer {token}",
            "--checks",
            CHECKS,
            "--max-examples",
            "40",
            "--seed",
            "7",
            "--report-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "passed" in proc.stdout
