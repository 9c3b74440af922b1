"""Time faults are reported, never absorbed (DESIGN.md §3), on real processes under a wrong
clock (Debian's libfaketime); tests/test_pool_clock.py holds the rule on an injected clock.

A clock more than the absorbed 5 s behind the last entry appends nothing
(`clock_behind_ledger`); one far ahead of the last entry at start, or stepped against the
monotonic clock while running, appends nothing until `pool ledger accept-clock`
(`clock_jump`); the plausibility bound of a release is measured on real elapsed time.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from joulepool.deployment.config import CONFIG
from joulepool.ledger.cose import open_envelope
from joulepool.ledger.entry import event_of
from joulepool.ledger.keys import load_key_file
from joulepool.stores.file import FileStore
from tests.support.servers import Deployment, Serve, pool_cli, start_serve

LIBFAKETIME = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
needs_faketime = pytest.mark.skipif(
    shutil.which("faketime") is None or not LIBFAKETIME,
    reason="needs a wrong clock: the faketime package (apt-get install faketime)",
)


def pool_at(offset: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`pool ARGS` under a clock `offset` away from the real one (faketime's syntax)."""
    env = {**os.environ, "LD_PRELOAD": LIBFAKETIME[0], "FAKETIME": offset}
    return subprocess.run(
        [sys.executable, "-m", "joulepool", *args],
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
        timeout=120,
        env=env,
    )


def admit_args(folder: Path, claim: str) -> list[str]:
    return [
        "admit",
        str(folder),
        "--id",
        claim,
        "--entitlement",
        "vision",
        "--estimate-uj",
        "1000000",
        "--grade",
        "HwShunt",
        "--json",
    ]


def at_ms_of(folder: Path) -> list[int]:
    kid = load_key_file(folder / "steward.key").kid
    store = FileStore(folder / "ledger.cbor")
    try:
        return [event_of(open_envelope(raw).core, kid).at_ms for raw in store.entries()]
    finally:
        store.close()


def claim_body(claim: str, devices: int = 1) -> dict[str, Any]:
    return {
        "id": claim,
        "entitlement": "vision",
        "gang_size": 1,
        "devices_per_member": devices,
        "estimate": {"uj": 1_000_000, "grade": "HwShunt"},
    }


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# -- real processes ----------------------------------------------------------------------


@needs_faketime
def test_one_command_under_a_clock_years_ahead_cannot_future_date_the_ledger(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "d"
    Deployment.create(folder)
    assert pool_cli(*admit_args(folder, "job-1")).returncode == 0
    ahead = pool_at("+4y", *admit_args(folder, "job-2"))
    # Refused, one line naming both instants, nothing appended.
    assert ahead.returncode == 1, ahead.stdout + ahead.stderr
    assert "Traceback" not in ahead.stderr
    assert "clock_jump" in ahead.stderr and "2030-" in ahead.stderr, ahead.stderr
    assert f"{datetime.now(UTC).year}-" in ahead.stderr
    assert len(at_ms_of(folder)) == 1
    # A normal restart after it: the budget period is today's, not one four years ahead.
    assert pool_cli(*admit_args(folder, "job-3")).returncode == 0
    dated = at_ms_of(folder)
    assert all(abs(at - now_ms()) < 60_000 for at in dated), dated
    assert pool_cli("ledger", "verify", str(folder)).returncode == 0


@needs_faketime
def test_an_accepted_jump_leaves_a_clock_behind_the_ledger_that_appends_nothing(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "d"
    Deployment.create(folder)
    assert pool_cli(*admit_args(folder, "job-1")).returncode == 0
    accepted = pool_at("+4y", "ledger", "accept-clock", str(folder), "--json")
    assert accepted.returncode == 0, accepted.stderr
    record = json.loads(accepted.stdout)
    assert record["length"] == 1 and record["accepted_at"].startswith("2030-")
    kept = json.loads((folder / "ledger.cbor.clock").read_text())
    assert kept["length"] == 1 and kept["accepted_at_ms"] == record["accepted_at_ms"]
    assert (folder / "ledger.cbor.clock.log").read_text().count("\n") == 1
    assert pool_at("+4y", *admit_args(folder, "job-2")).returncode == 0
    # The operator accepted a wrong clock: the real one is now years behind the ledger.
    behind = pool_cli(*admit_args(folder, "job-3"))
    assert behind.returncode == 1
    assert "clock_behind_ledger" in behind.stderr and "2030-" in behind.stderr, behind.stderr
    assert len(at_ms_of(folder)) == 2
    # The acceptance was spent by the entry appended after it: a new jump is reported again.
    assert "clock_jump" in pool_at("+8y", *admit_args(folder, "job-4")).stderr


def _wait_for(serve: Serve, code: str, timeout_s: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    answer: dict[str, Any] = {}
    while time.monotonic() < deadline:
        if serve.proc.poll() is not None:
            raise AssertionError(f"pool serve exited:\n{serve.output()}")
        try:
            got = httpx.get(f"{serve.url}/readyz", timeout=2)
        except httpx.TransportError:
            time.sleep(0.1)
            continue
        answer = got.json()
        if answer.get("error", answer.get("status")) == code:
            return answer
        time.sleep(0.1)
    raise AssertionError(f"/readyz never said {code}: {answer}\n{serve.output()}")


@needs_faketime
def test_the_service_answers_clock_faults_on_readyz_and_appends_until_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = Deployment.create(tmp_path / "d")
    assert pool_cli(*admit_args(d.folder, "job-1")).returncode == 0
    monkeypatch.setenv("LD_PRELOAD", LIBFAKETIME[0])
    monkeypatch.setenv("FAKETIME", "+4y")
    serve = start_serve(d.folder, wait=False)
    try:
        said = _wait_for(serve, "clock_jump")
        assert "2030-" in said["detail"] and "accept-clock" in said["detail"]
        with serve.client(d.operator) as ops:
            refused = ops.post("/v1/claims", json=claim_body("job-2"))
            assert refused.status_code == 503
            assert refused.json()["error"] == "clock_jump"
            # Accepted beside the running writer: it appends again, no restart.
            assert pool_at("+4y", "ledger", "accept-clock", str(d.folder)).returncode == 0
            _wait_for(serve, "ready")
            assert ops.post("/v1/claims", json=claim_body("job-2")).json()["verdict"] == "admit"
    finally:
        serve.kill()
    monkeypatch.delenv("FAKETIME")
    monkeypatch.delenv("LD_PRELOAD")
    serve = start_serve(d.folder, wait=False)
    try:
        said = _wait_for(serve, "clock_behind_ledger")
        assert "2030-" in said["detail"] and f"{datetime.now(UTC).year}-" in said["detail"]
        with serve.client(d.operator) as ops:
            refused = ops.post("/v1/claims", json=claim_body("job-3"))
            assert refused.status_code == 503
            assert refused.json()["error"] == "clock_behind_ledger"
            release = {"actual": {"uj": 1, "grade": "HwShunt"}}
            refused = ops.post("/v1/claims/job-1/release", json=release)
            assert refused.json()["error"] == "clock_behind_ledger"
    finally:
        serve.kill()
    assert "Traceback" not in serve.output()
    assert len(at_ms_of(d.folder)) == 2


@needs_faketime
def test_a_release_is_bounded_by_real_elapsed_time_after_a_small_step_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With max_device_power_w, a claim whose ledger instant is ahead of the clock (raised to
    # the last entry's `at_ms` across a small step back) must still be releasable: the bound
    # runs on real elapsed time, not on at_ms differences, which are 0 here.
    d = Deployment.create(tmp_path / "d")
    config = d.folder / CONFIG
    config.write_text(config.read_text().replace("[pool]\n", "[pool]\nmax_device_power_w = 1\n", 1))
    assert pool_cli(*admit_args(d.folder, "job-1")).returncode == 0
    (admitted_at,) = at_ms_of(d.folder)
    # The service's clock starts 4 s behind the entry: within the step the writer absorbs.
    behind = datetime.fromtimestamp(admitted_at // 1000 - 4, tz=UTC)
    monkeypatch.setenv("LD_PRELOAD", LIBFAKETIME[0])
    monkeypatch.setenv("FAKETIME", behind.strftime("@%Y-%m-%d %H:%M:%S"))
    serve = start_serve(d.folder)
    try:
        with serve.client(d.operator) as ops:
            assert ops.post("/v1/claims", json=claim_body("job-2")).json()["verdict"] == "admit"
            time.sleep(1.5)
            # 1 J on one device under a 1 W ceiling: plausible after 1 s of real time.
            release = {"actual": {"uj": 1_000_000, "grade": "HwShunt"}}
            for claim in ("job-2", "job-1"):
                done = ops.post(f"/v1/claims/{claim}/release", json=release)
                assert done.status_code == 200, done.text
    finally:
        serve.kill()
    dated = at_ms_of(d.folder)
    assert dated[1:] == [admitted_at] * 3  # raised to the entry before, never before it
