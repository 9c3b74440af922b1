"""The Slurm bridge on a real Slurm and a real `pool serve` holding a bridge token, as
docs/slurm.md installs it (docs/api.md, Tokens): a job is admitted, runs, and its measured
figure is released with the override, every request the bridge sends is one its token may
make, and `check-config --online` accepts the token."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.support.servers import wait_known
from tests.support.slurm.bridge import Bridge, module_bridge, note_of

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def bridge() -> Iterator[Bridge]:
    yield from module_bridge(held_scope="bridge:research")


def test_a_job_runs_end_to_end_with_the_bridge_holding_a_bridge_token(bridge: Bridge) -> None:
    # 1 J for a second of work: the meter's figure is refused as implausible, and the bridge
    # re-sends it with the override, which its token may send.
    job_id = bridge.submit(
        "-A", "phys", "--comment=pool:estimate_uj=1000000,grade=ModelBased", "--wrap", "sleep 1"
    )
    note = note_of(bridge.wait_job(job_id, lambda j: j.state == "COMPLETED"))
    assert note.state == "admitted" and note.claim.startswith("slurm-pooltest-"), bridge.logs()
    state = bridge.wait_released(note.claim)
    assert state["entitlement"] == "vision" and state["actual"]["uj"] > 10 * 1_000_000
    deadline = time.monotonic() + 10
    said = bridge.serve.output()
    while "release override far_above_reservation by slurm-bridge" not in said:
        assert time.monotonic() < deadline, said
        time.sleep(0.1)
        said = bridge.serve.output()
    # Every request the bridge's token made was answered as allowed: nothing it needs is
    # refused to it (a 403 here would be a route the bridge calls and its scope lacks).
    mine = [ln for ln in said.splitlines() if re.search(r" slurm-bridge (GET|POST) ", ln)]
    assert any(f"POST /v1/claims/{note.claim}/release 200" in ln for ln in mine), mine
    assert not [ln for ln in mine if re.search(r" (401|403) ", ln)], mine

    done = subprocess.run(
        [
            *(sys.executable, "-m", "joulepool", "slurm", "check-config"),
            *("--config", str(bridge.config), "--online", "--json"),
        ],
        env=bridge.bed.env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    found = {f["check"]: f for f in json.loads(done.stdout)["online"]}
    assert found["token"] == {
        "check": "token",
        "ok": True,
        "detail": "known to Pool, scope bridge:research",
    }
    assert all(found[f"entitlement:{a}"]["ok"] for a in ("phys", "ling", "robo")), found


def check_with(bridge: Bridge, name: str, token: str) -> dict[str, dict[str, object]]:
    """`check-config --online` over a copy of the bridge's file holding `token` instead,
    once the running `pool serve` has taken the new token in (within a second)."""
    wait_known(bridge.serve, token)
    path = bridge.root / f"{name}.token"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")
    text = bridge.config.read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("token_file ="))
    config = bridge.root / f"{name}.toml"
    config.write_text(text.replace(line, f'token_file = "{path}"', 1))
    done = subprocess.run(
        [
            *(sys.executable, "-m", "joulepool", "slurm", "check-config"),
            *("--config", str(config), "--online", "--json"),
        ],
        env=bridge.bed.env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.stdout, done.stderr
    return {f["check"]: f for f in json.loads(done.stdout)["online"]}


def test_check_config_online_names_a_token_that_may_not_run_the_bridge(bridge: Bridge) -> None:
    d = bridge.deployment
    for name, scope in (("team", "tenant:vision"), ("scraper", "metrics")):
        found = check_with(bridge, name, d.add_token(f"check-{name}", scope))
        assert not found["token"]["ok"], found
        assert "may not admit and release claims" in str(found["token"]["detail"])
    # A bridge token for one team: the accounts mapped outside its subtree are named.
    found = check_with(bridge, "narrow", d.add_token("check-narrow", "bridge:vision"))
    assert found["token"]["ok"] and found["entitlement:phys"]["ok"], found
    for account in ("ling", "robo"):
        assert not found[f"entitlement:{account}"]["ok"]
        assert "does not cover" in str(found[f"entitlement:{account}"]["detail"])
