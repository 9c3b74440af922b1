"""A concurrent load of random claims and releases against one or more `pool serve`
replicas, and the checks every such run must pass afterwards."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field

from joulepool.ledger.cose import open_envelope
from joulepool.ledger.keys import KeyPair
from joulepool.tree import Tree
from tests.support.oracle import replay_with_oracle
from tests.support.servers import Serve

MJ = 10**12
GRADES = ("HwShunt", "ModelBased", "Estimator")


@dataclass
class Outcome:
    """What the clients were told: each admission's index, and anything that went wrong."""

    told: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    releases: int = 0


def drive(
    replicas: list[Serve], token: str, tenants: list[str], clients: int, ops_per_client: int
) -> Outcome:
    """Run `clients` threads, each sending its operations to a replica chosen at random."""
    outcome = Outcome()
    lock = threading.Lock()

    def client(n: int) -> None:
        rng = random.Random(n)
        https = [r.client(token) for r in replicas]
        running: list[str] = []
        try:
            for i in range(ops_per_client):
                http = rng.choice(https)
                if running and rng.random() < 0.45:
                    cid = running.pop(rng.randrange(len(running)))
                    actual = {"uj": rng.randrange(0, 3 * MJ), "grade": rng.choice(GRADES)}
                    r = http.post(f"/v1/claims/{cid}/release", json={"actual": actual})
                    with lock:
                        if r.status_code == 200:
                            outcome.releases += 1
                        else:
                            outcome.errors.append(f"release {cid}: {r.status_code} {r.text}")
                    continue
                cid = f"c{n}-{i}"
                payload = {
                    "id": cid,
                    "entitlement": rng.choice(tenants),
                    "gang_size": rng.randrange(1, 3),
                    "devices_per_member": rng.randrange(1, 3),
                    "estimate": {"uj": rng.randrange(1, 8) * MJ, "grade": rng.choice(GRADES)},
                }
                r = http.post("/v1/claims", json=payload)
                if r.status_code != 200:
                    with lock:
                        outcome.errors.append(f"submit {cid}: {r.status_code} {r.text}")
                    continue
                verdict = r.json()
                if verdict["verdict"] == "admit":
                    running.append(cid)
                    with lock:
                        outcome.told[cid] = verdict["seq"]
        finally:
            for h in https:
                h.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcome


def check_ledger(
    entries: list[bytes], tree: Tree, key: KeyPair, outcome: Outcome, reported: dict[str, object]
) -> None:
    """The ledger is a serial history (an oracle re-decides every admission), every admission
    a client was told of is in it at the index it was told, and `reported` (an entitlement's
    usage as the service answered it) is exactly what the ledger replays to."""
    replayer = replay_with_oracle(entries, tree, key.kid, key.public_key)
    for ent in tree:
        fig = replayer.state.usage.of(ent.id)
        # The run stays inside one budget period, so it is all of the ledger (DESIGN.md §3).
        answered = reported[ent.id]
        assert isinstance(answered, dict)
        assert {k: v for k, v in answered.items() if k != "period"} == fig.to_json(
            ent.guarantee_uj
        ), ent.id
        assert fig.held_devices <= ent.guarantee_devices
    cores = [open_envelope(e).core for e in entries]
    at = {c["claim"]: i for i, c in enumerate(cores) if c["event"] == "admitted"}
    assert {cid: at.get(cid) for cid in outcome.told} == outcome.told
    assert len(set(outcome.told.values())) == len(outcome.told), "two admissions told one index"
    released = sum(1 for c in cores if c["event"] == "released")
    assert released == outcome.releases
