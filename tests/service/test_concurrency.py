"""Many clients at once against one `pool serve`: the ledger replays to exactly
the usage the service reports, every admission a client was told of is in it at the index
it was told, and the ledger is a valid serial history (a sequential oracle re-decides it)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from joulepool.conformance.ledger_ops import split_ledger
from joulepool.deployment.config import CONFIG, read_config
from joulepool.ledger.keys import load_key_file
from tests.support.load import check_ledger, drive
from tests.support.servers import Deployment, Serve, start_serve

CLIENTS = 16
OPS_PER_CLIENT = 40


@pytest.fixture
def served(tmp_path: Any) -> Iterator[tuple[Deployment, Serve]]:
    deployment = Deployment.create(tmp_path / "d")
    serve = start_serve(deployment.folder)
    yield deployment, serve
    serve.kill()


def test_concurrent_clients_against_a_sequential_oracle(served: tuple[Deployment, Serve]) -> None:
    deployment, serve = served
    tenants = ["vision", "language", "robotics"]
    outcome = drive([serve], deployment.operator, tenants, CLIENTS, OPS_PER_CLIENT)
    assert outcome.errors == []
    with serve.client(deployment.operator) as http:
        reported = {
            e["id"]: e["usage"] for e in http.get("/v1/entitlements").json()["entitlements"]
        }
        raw = http.get("/v1/ledger/entries").content
        metrics = http.get("/metrics").text
    entries, tail = split_ledger(raw)
    assert tail is None
    key = load_key_file(deployment.folder / "steward.pub")
    tree = read_config(deployment.folder / CONFIG).tree
    check_ledger(entries, tree, key, outcome, reported)
    assert len(outcome.told) > 50
    # Group commit: under this load, appends shared fsyncs.
    fsyncs = next(
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("pool_fsyncs_total")
    )
    assert fsyncs < len(entries)
