"""`pool serve` over real HTTP (API.md): verdicts, releases, state, usage, the ledger,
tokens and scopes, errors that are JSON with stable codes, probes and metrics."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from joulepool.conformance.ledger_ops import replay_bytes
from joulepool.ledger.keys import KeyPair, load_key_file
from joulepool.ledger.witness import sign_witness
from tests.support.servers import Deployment, Serve, start_serve

MJ = 10**12


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    return Deployment.create(tmp_path_factory.mktemp("api") / "d")


@pytest.fixture(scope="module")
def server(deployment: Deployment) -> Iterator[Serve]:
    serve = start_serve(deployment.folder)
    yield serve
    serve.kill()


def body(claim_id: str, ent: str, uj: int, grade: str = "HwShunt", **extra: Any) -> dict[str, Any]:
    return {
        "id": claim_id,
        "entitlement": ent,
        "gang_size": 1,
        "devices_per_member": 1,
        "estimate": {"uj": uj, "grade": grade},
        **extra,
    }


def test_a_claim_lifecycle_over_http(server: Serve, deployment: Deployment) -> None:
    with server.client(deployment.operator) as ops:
        r = ops.post("/v1/claims", json=body("life-1", "vision", 2 * MJ) | {"class": "train"})
        assert r.status_code == 200
        admit = r.json()
        assert admit["verdict"] == "admit" and admit["claim"] == "life-1"
        assert admit["reserved"] == {"uj": 2 * MJ, "grade": "HwShunt"}
        state = ops.get("/v1/claims/life-1").json()
        assert state["state"] == "running" and state["admitted_seq"] == admit["seq"]
        rel = ops.post("/v1/claims/life-1/release", json={"actual": {"uj": MJ, "grade": "HwShunt"}})
        assert rel.status_code == 200
        assert rel.json()["charged"] == {"uj": MJ, "grade": "HwShunt"}
        state = ops.get("/v1/claims/life-1").json()
        assert state["state"] == "released" and state["actual"] == {"uj": MJ, "grade": "HwShunt"}
        assert (
            ops.post(
                "/v1/claims/life-1/release", json={"actual": {"uj": 1, "grade": "HwShunt"}}
            ).json()["error"]
            == "already_released"
        )
        assert ops.post("/v1/claims", json=body("life-1", "vision", 1)).status_code == 409
        assert (
            ops.post(
                "/v1/claims/nobody/release", json={"actual": {"uj": 1, "grade": "HwShunt"}}
            ).status_code
            == 404
        )
        assert ops.get("/v1/claims/never-admitted").status_code == 404


def test_queue_and_deny_are_verdicts_with_reasons(server: Serve, deployment: Deployment) -> None:
    with server.client(deployment.operator) as ops:
        deny = ops.post("/v1/claims", json=body("q-1", "robotics", 1, devices_per_member=99))
        assert deny.status_code == 200
        assert deny.json() == {
            "claim": "q-1",
            "verdict": "deny",
            "reason": "devices_exceed_guarantee",
        }
        queue = ops.post("/v1/claims", json=body("q-2", "robotics", 21 * MJ, "Estimator"))
        assert queue.json()["verdict"] == "deny"  # a guess beyond the whole guarantee
        assert ops.get("/v1/claims/q-1").status_code == 404  # nothing recorded


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"id": "x"}, "entitlement"),
        (body("x", "vision", 1) | {"gang_size": 1.0}, "gang_size"),
        (body("x", "vision", 1) | {"gang_size": -1}, "gang_size"),
        (body("x", "vision", 1) | {"gang_size": True}, "gang_size"),
        (body("x", "vision", 1) | {"extra": 1}, "extra"),
        # DESIGN.md §3 (pinned): null is absent only for an optional field; "" is no class.
        (body("x", "vision", 1) | {"id": None}, "id"),
        (body("x", "vision", 1) | {"class": ""}, "class"),
        (body("x", "vision", 2**64), "uj"),
        (body("x", "vision", 1) | {"estimate": {"uj": 1, "grade": "Guess"}}, "grade"),
        (body("x", "vision", 1) | {"estimate": {"uj": "1", "grade": "HwShunt"}}, "uj"),
    ],
)
def test_malformed_bodies_are_422_naming_the_field(
    server: Serve, deployment: Deployment, payload: dict[str, Any], field: str
) -> None:
    with server.client(deployment.operator) as ops:
        r = ops.post("/v1/claims", json=payload)
    assert r.status_code == 422
    assert r.json()["error"] == "invalid_input"
    assert field in r.json()["detail"]


def test_not_json_at_all_is_422(server: Serve, deployment: Deployment) -> None:
    with server.client(deployment.operator) as ops:
        r = ops.post(
            "/v1/claims", content=b"{not json", headers={"content-type": "application/json"}
        )
    assert r.status_code == 422
    assert r.json()["error"] == "invalid_input"


def test_tokens_scopes_and_the_tenants_subtree(server: Serve, deployment: Deployment) -> None:
    with server.client(None) as anonymous:
        assert anonymous.get("/v1/entitlements").status_code == 401
    with server.client("jp_not-a-token") as stranger:
        assert stranger.get("/v1/entitlements").json()["error"] == "unauthorized"
    with server.client(deployment.operator) as ops:
        ops.post("/v1/claims", json=body("vis-secret", "vision", MJ))
    with server.client(deployment.tenants["robotics"]) as robotics:
        assert (
            robotics.post("/v1/claims", json=body("rob-1", "robotics", MJ)).json()["verdict"]
            == "admit"
        )
        other = robotics.post("/v1/claims", json=body("rob-2", "vision", MJ))
        assert (other.status_code, other.json()["error"]) == (403, "forbidden")
        assert [e["id"] for e in robotics.get("/v1/entitlements").json()["entitlements"]] == [
            "robotics"
        ]
        assert robotics.get("/v1/entitlements/vision").status_code == 403
        assert robotics.get("/v1/entitlements/robotics").json()["usage"]["running_claims"] >= 1
        assert robotics.get("/v1/claims/vis-secret").status_code == 404  # not even its existence
        assert robotics.get("/v1/claims/rob-1").status_code == 200
        assert (
            robotics.post(
                "/v1/claims/rob-1/release", json={"actual": {"uj": 1, "grade": "HwShunt"}}
            ).status_code
            == 403
        )
        assert robotics.get("/v1/ledger/entries").status_code == 403
        assert robotics.post("/v1/estimates", json={"class": "train"}).status_code == 403
        assert (
            robotics.post(
                "/v1/estimates", json={"class": "train", "entitlement": "robotics"}
            ).status_code
            == 200
        )


def test_the_ledger_head_and_its_entries_verify(server: Serve, deployment: Deployment) -> None:
    with server.client(deployment.operator) as ops:
        ops.post("/v1/claims", json=body("led-1", "language", MJ))
        head = ops.get("/v1/ledger").json()
        raw = ops.get("/v1/ledger/entries", params={"from": 0})
    assert raw.headers["content-type"].startswith("application/cbor-seq")
    key = load_key_file(deployment.folder / "steward.pub")
    replayer = replay_bytes(raw.content, key.kid, key.public_key)
    assert (replayer.length, replayer.head.hex()) == (head["length"], head["head_hex"])
    assert head["attestation"] == "self-attested"


def test_a_witness_receipt_is_checked_kept_and_grades_the_ledger(
    server: Serve, deployment: Deployment
) -> None:
    witness = KeyPair.generate("auditor")
    steward = load_key_file(deployment.folder / "steward.pub")
    with server.client(deployment.operator) as ops:
        head = ops.get("/v1/ledger").json()
        receipt = sign_witness(
            witness,
            "steward",
            bytes.fromhex(head["head_hex"]),
            head["length"],
            0,
            steward.public_key,
        )
        payload = {
            "witness": "auditor",
            "public_key_hex": witness.public_key.hex(),
            "receipt_hex": receipt.hex(),
        }
        ok = ops.post("/v1/witness-receipts", json=payload)
        assert ok.status_code == 200 and ok.json()["attestation"] == "witnessed"
        wrong = dict(payload, receipt_hex=sign_witness(witness, "steward", bytes(32), 1, 0).hex())
        assert (
            (ops.post("/v1/witness-receipts", json=wrong).json()["error"])
            == "covers_different_head"
        )
        listed = ops.get("/v1/witness-receipts").json()["receipts"]
        assert [r["witness"] for r in listed] == ["auditor"]
        graded = ops.get("/v1/ledger").json()
        assert (
            graded["attestation"] == "witnessed" and graded["witnessed_through"] == head["length"]
        )


def test_pure_decisions_over_http(server: Serve, deployment: Deployment) -> None:
    with server.client(deployment.tenants["vision"]) as client:
        shares = client.post(
            "/v1/attribution",
            json={"total": {"uj": 10, "grade": "HwShunt"}, "occupants": {"a": 1, "b": 2}},
        )
        assert shares.json() == {
            "shares": {"a": {"uj": 3, "grade": "ModelBased"}, "b": {"uj": 7, "grade": "ModelBased"}}
        }
        empty = client.post(
            "/v1/attribution", json={"total": {"uj": 10, "grade": "HwShunt"}, "occupants": {}}
        )
        assert (empty.status_code, empty.json()["error"]) == (422, "no_occupants")
        order = client.post(
            "/v1/preemption-order",
            json={
                "workloads": [
                    {"key": "x", "spent_uj": 10, "completed_units": 0, "priority": 1},
                    {"key": "y", "spent_uj": 10, "completed_units": 4, "priority": 9},
                ]
            },
        ).json()
        assert order == {"order": ["y", "x"], "costs": {"x": None, "y": "5/2"}}
        idle = client.post(
            "/v1/idle",
            json={
                "workloads": [
                    {
                        "key": "w",
                        "held_devices": 1,
                        "observed_us": 10,
                        "energy": {"uj": 0, "grade": "HwShunt"},
                    }
                ]
            },
        ).json()
        assert idle["verdicts"]["w"]["reason"] == "unconfigured"  # the deployment's own policy


def test_probes_and_metrics(server: Serve, deployment: Deployment) -> None:
    with server.client(deployment.operator) as ops:
        text = ops.get("/metrics").text
    assert (
        "pool_verdicts_total" in text
        and 'pool_committed_joules{entitlement="vision",parent="research"}' in text
    )
    assert "pool_fsyncs_total" in text
    with server.client(None) as anyone:
        assert anyone.get("/healthz").json() == {"status": "ok"}
        assert anyone.get("/readyz").json()["status"] == "ready"
        assert anyone.get("/metrics").status_code == 401  # API.md, Additions
        assert anyone.get("/openapi.json").json()["paths"]["/v1/claims"]
    with server.client(deployment.operator) as ops:
        assert ops.get("/no/such/path").json()["error"] == "not_found"
