"""`pool keys vkey` and `pool ledger checkpoint` (DESIGN.md §8): the checkpoint verifies
under the printed verifier key, names the configured origin, and after `pool keys rotate`
is signed by the new key, which `vkey --all` lists with the entry it signs from."""

from __future__ import annotations

import base64
import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from joulepool.deployment.init import init_deployment
from joulepool.deployment.open import open_pool
from joulepool.ledger.checkpoint import open_checkpoint
from joulepool.ledger.merkle import root_of
from joulepool.ledger.note import NoteUnverified, VerifierKey
from joulepool.ledger.rotation import KeySchedule
from tests.support.servers import Deployment, admit_and_release, pool_cli, start_serve


def ok(*args: str) -> str:
    proc = pool_cli(*args)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc.stdout


def ok_json(*args: str) -> Any:
    return json.loads(ok(*args, "--json"))


def admit(folder: Path, claim: str) -> None:
    ok("admit", str(folder), "--id", claim, "--entitlement", "vision", "--estimate-uj", "5")


def test_the_checkpoint_verifies_under_the_vkey_and_signs_the_ledgers_tree(tmp_path: Path) -> None:
    folder = tmp_path / "dep"
    init_deployment(folder, "steward")
    for c in ("a", "b", "c"):
        admit(folder, c)
    vkey = VerifierKey.parse(ok("keys", "vkey", str(folder)).strip())
    assert vkey.name == "joulepool/steward"
    note = ok("ledger", "checkpoint", str(folder))
    opened = open_checkpoint(note, vkey, origin="joulepool/steward").checkpoint
    pool = open_pool(folder, read_only=True)
    try:
        assert (opened.size, opened.root_hash) == (3, root_of(pool.entries()))
    finally:
        pool.close()
    assert ok_json("ledger", "checkpoint", str(folder))["checkpoint"] == note


def test_a_configured_origin_names_the_log_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "dep"
    init_deployment(folder, "steward")
    config = folder / "pool.toml"
    text = config.read_text()
    config.write_text(text + '\n[transparency]\norigin = "example.org/pool"\n')
    assert ok("keys", "vkey", str(folder)).startswith("example.org/pool+")
    assert ok("ledger", "checkpoint", str(folder)).startswith("example.org/pool\n0\n")
    for bad, why in (('"two words"', "space"), ('"a+b"', "'+'"), ("7", "string")):
        config.write_text(text + f"\n[transparency]\norigin = {bad}\n")
        refused = pool_cli("ledger", "checkpoint", str(folder))
        assert refused.returncode != 0 and "Traceback" not in refused.stderr
        assert "transparency.origin" in refused.stderr + refused.stdout
        assert why in refused.stderr + refused.stdout


def test_after_a_rotation_the_checkpoint_is_signed_by_the_new_key(tmp_path: Path) -> None:
    folder = tmp_path / "dep"
    init_deployment(folder, "steward")
    admit(folder, "a")
    first = VerifierKey.parse(ok("keys", "vkey", str(folder)).strip())
    rotated = ok_json("keys", "rotate", str(folder))
    admit(folder, "b")
    keys = ok_json("keys", "vkey", str(folder), "--all")["keys"]
    assert [k["from_seq"] for k in keys] == [0, rotated["from_seq"]] == [0, 1]
    assert keys[0]["vkey"] == first.encode()
    listed = ok("keys", "vkey", str(folder), "--all").splitlines()
    assert listed == [f"{k['from_seq']} {k['vkey']}" for k in keys]
    current = VerifierKey.parse(ok("keys", "vkey", str(folder)).strip())
    assert current.encode() == keys[1]["vkey"] != first.encode()
    note = ok("ledger", "checkpoint", str(folder))
    assert open_checkpoint(note, current).checkpoint.size == 2
    with pytest.raises(NoteUnverified):
        open_checkpoint(note, first)


def test_a_served_checkpoint_is_signed_by_the_key_sighup_put_in_force(tmp_path: Path) -> None:
    """`pool keys rotate` beside `pool serve`, then SIGHUP: the next `/checkpoint` (at most a
    second later) verifies under the new verifier key only."""
    deployment = Deployment.create(tmp_path / "dep")
    folder = deployment.folder
    serve = start_serve(folder)
    try:
        admit_and_release(serve, deployment.operator, 0, 1, 1_000)
        first = VerifierKey.parse(ok("keys", "vkey", str(folder)).strip())
        with serve.client(None) as anyone:
            assert open_checkpoint(anyone.get("/checkpoint").content, first).checkpoint.size == 2
            assert ok_json("keys", "rotate", str(folder))["state"] == "pending"
            serve.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 30
            while (folder / "steward.key.next").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not (folder / "steward.key.next").exists(), serve.output()
            current = VerifierKey.parse(ok("keys", "vkey", str(folder)).strip())
            assert current != first
            time.sleep(1.1)  # past the served checkpoint's cache
            note = anyone.get("/checkpoint").content
        assert open_checkpoint(note, current).checkpoint.size == 2
        with pytest.raises(NoteUnverified):
            open_checkpoint(note, first)
        # The rotation, as a checker who trusts only the first key follows it.
        with serve.client(deployment.tenants["vision"]) as tenant:
            listed = tenant.get("/v1/ledger/keys").json()
        assert [k["vkey"] for k in listed["keys"]] == [first.encode(), current.encode()]
        assert [k["from_seq"] for k in listed["keys"]] == [0, 2]
        assert listed["keys"][0]["statement_b64"] is None
        statements = [base64.b64decode(k["statement_b64"]) for k in listed["keys"][1:]]
        schedule = KeySchedule.verified(listed["steward"], first.public_key, statements)
        assert schedule.current_key == current.public_key
    finally:
        serve.kill(signal.SIGTERM)
