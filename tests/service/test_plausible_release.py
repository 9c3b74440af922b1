"""The physical plausibility of a release (API.md "Additions"): with
`max_device_power_w` configured, an actual figure above devices × ceiling × time since
admission is refused `implausible_actual` naming the bound, unless an operator overrides it
(logged, with the token's name); without a ceiling, a figure over 10× its reservation needs
the same override (HTTP: `"override": true`; CLI: --override). The ceiling is part of the replicas' configuration digest."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from joulepool.deployment.config import CONFIG, config_digest, read_config
from joulepool.views.plausibility import physical_bound_uj
from tests.support.servers import Deployment, pool_cli, start_serve

MJ = 10**12
GJ = 10**15


def with_ceiling(folder: Path, watts: int | None) -> None:
    """Set pool.toml's `max_device_power_w` to `watts` (None: no ceiling), whatever it was."""
    path = folder / CONFIG
    lines = [x for x in path.read_text().splitlines() if not x.startswith("max_device_power_w")]
    text = "\n".join(lines) + "\n"
    if watts is not None:
        text = text.replace("[pool]\n", f"[pool]\nmax_device_power_w = {watts}\n", 1)
    path.write_text(text)


def claim(claim_id: str, uj: int) -> dict[str, object]:
    return {
        "id": claim_id,
        "entitlement": "vision",
        "gang_size": 1,
        "devices_per_member": 2,
        "estimate": {"uj": uj, "grade": "HwShunt"},
    }


def test_a_release_above_the_physical_ceiling_is_422_unless_overridden(
    tmp_path: Path,
) -> None:
    d = Deployment.create(tmp_path / "d")
    with_ceiling(d.folder, 700)
    serve = start_serve(d.folder)
    try:
        with serve.client(d.operator) as ops:
            assert ops.post("/v1/claims", json=claim("c1", MJ)).json()["verdict"] == "admit"
            typo = {"actual": {"uj": 1000 * MJ, "grade": "HwShunt"}}
            r = ops.post("/v1/claims/c1/release", json=typo)
            assert r.status_code == 422 and r.json()["error"] == "implausible_actual"
            assert "physical bound" in r.json()["detail"] and "700 W" in r.json()["detail"]
            assert ops.get("/v1/claims/c1").json()["state"] == "running"  # nothing charged
            time.sleep(0.05)
            fine = ops.post("/v1/claims/c1/release", json={"actual": {"uj": 1, "grade": "HwShunt"}})
            assert fine.status_code == 200
            assert ops.post("/v1/claims", json=claim("c2", MJ)).json()["verdict"] == "admit"
            forced = ops.post("/v1/claims/c2/release", json={**typo, "override": True})
            assert forced.status_code == 200 and forced.json()["charged"]["uj"] == 1000 * MJ
        time.sleep(0.2)
        assert "override above_ceiling by ops" in serve.output()
    finally:
        serve.kill()


def test_without_a_ceiling_a_figure_over_10x_needs_override_and_names_its_actor(
    tmp_path: Path,
) -> None:
    d = Deployment.create(tmp_path / "d")
    serve = start_serve(d.folder)
    try:
        with serve.client(d.operator) as ops:
            ops.post("/v1/claims", json=claim("c1", MJ))
            eleven = {"actual": {"uj": 11 * MJ, "grade": "HwShunt"}}
            r = ops.post("/v1/claims/c1/release", json=eleven)
            assert r.status_code == 422 and r.json()["error"] == "implausible_actual"
            assert "10× its reservation" in r.json()["detail"]
            assert ops.get("/v1/claims/c1").json()["state"] == "running"  # nothing charged
            ten = ops.post(
                "/v1/claims/c1/release", json={"actual": {"uj": 10 * MJ, "grade": "HwShunt"}}
            )
            assert ten.status_code == 200  # 10× is the bound, not past it
            ops.post("/v1/claims", json=claim("c2", MJ))
            forced = ops.post("/v1/claims/c2/release", json={**eleven, "override": True})
            assert forced.status_code == 200 and forced.json()["charged"]["uj"] == 11 * MJ
        time.sleep(0.2)
        said = serve.output()
        assert "release override far_above_reservation by ops" in said
        (access,) = [x for x in said.splitlines() if "/v1/claims/c2/release" in x]
        assert (
            " ops POST " in access and "verdict=released:override:far_above_reservation" in access
        )
    finally:
        serve.kill()


def test_cli_release_refuses_implausible_and_takes_override(tmp_path: Path) -> None:
    folder = tmp_path / "d"
    assert pool_cli("init", str(folder), "--no-power-ceiling").returncode == 0
    assert (
        pool_cli(
            "admit",
            str(folder),
            "--id",
            "a",
            "--entitlement",
            "vision",
            "--estimate",
            "1MJ",
            "--grade",
            "HwShunt",
        ).returncode
        == 0
    )
    r = pool_cli("release", str(folder), "a", "--actual", "11MJ", "--grade", "HwShunt")
    assert r.returncode == 1 and "implausible_actual" in r.stderr and "--override" in r.stderr
    assert "Traceback" not in r.stderr
    r = pool_cli(
        "release", str(folder), "a", "--actual", "11MJ", "--grade", "HwShunt", "--override"
    )
    assert r.returncode == 0 and "overridden" in r.stderr
    with_ceiling(folder, 300)
    assert (
        pool_cli(
            "admit",
            str(folder),
            "--id",
            "b",
            "--entitlement",
            "vision",
            "--estimate",
            "1MJ",
            "--grade",
            "HwShunt",
        ).returncode
        == 0
    )
    r = pool_cli("release", str(folder), "b", "--actual", "1GJ", "--grade", "HwShunt")
    assert r.returncode == 1 and "implausible_actual" in r.stderr and "300 W" in r.stderr


def test_the_ceiling_is_in_the_configuration_digest(tmp_path: Path) -> None:
    folder = tmp_path / "d"
    assert pool_cli("init", str(folder), "--no-power-ceiling").returncode == 0
    c = read_config(folder / CONFIG)
    before = config_digest(c)
    assert before == config_digest(dataclasses.replace(c, max_device_power_w=None))
    with_ceiling(folder, 700)
    c = read_config(folder / CONFIG)
    assert c.max_device_power_w == 700
    after = config_digest(c)
    assert after != before
    assert physical_bound_uj(2, 700, 1_000) == 2 * 700 * 10**6  # 2 devices, 700 W, 1 s


def test_pool_init_sets_a_documented_ceiling_that_refuses_a_figure_typed_too_large(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "d"
    made = pool_cli("init", str(folder), "--json")
    assert made.returncode == 0, made.stderr
    assert '"max_device_power_w": 1000' in made.stdout
    assert read_config(folder / CONFIG).max_device_power_w == 1000
    admit = ("admit", str(folder), "--id", "a", "--entitlement", "vision", "--estimate", "1MJ")
    assert pool_cli(*admit, "--grade", "HwShunt").returncode == 0
    # A second's work of one 1000 W device is about 1 kJ; 1 MJ typed for 1 kJ is refused.
    r = pool_cli("release", str(folder), "a", "--actual", "1MJ", "--grade", "HwShunt")
    assert r.returncode == 1 and "implausible_actual" in r.stderr and "1000 W" in r.stderr
    r = pool_cli("release", str(folder), "a", "--actual", "100J", "--grade", "HwShunt")
    assert r.returncode == 0, r.stderr
    other = tmp_path / "e"
    assert pool_cli("init", str(other), "--max-device-power-w", "700").returncode == 0
    assert read_config(other / CONFIG).max_device_power_w == 700
    bad = pool_cli("init", str(tmp_path / "f"), "--max-device-power-w", "0")
    assert bad.returncode == 1 and "--max-device-power-w" in bad.stderr
    assert not (tmp_path / "f").exists()  # refused before anything was made
    none = tmp_path / "g"
    assert pool_cli("init", str(none), "--no-power-ceiling").returncode == 0
    assert read_config(none / CONFIG).max_device_power_w is None
