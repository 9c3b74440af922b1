"""Bridge tokens over a real `pool serve` (docs/api.md, Tokens): a `bridge:<entitlement>`
token admits, reads, reports and releases the claims of its subtree, with the ids it sends
kept as they are; outside its subtree it meets what a tenant outside its own meets, and
everywhere else a 403; `GET /v1/token` tells any token its own scope."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from joulepool.bridges.slurm.config import PoolUnreachable
from joulepool.bridges.slurm.jobs import PoolClient
from joulepool.deployment.init import init_deployment
from tests.support.servers import Deployment, Serve, start_serve

J = 10**6


def claim(claim_id: str, entitlement: str = "vision", uj: int = 1_000 * J) -> dict[str, object]:
    return {
        "id": claim_id,
        "entitlement": entitlement,
        "gang_size": 1,
        "devices_per_member": 1,
        "estimate": {"uj": uj, "grade": "HwShunt"},
    }


def reading(uj: int) -> dict[str, object]:
    """A meter reading as the bridge's agent posts one (DESIGN.md §7)."""
    at_ms = time.time_ns() // 1_000_000
    return {"at_ms": at_ms, "energy": {"uj": uj, "grade": "HwShunt"}, "every_ms": 30_000}


def slurm_id() -> str:
    """An id as the Slurm bridge makes them (docs/slurm.md): `slurm-<cluster>-<uuid>`."""
    return f"slurm-pooltest-{uuid.uuid4()}"


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Deployment, Serve, dict[str, str]]]:
    d = Deployment.create(tmp_path_factory.mktemp("bridge-tokens") / "d")
    bridges = {
        "vision": d.add_token("slurm-vision", "bridge:vision"),
        "tree": d.add_token("slurm-all", "bridge"),
    }
    serve = start_serve(d.folder)
    try:
        yield d, serve, bridges
    finally:
        serve.kill()


def test_a_bridge_token_admits_reads_reports_and_releases_in_its_subtree(
    served: tuple[Deployment, Serve, dict[str, str]],
) -> None:
    d, serve, bridges = served
    cid = slurm_id()
    with serve.client(bridges["vision"]) as bridge, serve.client(d.operator) as ops:
        r = bridge.post("/v1/claims?with=claim_token", json=claim(cid))
        assert r.status_code == 200, r.text
        assert r.json()["verdict"] == "admit" and r.json()["claim"] == cid
        assert r.json()["claim_token"]  # for the job's environment, as an operator gets
        # Recorded under the id sent, not in a namespace: the operator names it the same.
        assert ops.get(f"/v1/claims/{cid}").json()["state"] == "running"
        state = bridge.get(f"/v1/claims/{cid}")
        assert state.status_code == 200 and state.json()["claim"] == cid
        listed = bridge.get("/v1/claims", params={"state": "running"}).json()["claims"]
        assert cid in [c["claim"] for c in listed]
        # The team sees its job's claim by the same id; another team does not see it.
        with serve.client(d.tenants["vision"]) as team:
            assert team.get(f"/v1/claims/{cid}").json()["claim"] == cid
        with serve.client(d.tenants["language"]) as other:
            assert other.get(f"/v1/claims/{cid}").status_code == 404

        r = bridge.post(f"/v1/claims/{cid}/readings", json=reading(5 * J))
        assert r.status_code == 200, r.text
        live = bridge.get(f"/v1/claims/{cid}").json()["live"]
        assert live["energy_uj"] == 5 * J

        # A meter's figure far above the reservation: refused, then charged on the
        # bridge's override, logged with the bridge token's name.
        eleven = {"actual": {"uj": 11_000 * J, "grade": "HwShunt"}}
        r = bridge.post(f"/v1/claims/{cid}/release", json=eleven)
        assert r.status_code == 422 and r.json()["error"] == "implausible_actual"
        assert ops.get(f"/v1/claims/{cid}").json()["state"] == "running"
        r = bridge.post(f"/v1/claims/{cid}/release", json={**eleven, "override": True})
        assert r.status_code == 200, r.text
        assert r.json()["charged"] == {"uj": 11_000 * J, "grade": "HwShunt"}
        assert bridge.get(f"/v1/claims/{cid}").json()["state"] == "released"
    said = serve.output()
    assert "release override far_above_reservation by slurm-vision" in said
    (access,) = [x for x in said.splitlines() if f"/v1/claims/{cid}/release" in x and "200" in x]
    assert "slurm-vision" in access and "verdict=released:override:" in access


def test_a_bridge_token_outside_its_subtree_meets_what_a_tenant_does(
    served: tuple[Deployment, Serve, dict[str, str]],
) -> None:
    d, serve, bridges = served
    theirs = slurm_id()
    with serve.client(bridges["vision"]) as bridge, serve.client(d.operator) as ops:
        assert ops.post("/v1/claims", json=claim(theirs, "language")).json()["verdict"] == "admit"
        never = slurm_id()
        # Another subtree's claim is answered exactly as one that never was.
        for method, path, body in (
            ("GET", "/v1/claims/{}", None),
            ("POST", "/v1/claims/{}/release", {"actual": {"uj": J, "grade": "HwShunt"}}),
            ("POST", "/v1/claims/{}/readings", reading(J)),
        ):
            seen = bridge.request(method, path.format(theirs), json=body)
            unseen = bridge.request(method, path.format(never), json=body)
            assert seen.status_code == unseen.status_code == 404, (path, seen.text)
            assert seen.json()["error"] == unseen.json()["error"] == "unknown_claim"
        assert ops.get(f"/v1/claims/{theirs}").json()["state"] == "running"
        listed = bridge.get("/v1/claims").json()["claims"]
        assert theirs not in [c["claim"] for c in listed]
        assert all(c["entitlement"] == "vision" for c in listed)

        r = bridge.post("/v1/claims", json=claim(slurm_id(), "language"))
        assert r.status_code == 403 and r.json()["error"] == "forbidden"
        # Its ids are one namespace with the operator's (docs/api.md, Tokens): an id taken
        # outside its subtree is taken, and that is all the answer says.
        r = bridge.post("/v1/claims", json=claim(theirs))
        assert r.status_code == 409 and r.json()["error"] == "claim_exists"
        assert "language" not in r.text
        r = bridge.get("/v1/claims", params={"entitlement": "language"})
        assert r.status_code == 403
        r = bridge.post("/v1/estimates", json={"class": "train", "entitlement": "language"})
        assert r.status_code == 403
        assert bridge.get("/v1/entitlements/language").status_code == 403
        ids = [e["id"] for e in bridge.get("/v1/entitlements").json()["entitlements"]]
        assert ids == ["vision"]
        # A `/` would write in a tenant's namespace, which only the service does.
        r = bridge.post("/v1/claims", json=claim("vision/x"))
        assert r.status_code == 422 and r.json()["error"] == "invalid_input"


def test_a_bridge_token_reads_and_reports_the_acts_of_its_subtree_only(
    served: tuple[Deployment, Serve, dict[str, str]],
) -> None:
    """The bridge carries acts out (DESIGN.md §7): it reads what is due for its own
    subtree's claims and reports what it did for them, and for no other."""
    d, serve, bridges = served
    mine, theirs = slurm_id(), slurm_id()
    with serve.client(bridges["vision"]) as bridge, serve.client(d.operator) as ops:
        assert bridge.post("/v1/claims", json=claim(mine)).json()["verdict"] == "admit"
        assert ops.post("/v1/claims", json=claim(theirs, "language")).json()["verdict"] == "admit"
        # Both past their reservation of 1,000 J: under the default policy each is reported.
        assert bridge.post(f"/v1/claims/{mine}/readings", json=reading(2_000 * J)).is_success
        assert ops.post(f"/v1/claims/{theirs}/readings", json=reading(2_000 * J)).is_success
        due = bridge.get("/v1/actions/due")
        assert due.status_code == 200, due.text
        claims = {item["claim"] for item in due.json()["due"]}
        assert mine in claims and theirs not in claims
        # Both were due at that moment: the service logged both reports; the bridge's answer
        # held only its own.
        actions = ops.get("/v1/actions", params={"kind": "report"}).json()["actions"]
        assert {mine, theirs} <= {a["claim"] for a in actions}
        report = {"kind": "notice", "outcome": "done", "job": "42"}
        r = bridge.post("/v1/actions", json={"claim": mine, **report})
        assert r.status_code == 200 and r.json()["new"] is True, r.text
        r = bridge.post("/v1/actions", json={"claim": theirs, **report})
        assert r.status_code == 404 and r.json()["error"] == "unknown_claim", r.text
        kinds = [
            a["claim"] for a in ops.get("/v1/actions", params={"kind": "notice"}).json()["actions"]
        ]
        assert mine in kinds and theirs not in kinds
        # A requeued job's earlier run, kept and read back at its release (§6.2).
        run = {"kind": "run", "outcome": "recorded", "detail": "run 1"}
        energy = {"energy": {"uj": 700 * J, "grade": "HwShunt"}}
        assert bridge.post("/v1/actions", json={"claim": mine, **run, **energy}).is_success
        assert ops.post("/v1/actions", json={"claim": theirs, **run, **energy}).is_success
        for claim_id, seen in ((mine, 1), (theirs, 0)):
            got = bridge.get("/v1/actions", params={"claim": claim_id, "kind": "run"})
            assert got.status_code == 200, got.text
            assert len(got.json()["actions"]) == seen
        assert bridge.get("/v1/actions", params={"entitlement": "language"}).status_code == 403


def test_a_whole_tree_bridge_token_acts_on_every_entitlement(
    served: tuple[Deployment, Serve, dict[str, str]],
) -> None:
    _, serve, bridges = served
    with serve.client(bridges["tree"]) as bridge:
        for team in ("vision", "language", "robotics"):
            cid = slurm_id()
            r = bridge.post("/v1/claims", json=claim(cid, team))
            assert r.status_code == 200 and r.json()["verdict"] == "admit", r.text
            r = bridge.post(
                f"/v1/claims/{cid}/release", json={"actual": {"uj": J, "grade": "HwShunt"}}
            )
            assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/ledger"),
        ("GET", "/v1/ledger/entries"),
        ("GET", "/v1/ledger/keys"),
        ("GET", "/tile/entries/000"),
        ("GET", "/metrics"),
        ("GET", "/v1/dashboard"),
        ("GET", "/v1/witness-receipts"),
        ("POST", "/v1/witness-receipts"),
        ("POST", "/v1/preemption-order"),
        ("POST", "/v1/idle"),
        ("POST", "/v1/attribution"),
        ("GET", "/v1/proof/consistency?from=0"),
        ("POST", "/v1/claims/x/progress"),
    ],
)
def test_a_bridge_token_is_refused_everywhere_but_the_claim_routes(
    served: tuple[Deployment, Serve, dict[str, str]], method: str, path: str
) -> None:
    d, serve, bridges = served
    for token in bridges.values():
        with serve.client(token) as bridge:
            r = bridge.request(method, path, json={} if method == "POST" else None)
            assert r.status_code == 403, (path, r.text)
            assert r.json()["error"] == "forbidden"
    with serve.client(d.operator) as ops:  # the route is there: the scope is what refuses
        assert ops.request(method, path, json={} if method == "POST" else None).status_code != 403


def test_a_tenant_token_still_may_neither_release_nor_report_readings(
    served: tuple[Deployment, Serve, dict[str, str]],
) -> None:
    d, serve, _ = served
    with serve.client(d.tenants["vision"]) as tenant:
        assert tenant.post("/v1/claims", json=claim("own")).json()["verdict"] == "admit"
        r = tenant.post("/v1/claims/own/release", json={"actual": {"uj": J, "grade": "HwShunt"}})
        assert r.status_code == 403
        r = tenant.post("/v1/claims/own/readings", json=reading(J))
        assert r.status_code == 403


def test_get_token_names_the_callers_own_scope(
    served: tuple[Deployment, Serve, dict[str, str]],
) -> None:
    d, serve, bridges = served
    for token, name, scope in (
        (bridges["vision"], "slurm-vision", "bridge:vision"),
        (bridges["tree"], "slurm-all", "bridge"),
        (d.tenants["language"], "language", "tenant:language"),
        (d.operator, "ops", "operator"),
    ):
        with serve.client(token) as client:
            assert client.get("/v1/token").json() == {"name": name, "scope": scope}
    with serve.client(None) as anonymous:
        assert anonymous.get("/v1/token").status_code == 401


def test_the_bridge_client_reads_the_ledger_length_with_a_bridge_token(
    served: tuple[Deployment, Serve, dict[str, str]], tmp_path: Path
) -> None:
    d, serve, bridges = served
    with serve.client(d.operator) as ops:
        length = ops.get("/v1/ledger").json()["length"]
    # The checkpoint is signed at most a second before it is served: it catches up.
    client, deadline = PoolClient(serve.url, bridges["vision"], 10.0), time.monotonic() + 5
    while (seen := client.ledger_length()) != length:
        assert seen < length and time.monotonic() < deadline, (seen, length)
        time.sleep(0.1)
    # A steward id no checkpoint can carry as its origin: no checkpoint is served, and an
    # operator token still has the length from the ledger's head; a bridge token is told why.
    init_deployment(tmp_path / "d", "steward one")
    lone = Deployment(tmp_path / "d", "")
    lone.operator = lone.add_token("ops", "operator")
    narrow = lone.add_token("slurm", "bridge:vision")
    other = start_serve(lone.folder)
    try:
        assert PoolClient(other.url, lone.operator, 10.0).ledger_length() == 0
        with pytest.raises(PoolUnreachable, match=r"/checkpoint: HTTP 503.*/v1/ledger: HTTP 403"):
            PoolClient(other.url, narrow, 10.0).ledger_length()
    finally:
        other.kill()
