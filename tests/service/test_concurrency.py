"""Many clients at once against one `pool serve` (issue 5): the ledger replays to exactly
the usage the service reports, every admission a client was told of is in it at the index
it was told, and the ledger is a valid serial history (a sequential oracle re-decides it)."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from joulepool.deployment import CONFIG, read_config
from joulepool.ledger.keys import load_key_file
from tests.servers import Deployment, Serve, start_serve
from tests.service.oracle import replay_with_oracle

MJ = 10**12
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
    told: dict[str, int] = {}
    errors: list[str] = []
    lock = threading.Lock()

    def client(n: int) -> None:
        rng = random.Random(n)
        running: list[str] = []
        with serve.client(deployment.operator) as http:
            for i in range(OPS_PER_CLIENT):
                if running and rng.random() < 0.45:
                    cid = running.pop(rng.randrange(len(running)))
                    actual = rng.randrange(0, 3 * MJ)
                    r = http.post(
                        f"/v1/claims/{cid}/release",
                        json={
                            "actual": {
                                "uj": actual,
                                "grade": rng.choice(["HwShunt", "ModelBased", "Estimator"]),
                            }
                        },
                    )
                    if r.status_code != 200:
                        errors.append(f"release {cid}: {r.status_code} {r.text}")
                    continue
                cid = f"c{n}-{i}"
                payload = {
                    "id": cid,
                    "entitlement": rng.choice(["vision", "language", "robotics"]),
                    "gang_size": rng.randrange(1, 3),
                    "devices_per_member": rng.randrange(1, 3),
                    "estimate": {
                        "uj": rng.randrange(1, 8) * MJ,
                        "grade": rng.choice(["HwShunt", "ModelBased", "Estimator"]),
                    },
                }
                r = http.post("/v1/claims", json=payload)
                if r.status_code != 200:
                    errors.append(f"submit {cid}: {r.status_code} {r.text}")
                    continue
                verdict = r.json()
                if verdict["verdict"] == "admit":
                    running.append(cid)
                    with lock:
                        told[cid] = verdict["seq"]

    threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with serve.client(deployment.operator) as http:
        reported = {
            e["id"]: e["usage"] for e in http.get("/v1/entitlements").json()["entitlements"]
        }
        raw = http.get("/v1/ledger/entries").content
        metrics = http.get("/metrics").text
    from joulepool.ledger.operations import split_ledger

    entries, tail = split_ledger(raw)
    assert tail is None
    key = load_key_file(deployment.folder / "steward.pub")
    tree = read_config(deployment.folder / CONFIG).tree
    replayer = replay_with_oracle(entries, tree, key.kid, key.public_key)
    for ent in tree:
        fig = replayer.state.usage.of(ent.id)
        assert reported[ent.id] == {
            "spent_uj": fig.spent_uj,
            "reserved_uj": fig.reserved_uj,
            "borrowed_uj": fig.borrowed_uj(ent.guarantee_uj),
            "held_devices": fig.held_devices,
            "running_claims": fig.running_claims,
        }
        assert fig.held_devices <= ent.guarantee_devices
    from joulepool.ledger.cose import open_envelope

    at = {
        open_envelope(e).core["claim"]: i
        for i, e in enumerate(entries)
        if open_envelope(e).core["event"] == "admitted"
    }
    assert {
        cid: at[cid] for cid in told
    } == told  # every Admit a client was told is there, where it was told
    assert len(told) > 50
    # Group commit: under this load, appends shared fsyncs.
    fsyncs = next(
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("pool_fsyncs_total")
    )
    assert fsyncs <= len(entries)
