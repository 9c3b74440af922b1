"""`pool keys rotate`: a deployment's steward key replaced without a new ledger (DESIGN.md §4)."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

from joulepool.deployment.init import init_deployment
from joulepool.deployment.open import open_pool
from joulepool.ledger.keys import load_key_file, write_key_file
from tests.support.servers import Deployment, pool_cli, start_serve


def ok_json(*args: str) -> Any:
    proc = pool_cli(*args, "--json")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr
    return json.loads(proc.stdout)


def admit(folder: Path, claim: str) -> Any:
    return ok_json(
        "admit", str(folder), "--id", claim, "--entitlement", "vision", "--estimate-uj", "5"
    )


def test_design_s4_rotate_offline_then_verify_replay_and_witness(tmp_path: Path) -> None:
    folder = tmp_path / "dep"
    init_deployment(folder, "steward")
    first = load_key_file(folder / "steward.key")
    admit(folder, "a")
    rotated = ok_json("keys", "rotate", str(folder))
    assert rotated["state"] == "in_force"
    assert rotated["from_seq"] == 1
    key = load_key_file(folder / "steward.key")
    assert key.public_key.hex() == rotated["public_key_hex"] != first.public_key.hex()
    assert not (folder / "steward.key.next").exists()
    assert load_key_file(folder / "steward.pub").public_key == first.public_key  # the anchor
    assert admit(folder, "b")["seq"] == 1
    verified = ok_json("ledger", "verify", str(folder))
    assert (verified["length"], verified["rotations"]) == (2, 1)
    # A ledger file alone, with its first key, verifies with the statements beside it or
    # named; without them, entry 1 is under an unknown key.
    assert ok_json("ledger", "usage", str(folder / "ledger.cbor"))["length"] == 2
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    (moved / "l.cbor").write_bytes((folder / "ledger.cbor").read_bytes())
    bare = pool_cli(
        "ledger", "verify", str(moved / "l.cbor"), "--key", str(folder / "steward.pub"), "--json"
    )
    assert bare.returncode == 1
    assert (json.loads(bare.stdout)["error"], json.loads(bare.stdout)["index"]) == (
        "bad_signature",
        1,
    )
    named = ok_json(
        "ledger",
        "verify",
        str(moved / "l.cbor"),
        "--key",
        str(folder / "steward.pub"),
        "--rotations",
        str(folder / "rotations"),
    )
    assert named["length"] == 2
    # A second rotation with no entry since the first is refused; nothing changes.
    again = pool_cli("keys", "rotate", str(folder))
    assert again.returncode == 0, again.stderr
    refused = pool_cli("keys", "rotate", str(folder))
    assert refused.returncode == 1
    assert "no entry has been sealed since the last rotation" in refused.stderr
    assert not (folder / "steward.key.next").exists()
    # A witness holding a retired steward key is the steward: refused.
    sign = pool_cli(
        "witness", "sign", str(folder / "ledger.cbor"), "--witness-key", str(tmp_path / "w.key")
    )
    assert sign.returncode == 1  # no such witness key yet: an error, not a traceback
    write_key_file(tmp_path / "retired.key", first)
    retired = pool_cli(
        "witness",
        "sign",
        str(folder / "ledger.cbor"),
        "--witness-key",
        str(tmp_path / "retired.key"),
    )
    assert retired.returncode == 1
    assert "a witness must hold a key the steward does not" in retired.stderr


def test_design_s4_tampered_statement_is_bad_rotation_before_any_entry(tmp_path: Path) -> None:
    folder = tmp_path / "dep"
    init_deployment(folder, "steward")
    admit(folder, "a")
    ok_json("keys", "rotate", str(folder))
    admit(folder, "b")
    statement = folder / "rotations" / "00000000.cose"
    raw = bytearray(statement.read_bytes())
    raw[-1] ^= 1  # the signature's last byte
    statement.write_bytes(bytes(raw))
    proc = pool_cli("ledger", "verify", str(folder), "--json")
    assert proc.returncode == 1
    out = json.loads(proc.stdout)
    assert (out["ok"], out["error"], out["index"]) == (False, "bad_rotation", 0)
    # The writer refuses to start on it too: a typed error, never a traceback.
    start = pool_cli("usage", str(folder))
    assert start.returncode == 1
    assert "bad_rotation" in start.stderr and "Traceback" not in start.stderr


def test_design_s4_rotate_while_serving_takes_effect_on_sighup(tmp_path: Path) -> None:
    deployment = Deployment.create(tmp_path / "dep")
    folder = deployment.folder
    serve = start_serve(folder)
    try:
        with serve.client(deployment.tenants["vision"]) as client:

            def claim(name: str) -> Any:
                r = client.post(
                    "/v1/claims",
                    json={
                        "id": name,
                        "entitlement": "vision",
                        "gang_size": 1,
                        "devices_per_member": 1,
                        "estimate": {"uj": 5, "grade": "Estimator"},
                    },
                )
                assert r.status_code == 200, r.text
                return r.json()

            claim("before")
            pending = ok_json("keys", "rotate", str(folder))
            assert pending["state"] == "pending"
            assert pending["writer_pid"] == serve.proc.pid
            assert claim("still-old-key")["seq"] == 1
            serve.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 30
            while (folder / "steward.key.next").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not (folder / "steward.key.next").exists(), serve.output()
            assert claim("new-key")["seq"] == 2
    finally:
        serve.kill(signal.SIGTERM)
    assert "steward key rotated: the new key seals from entry 2" in serve.output()
    verified = ok_json("ledger", "verify", str(folder))
    assert (verified["length"], verified["rotations"]) == (3, 1)
    # And it restarts on the rotated key.
    again = start_serve(folder)
    again.kill(signal.SIGTERM)


def test_design_s4_an_export_carries_the_rotation_statements_a_verifier_needs(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "dep"
    init_deployment(folder, "steward")
    admit(folder, "a")
    ok_json("keys", "rotate", str(folder))
    admit(folder, "b")
    out = tmp_path / "out" / "copy.cbor"
    out.parent.mkdir()
    exported = ok_json("ledger", "export", str(out), "--file", str(folder / "ledger.cbor"))
    assert (exported["entries"], exported["rotations"]) == (2, 1)
    assert exported["rotations_out"] == f"{out}.rotations"
    assert (Path(f"{out}.rotations") / "00000000.cose").read_bytes() == (
        folder / "rotations" / "00000000.cose"
    ).read_bytes()
    verified = ok_json(
        "ledger",
        "verify",
        str(out),
        "--key",
        str(folder / "steward.pub"),
        "--rotations",
        exported["rotations_out"],
    )
    assert (verified["length"], verified["rotations"]) == (2, 1)
    # A second export onto the same name is refused unless asked, and then replaces both.
    refused = pool_cli("ledger", "export", str(out), "--file", str(folder / "ledger.cbor"))
    assert refused.returncode == 1 and "already exists" in refused.stderr
    assert "Traceback" not in refused.stderr
    (Path(f"{out}.rotations") / "00000007.cose").write_bytes(b"stale")
    again = ok_json(
        "ledger", "export", str(out), "--file", str(folder / "ledger.cbor"), "--overwrite"
    )
    assert again["rotations"] == 1
    assert sorted(p.name for p in Path(f"{out}.rotations").iterdir()) == ["00000000.cose"]


def started_from(folder: Path) -> tuple[int, list[str]]:
    """Where a start of the deployment begins its replay, and what it ignored on the way."""
    pool = open_pool(folder)
    try:
        return pool.started_from, list(pool.snapshot_warnings)
    finally:
        pool.close()


def seal_snapshot_now(folder: Path) -> int:
    pool = open_pool(folder)
    try:
        return pool.seal_snapshot()
    finally:
        pool.close()


def verify_agrees(folder: Path, length: int, snapshot_at: int) -> None:
    verified = pool_cli("ledger", "verify", str(folder), "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    report = json.loads(verified.stdout)
    assert report["length"] == length
    rows = {row["length"]: row for row in report["snapshots"]}
    assert rows[snapshot_at]["agrees"] is True, rows


def test_design_s4_a_snapshot_sealed_at_a_rotation_length_verifies_and_starts_the_pool(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "dep"
    created = pool_cli("init", str(folder))
    assert created.returncode == 0, created.stderr
    for claim in ("a", "b", "c"):
        admit(folder, claim)
    ok_json("release", str(folder), "a", "--actual", "3uJ", "--grade", "HwShunt")
    # Sealed by the outgoing key: it covers entries 0..3, all under that key.
    length = seal_snapshot_now(folder)
    assert length == 4
    rotated = ok_json("keys", "rotate", str(folder))
    assert (rotated["state"], rotated["from_seq"]) == ("in_force", length)
    verify_agrees(folder, length, length)
    assert started_from(folder) == (length, [])
    # Sealed again at the same length, now by the incoming key, before it sealed any entry.
    assert seal_snapshot_now(folder) == length
    verify_agrees(folder, length, length)
    assert started_from(folder) == (length, [])
    # The incoming key seals the next entry; the snapshot at the rotation still counts.
    assert admit(folder, "d")["seq"] == length
    verify_agrees(folder, length + 1, length)
    assert started_from(folder) == (length, [])
    # And `pool serve`, a real process, starts from it too.
    serve = start_serve(folder)
    try:
        with serve.client(None) as client:
            ready = client.get("/readyz").json()
    finally:
        serve.kill(signal.SIGTERM)
    assert (ready["length"], ready["started_from"]) == (length + 1, length)
