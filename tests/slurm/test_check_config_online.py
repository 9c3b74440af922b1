"""`pool slurm check-config --online` against a real `pool serve` and a real Slurm: a sound
installation passes; a token Pool does not know, a misspelled team and a Slurm without
energy accounting are each caught by name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.slurm import testbed
from tests.support.slurm.bridge import Bridge, module_bridge

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def bridge() -> Iterator[Bridge]:
    yield from module_bridge()


def check(config: Path, env: dict[str, str], *extra: str) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "joulepool", "slurm", "check-config"),
            *("--config", str(config), "--online", "--json", *extra),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.stdout, done.stderr
    result = json.loads(done.stdout)
    return done.returncode, {f["check"]: f for f in result["online"]}


def variant(bridge: Bridge, name: str, old: str, new: str) -> Path:
    """A copy of the bridge's file with one text replaced."""
    text = bridge.config.read_text()
    assert old in text
    path = bridge.root / name
    path.write_text(text.replace(old, new, 1))
    return path


def test_sound_installation_passes_every_online_check(bridge: Bridge) -> None:
    rc, found = check(bridge.config, bridge.bed.env, "--dcgm-url", bridge.bed.dcgm_url)
    assert rc == 0, found
    assert found["token"]["ok"]
    assert {k for k in found if k.startswith("entitlement:")} == {
        "entitlement:ling",
        "entitlement:phys",
        "entitlement:robo",
    }
    assert all(f["ok"] for f in found.values()), found
    assert found["slurm:AcctGatherEnergyType"]["detail"] == "acct_gather_energy/rapl"
    assert "4 GPU energy counter(s)" in found["exporter"]["detail"]


def test_token_pool_does_not_know_is_caught(bridge: Bridge) -> None:
    fake = bridge.root / "fake.token"
    fd = os.open(fake, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write("not-a-token-pool-issued\n")
    text = bridge.config.read_text()
    token_line = next(ln for ln in text.splitlines() if ln.startswith("token_file ="))
    config = variant(bridge, "fake-token.toml", token_line, f'token_file = "{fake}"')
    rc, found = check(config, bridge.bed.env)
    assert rc == 1
    assert not found["token"]["ok"]
    assert "does not know the token" in found["token"]["detail"]


def test_misspelled_team_is_caught_with_the_name_meant(bridge: Bridge) -> None:
    config = variant(bridge, "misspelled.toml", 'phys = "vision"', 'phys = "vison"')
    rc, found = check(config, bridge.bed.env)
    assert rc == 1
    assert not found["entitlement:phys"]["ok"]
    assert "'vison'" in found["entitlement:phys"]["detail"]
    assert "did you mean 'vision'?" in found["entitlement:phys"]["detail"]
    assert found["entitlement:ling"]["ok"]


def test_slurm_without_energy_accounting_is_caught_by_name(bridge: Bridge) -> None:
    with testbed.running_testbed(testbed.TestbedOptions(accounting=False, gpus=0)) as bare:
        rc, found = check(bridge.config, bare.env)
    assert rc == 1
    assert found["token"]["ok"]
    for key in ("slurm:AcctGatherEnergyType", "slurm:AccountingStorageType"):
        assert not found[key]["ok"], found[key]
        assert "charged its reservation at Estimator" in found[key]["detail"]
    assert found["slurm:JobAcctGatherType"]["ok"]


def test_exporter_that_does_not_answer_is_caught_per_node(bridge: Bridge) -> None:
    rc, found = check(bridge.config, bridge.bed.env, "--dcgm-url", "http://127.0.0.1:9/{node}")
    assert rc == 1
    exporters = [k for k in found if k.startswith("exporter:")]
    assert exporters == [f"exporter:{n}" for n in bridge.bed.node_names]
    assert not any(found[k]["ok"] for k in exporters)


def test_exporters_of_the_installed_gpu_prolog_are_checked_on_each_node(bridge: Bridge) -> None:
    # install-config --gpu --dcgm-url http://127.0.0.1:PORT/metrics: each node's own.
    rc, found = check(bridge.config, bridge.bed.env)
    assert rc == 0, found
    node = bridge.bed.node_names[0]
    assert found[f"exporter:{node}"]["ok"], found
    assert found[f"exporter:{node}"]["detail"].startswith(f"http://{node}:")
