"""Two `pool serve` replicas on one PostgreSQL ledger (DESIGN.md §6): concurrent
clients spread over both get linearizable decisions. No two admissions are told one index,
the exported ledger verifies with `pool ledger verify` and re-decides serially to the same
admissions, and each replica reports exactly the usage that ledger replays to."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from joulepool.conformance.ledger_ops import split_ledger
from joulepool.deployment.config import CONFIG, read_config
from joulepool.ledger.keys import load_key_file
from tests.support.load import check_ledger, drive
from tests.support.pg import pg_dsn, pg_ledger, pg_server
from tests.support.servers import Deployment, Serve, pool_cli, start_serve

__all__ = ["pg_dsn", "pg_ledger", "pg_server"]

pytestmark = pytest.mark.postgres

CLIENTS = 12
OPS_PER_CLIENT = 40


@pytest.fixture
def replicas(
    tmp_path: Path, pg_dsn: str, pg_ledger: str
) -> Iterator[tuple[Deployment, list[Serve]]]:
    deployment = Deployment.create(tmp_path / "d")
    started: list[Serve] = []
    try:
        for _ in range(2):
            started.append(
                start_serve(deployment.folder, "--postgres", pg_dsn, "--ledger", pg_ledger)
            )
        yield deployment, started
    finally:
        for s in started:
            s.kill()


def test_two_replicas_decide_linearizably_under_concurrent_clients(
    replicas: tuple[Deployment, list[Serve]], pg_dsn: str, pg_ledger: str, tmp_path: Path
) -> None:
    deployment, serves = replicas
    outcome = drive(
        serves, deployment.operator, ["vision", "language", "robotics"], CLIENTS, OPS_PER_CLIENT
    )
    assert outcome.errors == []
    assert len(outcome.told) > 40

    # `pool ledger export` writes the PostgreSQL ledger as a file any verifier can check.
    out = tmp_path / "exported.cbor"
    done = pool_cli("ledger", "export", str(out), "--postgres", pg_dsn, "--ledger", pg_ledger)
    assert done.returncode == 0, done.stderr
    pub = deployment.folder / "steward.pub"
    verified = pool_cli("ledger", "verify", str(out), "--key", str(pub), "--json")
    assert verified.returncode == 0, verified.stderr
    entries, tail = split_ledger(out.read_bytes())
    assert tail is None
    assert json.loads(verified.stdout)["length"] == len(entries)

    key = load_key_file(pub)
    tree = read_config(deployment.folder / CONFIG).tree
    for serve in serves:
        # A replica catches up before it answers a read, so both report the whole ledger.
        with serve.client(deployment.operator) as http:
            assert http.get("/v1/ledger").json()["length"] == len(entries)
            reported = {
                e["id"]: e["usage"] for e in http.get("/v1/entitlements").json()["entitlements"]
            }
            # A claim admitted through one replica reads the same through the other.
            some = next(iter(outcome.told))
            state = http.get(f"/v1/claims/{some}").json()
            assert state["admitted_seq"] == outcome.told[some]
        check_ledger(entries, tree, key, outcome, reported)


def test_export_refuses_to_overwrite_and_names_a_missing_ledger_flag(
    pg_dsn: str, tmp_path: Path
) -> None:
    out = tmp_path / "x.cbor"
    out.write_bytes(b"kept")
    missing = pool_cli("ledger", "export", str(out), "--postgres", pg_dsn)
    assert missing.returncode != 0
    assert "--ledger" in missing.stderr and "Traceback" not in missing.stderr
    exists = pool_cli("ledger", "export", str(out), "--postgres", pg_dsn, "--ledger", "nobody")
    assert exists.returncode != 0
    assert "already exists" in exists.stderr and "Traceback" not in exists.stderr
    assert out.read_bytes() == b"kept"
    # --ledger means nothing for a ledger file: refused, not silently ignored.
    stray = pool_cli(
        "ledger", "export", str(tmp_path / "y.cbor"), "--file", str(out), "--ledger", "x"
    )
    assert stray.returncode != 0
    assert "--ledger" in stray.stderr and "Traceback" not in stray.stderr
    assert not (tmp_path / "y.cbor").exists()
