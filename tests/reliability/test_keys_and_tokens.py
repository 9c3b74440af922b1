"""Keys and tokens: a secret key file readable by others is refused; a token for
one subtree can neither read nor change another's; a ledger sealed by a different key is
refused at index 0. All through real `pool serve` and `pool` processes.
Earlier, narrower checks: tests/service/test_api.py::test_tokens_scopes_and_the_tenants_subtree.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from joulepool.deployment.config import KEY, LEDGER, PUBLIC_KEY
from joulepool.ledger.keys import KeyPair, load_key_file, write_key_file
from tests.support.faults import Figures, claim
from tests.support.servers import Deployment, Serve, pool_cli, start_serve

_figures = Figures("keys_and_tokens")


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660, 0o666])
def test_a_secret_key_readable_by_others_is_refused(tmp_path: Path, mode: int) -> None:
    deployment = Deployment.create(tmp_path / "d")
    os.chmod(deployment.folder / KEY, mode)
    serve = start_serve(deployment.folder, wait=False)
    code = serve.proc.wait(timeout=60)
    out = serve.output()
    assert code != 0, out
    assert f"{mode:04o}" in out and str(deployment.folder / KEY) in out, out
    assert "Traceback" not in out, out
    # The library refuses it too, for any command that signs.
    with pytest.raises(Exception, match=f"{mode:04o}"):
        load_key_file(deployment.folder / KEY, require_secret=True)
    # 0600 is accepted, and the public key may be read by anyone.
    os.chmod(deployment.folder / KEY, 0o600)
    assert (deployment.folder / PUBLIC_KEY).stat().st_mode & 0o777 == 0o644
    load_key_file(deployment.folder / KEY, require_secret=True)
    _figures.faults_injected += 1


@pytest.fixture(scope="module")
def nested(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Deployment, Serve]]:
    """The example tree (research > vision, language, robotics) with a token per node."""
    deployment = Deployment.create(tmp_path_factory.mktemp("tokens") / "d")
    deployment.tenants["research"] = deployment.add_token("research", "tenant:research")
    serve = start_serve(deployment.folder)
    with serve.client(deployment.operator) as ops:
        for team in ("vision", "language", "robotics"):
            assert (
                ops.post("/v1/claims", json=claim(f"{team}-own", team)).json()["verdict"] == "admit"
            )
    yield deployment, serve
    serve.kill()


TEAMS = ("vision", "language", "robotics")


@pytest.mark.parametrize("tenant", TEAMS)
def test_a_tenant_token_can_neither_read_nor_change_another_subtree(
    nested: tuple[Deployment, Serve], tenant: str
) -> None:
    deployment, serve = nested
    with serve.client(deployment.operator) as ops:
        before = ops.get("/v1/ledger").json()
        usage_before = ops.get("/v1/entitlements").json()
    attempts = 0
    with serve.client(deployment.tenants[tenant]) as http:
        for other in [t for t in TEAMS if t != tenant] + ["research"]:
            probes: list[tuple[httpx.Response, int, str]] = [
                (
                    http.post("/v1/claims", json=claim(f"{tenant}-in-{other}", other)),
                    403,
                    "forbidden",
                ),
                (http.get(f"/v1/entitlements/{other}"), 403, "forbidden"),
                (
                    http.post("/v1/estimates", json={"class": "x", "entitlement": other}),
                    403,
                    "forbidden",
                ),
            ]
            if other != "research":
                probes += [
                    # Not even its existence: the same answer as for a claim that is not there.
                    (http.get(f"/v1/claims/{other}-own"), 404, "unknown_claim"),
                    (
                        http.post(
                            f"/v1/claims/{other}-own/release",
                            json={"actual": {"uj": 1, "grade": "HwShunt"}},
                        ),
                        403,
                        "forbidden",
                    ),
                ]
            for response, status, code in probes:
                assert (response.status_code, response.json()["error"]) == (status, code), (
                    other,
                    response.request.url,
                    response.text,
                )
                attempts += 1
            if other != "research":
                # A foreign claim is answered exactly as one that does not exist.
                foreign = http.get(f"/v1/claims/{other}-own").json()
                absent = http.get(f"/v1/claims/{other}-nope").json()
                assert foreign["detail"].replace("-own", "-nope") == absent["detail"]
                assert foreign["error"] == absent["error"] == "unknown_claim"
        # Operator-only surfaces: the raw ledger, witness receipts, releases (even its own).
        for response in (
            http.get("/v1/ledger/entries"),
            http.post(
                "/v1/witness-receipts",
                json={"witness": "w", "public_key_hex": "0" * 64, "receipt_hex": "00"},
            ),
            http.post(
                f"/v1/claims/{tenant}-own/release", json={"actual": {"uj": 1, "grade": "HwShunt"}}
            ),
        ):
            assert (response.status_code, response.json()["error"]) == (403, "forbidden")
            attempts += 1
        listed = [e["id"] for e in http.get("/v1/entitlements").json()["entitlements"]]
        assert listed == [tenant]
        assert http.get(f"/v1/claims/{tenant}-own").json()["state"] == "running"
    with serve.client(deployment.operator) as ops:
        assert ops.get("/v1/ledger").json() == before  # nothing was changed
        assert ops.get("/v1/entitlements").json() == usage_before
        for other in TEAMS:
            assert ops.get(f"/v1/claims/{other}-own").json()["state"] == "running"
    _figures.rounds += 1
    _figures.faults_injected += attempts


def test_a_parent_token_reaches_its_whole_subtree_and_nothing_else(
    nested: tuple[Deployment, Serve],
) -> None:
    deployment, serve = nested
    with serve.client(deployment.tenants["research"]) as http:
        for team in TEAMS:
            assert http.get(f"/v1/claims/{team}-own").status_code == 200
        r = http.post("/v1/claims", json=claim("research-in-vision", "vision"))
        assert r.json()["verdict"] == "admit"
        assert http.get("/v1/ledger/entries").status_code == 403
    with serve.client(None) as anonymous:
        assert anonymous.get("/v1/claims/vision-own").status_code == 401
    with serve.client("jp_" + "0" * 43) as stranger:
        r = stranger.post("/v1/claims", json=claim("stranger", "vision"))
        assert (r.status_code, r.json()["error"]) == (401, "unauthorized")


@pytest.mark.parametrize("kid", ["steward", "impostor"])
def test_a_ledger_sealed_by_a_different_key_is_refused_at_index_0(tmp_path: Path, kid: str) -> None:
    deployment = Deployment.create(tmp_path / "d")
    serve = start_serve(deployment.folder)
    with serve.client(deployment.operator) as ops:
        for i in range(3):
            assert (
                ops.post("/v1/claims", json=claim(f"c{i}", "vision")).json()["verdict"] == "admit"
            )
    serve.kill()
    # A second deployment whose key is another one: same steward name, or another name.
    other = Deployment.create(tmp_path / "other")
    key = KeyPair.generate(kid)
    for name in (KEY, PUBLIC_KEY):
        (other.folder / name).unlink()
    write_key_file(other.folder / KEY, key)
    write_key_file(other.folder / PUBLIC_KEY, key.public())
    if kid != "steward":
        config = (
            (other.folder / "pool.toml")
            .read_text()
            .replace('steward = "steward"', f'steward = "{kid}"')
        )
        (other.folder / "pool.toml").write_text(config)
    (other.folder / LEDGER).write_bytes((deployment.folder / LEDGER).read_bytes())
    expected = "bad_signature" if kid == "steward" else "unknown_signer"

    verify = pool_cli("ledger", "verify", str(other.folder / LEDGER), "--json")
    assert verify.returncode == 1
    assert json.loads(verify.stdout) | {"detail": ""} == {
        "ok": False,
        "index": 0,
        "error": expected,
        "detail": "",
    }
    serve = start_serve(other.folder, wait=False)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, serve.output()
            try:
                r = httpx.get(f"{serve.url}/readyz", timeout=2)
            except httpx.TransportError:
                time.sleep(0.05)
                continue
            assert r.status_code == 503
            if "replayed" not in r.json()["detail"]:
                break
            time.sleep(0.05)
        assert f"entry 0: {expected}" in r.json()["detail"], r.json()
        with serve.client(other.operator) as ops:
            refused = ops.post("/v1/claims", json=claim("after", "vision"))
        assert (refused.status_code, refused.json()["error"]) == (503, "not_ready")
    finally:
        serve.kill()
    assert (other.folder / LEDGER).read_bytes() == (deployment.folder / LEDGER).read_bytes()
    _figures.faults_injected += 1


def test_zz_record_the_figures() -> None:
    _figures.rounds = max(_figures.rounds, 1)
    _figures.entries_lost = 0
    _figures.record()
