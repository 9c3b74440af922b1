"""`pool serve --check DIR`, as `nginx -t`: pool.toml, the steward's key, tokens.toml and the
TLS files read as a start reads them, exit 0 when `pool serve` would start and 1 with one
line naming what is wrong; nothing opened for writing, so it runs beside a serving process."""

from __future__ import annotations

import os
from pathlib import Path

from joulepool.deployment.config import CONFIG, TOKENS
from tests.support.servers import Deployment, pool_cli, start_serve


def files(folder: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under `folder` with its size, mode and modification time in ns."""
    out = {}
    for path in sorted(folder.rglob("*")):
        st = path.stat()
        out[str(path.relative_to(folder))] = (st.st_size, st.st_mode, st.st_mtime_ns)
    return out


def test_check_passes_beside_a_running_serve_and_writes_nothing(tmp_path: Path) -> None:
    d = Deployment.create(tmp_path / "d")
    serve = start_serve(d.folder)
    try:
        before = files(d.folder)
        run = pool_cli("serve", str(d.folder), "--check")
        assert run.returncode == 0, run.stderr
        assert run.stdout.startswith(f"pool serve --check: {d.folder}: ok: steward 'steward'")
        assert "4 entitlements, 4 token(s)" in run.stdout
        assert files(d.folder) == before
        with serve.client(d.operator) as ops:
            assert ops.get("/readyz").status_code == 200  # the ledger lock was never taken
    finally:
        serve.kill()


def test_check_refuses_a_broken_configuration_with_one_line_and_exit_1(tmp_path: Path) -> None:
    d = Deployment.create(tmp_path / "d")
    config = d.folder / CONFIG
    good = config.read_text(encoding="utf-8")
    config.write_text(good.replace('parent = "research"', 'parent = "reserch"', 1), "utf-8")
    before = files(d.folder)
    run = pool_cli("serve", str(d.folder), "--check")
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr.startswith("pool: invalid_tree: ") and "reserch" in run.stderr
    assert len(run.stderr.splitlines()) == 1 and "Traceback" not in run.stderr
    assert files(d.folder) == before


def test_check_refuses_a_token_whose_scope_the_tree_lacks(tmp_path: Path) -> None:
    d = Deployment.create(tmp_path / "d")
    config = d.folder / CONFIG
    text = config.read_text(encoding="utf-8")
    # robotics is dropped from the tree while a tenant token still names it.
    config.write_text(text[: text.index('[[entitlement]]\nid = "robotics"')], "utf-8")
    run = pool_cli("serve", str(d.folder), "--check")
    assert run.returncode == 1 and "robotics" in run.stderr and str(TOKENS) in run.stderr
    assert "Traceback" not in run.stderr


def test_check_refuses_tls_files_that_are_not_there(tmp_path: Path) -> None:
    d = Deployment.create(tmp_path / "d")
    missing = tmp_path / "nope.pem"
    run = pool_cli(
        "serve", str(d.folder), "--check", "--tls-cert", str(missing), "--tls-key", str(missing)
    )
    assert run.returncode == 1 and "--tls-cert" in run.stderr and "Traceback" not in run.stderr


def test_check_refuses_a_folder_that_is_no_deployment(tmp_path: Path) -> None:
    os.mkdir(tmp_path / "empty")
    run = pool_cli("serve", str(tmp_path / "empty"), "--check")
    assert run.returncode == 1 and run.stderr.startswith("pool: ") and "Traceback" not in run.stderr
