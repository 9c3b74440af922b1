"""A `pool.toml` change rolled out to PostgreSQL replicas by SIGHUP, the documented way
(docs/reliability.md §8, §15): the first replica reloaded records the new configuration,
and every other replica, given the same file, adopts what the first recorded, whatever it
changes (the tree, or the `[period]`, which regroups the ledger's history).

Real `pool serve` processes, a real PostgreSQL server (tests/support/pg.py); nothing mocked.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest

from joulepool.deployment.config import CONFIG, read_config, write_config
from joulepool.periods import Schedule
from tests.support.faults import claim
from tests.support.pg import pg_dsn, pg_ledger, pg_server
from tests.support.servers import Deployment, Serve, sighup, start_serve

__all__ = ["pg_dsn", "pg_ledger", "pg_server"]

pytestmark = pytest.mark.postgres

DAY_MS = 86_400_000
RELEASE = {"actual": {"uj": 1, "grade": "HwShunt"}}


def rewrite_period(folder: Path, period: Schedule) -> None:
    config = read_config(folder / CONFIG)
    (folder / CONFIG).unlink()
    write_config(folder / CONFIG, config.steward, config.tree, config.idle, period)


def period_length_ms(serve: Serve, token: str) -> int:
    with serve.client(token) as http:
        period = http.get("/v1/entitlements/vision").json()["usage"]["period"]
    return int(period["end_ms"]) - int(period["start_ms"])


def test_a_period_change_rolls_out_to_every_replica_by_sighup(
    tmp_path: Path, pg_dsn: str, pg_ledger: str
) -> None:
    one = Deployment.create(tmp_path / "a")
    other = tmp_path / "b"
    shutil.copytree(one.folder, other)
    pg = ("--postgres", pg_dsn, "--ledger", pg_ledger)
    a = start_serve(one.folder, *pg)
    b = start_serve(other, *pg)
    try:
        with a.client(one.operator) as ops_a, b.client(one.operator) as ops_b:
            # History on both replicas: released claims fill the shared claim table, and each
            # replica has folded entries the other wrote.
            for i in range(6):
                ops = ops_a if i % 2 else ops_b
                assert ops.post("/v1/claims", json=claim(f"c{i}")).json()["verdict"] == "admit"
                done = ops.post(f"/v1/claims/c{i}/release", json=RELEASE)
                assert done.status_code == 200, done.text
            assert ops_a.post("/v1/claims", json=claim("running-a")).status_code == 200
            assert period_length_ms(b, one.operator) != DAY_MS
            # The operator writes the new [period] on every replica, then SIGHUPs them in turn.
            for folder in (one.folder, other):
                rewrite_period(folder, Schedule("day"))
            assert "configuration reloaded" in sighup(a)
            # The first replica goes on working under the new period: admits and releases.
            assert ops_a.post("/v1/claims", json=claim("after-a")).status_code == 200
            done = ops_a.post("/v1/claims/after-a/release", json=RELEASE)
            assert done.status_code == 200, done.text
            said = sighup(b)
            assert "configuration reloaded" in said, said
            assert httpx.get(f"{b.url}/readyz", timeout=10).status_code == 200
            r = ops_b.post("/v1/claims", json=claim("after-b"))
            assert (r.status_code, r.json()["verdict"]) == (200, "admit"), r.text
            assert period_length_ms(b, one.operator) == DAY_MS
            assert period_length_ms(a, one.operator) == DAY_MS
            r = ops_a.post("/v1/claims", json=claim("after-both"))
            assert (r.status_code, r.json()["verdict"]) == (200, "admit"), r.text
        assert "Traceback" not in a.output() + b.output()
    finally:
        a.kill()
        b.kill()
