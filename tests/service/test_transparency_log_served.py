"""The ledger as a C2SP transparency log, served by a real `pool serve` (API.md
"Transparency", DESIGN.md §8): the checkpoint verifies under `pool keys vkey`, tiles are the
bytes `pool ledger tiles` writes, claim proofs and consistency proofs verify against the
checkpoints they carry, and every hostile parameter is a typed 4xx."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from joulepool.ledger.checkpoint import open_checkpoint
from joulepool.ledger.merkle import leaf_hash, verify_consistency, verify_inclusion
from joulepool.ledger.note import VerifierKey
from joulepool.ledger.tiles import TileReader
from tests.support.servers import Deployment, Serve, admit_and_release, pool_cli, serving

CLAIMS = 140  # 280 entries: one full level-0 tile and a partial one


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Deployment, Serve]]:
    run = serving(tmp_path_factory.mktemp("tlog") / "d")
    deployment, serve = next(run)
    admit_and_release(serve, deployment.operator, 0, CLAIMS, 1_000)
    with serve.client(deployment.tenants["language"]) as lang:
        body = {
            "id": "lang-1",
            "entitlement": "language",
            "gang_size": 1,
            "devices_per_member": 1,
            "estimate": {"uj": 10, "grade": "HwShunt"},
        }
        assert lang.post("/v1/claims", json=body).json()["seq"] == 2 * CLAIMS
    yield deployment, serve
    run.close()


def _vkey(folder: Path) -> VerifierKey:
    out = pool_cli("keys", "vkey", str(folder))
    assert out.returncode == 0, out.stderr
    return VerifierKey.parse(out.stdout.strip())


def test_the_checkpoint_verifies_under_the_published_verifier_key(
    served: tuple[Deployment, Serve],
) -> None:
    deployment, serve = served
    with serve.client(None) as anyone:
        answer = anyone.get("/checkpoint")
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "text/plain; charset=utf-8"
    opened = open_checkpoint(answer.content, _vkey(deployment.folder), origin="joulepool/steward")
    assert opened.checkpoint.size == 2 * CLAIMS + 1
    with serve.client(deployment.operator) as ops:
        assert ops.get("/v1/ledger").json()["length"] == opened.checkpoint.size


def test_served_tiles_are_the_bytes_pool_ledger_tiles_writes(
    served: tuple[Deployment, Serve], tmp_path: Path
) -> None:
    deployment, serve = served
    out = tmp_path / "static"
    written = pool_cli("ledger", "tiles", str(deployment.folder), str(out), "--json")
    assert written.returncode == 0, written.stderr
    files = sorted(p for p in (out / "tile").rglob("*") if p.is_file())
    # 0/000, 0/001.p/25, 1/000.p/1, entries/000, entries/001.p/25
    assert len(files) == 5
    with serve.client(None) as anyone, serve.client(deployment.operator) as ops:
        for path in files:
            rel = path.relative_to(out).as_posix()
            client = ops if "/entries/" in rel else anyone
            got = client.get("/" + rel)
            assert got.status_code == 200, (rel, got.text)
            assert got.content == path.read_bytes(), rel
        # The static checkpoint is for the same tree as the served one.
        served_note = open_checkpoint(anyone.get("/checkpoint").content, _vkey(deployment.folder))
    static_note = open_checkpoint((out / "checkpoint").read_bytes(), _vkey(deployment.folder))
    assert static_note.checkpoint == served_note.checkpoint
    # A reader over the static files computes the same root.
    reader = TileReader(lambda p: (out / p).read_bytes(), static_note.checkpoint.size)
    assert reader.root() == static_note.checkpoint.root_hash


def test_entry_bundles_need_an_operator_and_hash_tiles_need_no_token(
    served: tuple[Deployment, Serve],
) -> None:
    deployment, serve = served
    with serve.client(None) as anyone, serve.client(deployment.tenants["vision"]) as tenant:
        assert anyone.get("/tile/0/000").status_code == 200
        assert anyone.get("/tile/entries/000").status_code == 401
        refused = tenant.get("/tile/entries/000")
        assert (refused.status_code, refused.json()["error"]) == (403, "forbidden")
        for bad, code in (
            ("/tile/0/1", "invalid_input"),
            ("/tile/0/000.p/0", "invalid_input"),
            ("/tile/0/000.p/256", "invalid_input"),
            ("/tile/x/000", "invalid_input"),
            ("/tile/0/" + "x999/" * 9 + "999", "invalid_input"),
            ("/tile/0/001.p/26", "tile_not_found"),
            ("/tile/0/002", "tile_not_found"),
            ("/tile/1/000.p/2", "tile_not_found"),
            ("/tile/2/000.p/1", "tile_not_found"),
            ("/tile/70/000", "invalid_input"),
        ):
            got = anyone.get(bad)
            assert got.status_code in (404, 422), (bad, got.status_code, got.text)
            assert got.json()["error"] == code, (bad, got.text)


def _b64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def test_a_claims_proof_verifies_against_its_checkpoint(served: tuple[Deployment, Serve]) -> None:
    deployment, serve = served
    vkey = _vkey(deployment.folder)
    with serve.client(deployment.tenants["vision"]) as vision:
        answer = vision.get("/v1/claims/job-7/proof")
    assert answer.status_code == 200, answer.text
    proof = answer.json()
    assert set(proof) == {"claim", "checkpoint", "entries"} and proof["claim"] == "job-7"
    checkpoint = open_checkpoint(proof["checkpoint"], vkey).checkpoint
    assert [(e["event"], e["index"]) for e in proof["entries"]] == [
        ("admitted", 14),
        ("released", 15),
    ]
    for e in proof["entries"]:
        assert set(e) == {"event", "index", "entry_b64", "inclusion_b64"}
        ok = verify_inclusion(
            leaf_hash(_b64(e["entry_b64"])),
            e["index"],
            checkpoint.size,
            [_b64(h) for h in e["inclusion_b64"]],
            checkpoint.root_hash,
        )
        assert ok, e
    with serve.client(deployment.tenants["language"]) as lang:
        own = lang.get("/v1/claims/lang-1/proof").json()
        assert [(e["event"], e["index"]) for e in own["entries"]] == [("admitted", 2 * CLAIMS)]
        # Another subtree's claim is answered exactly as GET /v1/claims/{id} answers it.
        hidden = lang.get("/v1/claims/job-7/proof")
        state = lang.get("/v1/claims/job-7")
        assert (hidden.status_code, hidden.json()) == (state.status_code, state.json())
        assert hidden.status_code == 404


def test_consistency_proofs_verify_and_hostile_sizes_are_typed_422(
    served: tuple[Deployment, Serve],
) -> None:
    deployment, serve = served
    vkey = _vkey(deployment.folder)
    with serve.client(deployment.tenants["robotics"]) as anyone:
        size = open_checkpoint(anyone.get("/checkpoint").content, vkey).checkpoint.size
        old = anyone.get("/v1/proof/consistency", params={"from": 3, "to": 3}).json()
        old_root = open_checkpoint(old["checkpoint"], vkey).checkpoint.root_hash
        for frm, to in ((3, None), (3, 257), (256, size), (size, size)):
            params = {"from": frm} if to is None else {"from": frm, "to": to}
            got = anyone.get("/v1/proof/consistency", params=params)
            assert got.status_code == 200, got.text
            body = got.json()
            assert set(body) == {"from", "to", "checkpoint", "proof_b64"}
            assert (body["from"], body["to"]) == (frm, to or size)
            new = open_checkpoint(body["checkpoint"], vkey).checkpoint
            assert new.size == body["to"]
            if frm == 3:
                assert verify_consistency(
                    3, new.size, old_root, new.root_hash, [_b64(h) for h in body["proof_b64"]]
                )
        hostile: list[tuple[dict[str, Any], str]] = [
            ({"from": size + 1}, "from"),
            ({"from": 5, "to": 4}, "from"),
            ({"from": -1}, "from"),
            ({"from": 0}, "from"),
            ({"from": "1e3"}, "from"),
            ({"from": "9" * 40}, "from"),
            ({"from": 1, "to": size + 1}, "to"),
            ({"to": 3}, "from"),
            ({"from": ["1", "2"]}, "from"),
        ]
        for params, field in hostile:
            got = anyone.get("/v1/proof/consistency", params=params)
            assert got.status_code == 422, (params, got.text)
            assert got.json()["error"] == "invalid_input"
            assert got.json()["detail"].startswith(field), (params, got.text)


def test_admission_seq_is_the_entrys_leaf_index(served: tuple[Deployment, Serve]) -> None:
    """`seq` in an admission answer is the 0-based leaf index of its entry in the tree; an
    operator names a tenant's claim by its ledger id, namespace included."""
    deployment, serve = served
    with serve.client(deployment.operator) as ops:
        proof = ops.get("/v1/claims/language/lang-1/proof").json()
        state = ops.get("/v1/claims/language/lang-1").json()
    assert proof["claim"] == "language/lang-1"
    assert proof["entries"][0]["index"] == state["admitted_seq"] == 2 * CLAIMS


def test_a_tenants_claim_named_proof_is_still_read_by_its_ledger_id(
    served: tuple[Deployment, Serve],
) -> None:
    """`GET /v1/claims/<root>/proof` was the state of a tenant's claim named `proof` before
    the proof route; where no claim `<root>` exists, it still is."""
    deployment, serve = served
    with serve.client(deployment.tenants["robotics"]) as robotics:
        body = {
            "id": "proof",
            "entitlement": "robotics",
            "gang_size": 1,
            "devices_per_member": 1,
            "estimate": {"uj": 10, "grade": "HwShunt"},
        }
        assert robotics.post("/v1/claims", json=body).json()["verdict"] == "admit"
        assert robotics.get("/v1/claims/proof/proof").json()["entries"][0]["event"] == "admitted"
    with serve.client(deployment.operator) as ops:
        state = ops.get("/v1/claims/robotics/proof")
        assert state.status_code == 200, state.text
        assert state.json()["claim"] == "robotics/proof" and state.json()["state"] == "running"


@pytest.mark.parametrize("claim", ["%00", "a" * 5000, "%FF%FE", "..%2F..", "x/y/z", "%E2%80%AE"])
def test_a_hostile_claim_id_is_answered_as_the_claims_state_answers_it(
    served: tuple[Deployment, Serve], claim: str
) -> None:
    deployment, serve = served
    with serve.client(deployment.tenants["vision"]) as tenant:
        proof = tenant.get(f"/v1/claims/{claim}/proof")
        state = tenant.get(f"/v1/claims/{claim}")
    assert proof.status_code < 500 and state.status_code < 500
    assert (proof.status_code, proof.json()["error"]) == (state.status_code, state.json()["error"])
