"""`pool ledger backup` and `pool ledger restore`: a lost machine restored with the loss
stated (standard §6.1: restoring an older backup is exactly a rollback)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from joulepool.deployment.claim_tokens import CLAIM_SECRET
from joulepool.deployment.init import init_deployment
from tests.support.servers import pool_cli

MJ = 1_000_000_000_000


def run(*args: str, code: int = 0) -> Any:
    proc = pool_cli(*args, "--json")
    assert proc.returncode == code, proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr
    return json.loads(proc.stdout)


def admit(folder: Path, claim: str, ent: str = "vision") -> None:
    run("admit", str(folder), "--id", claim, "--entitlement", ent, "--estimate-uj", str(MJ))


def test_s6_1_backup_restore_states_the_loss_and_needs_consent(tmp_path: Path) -> None:
    folder = tmp_path / "dep"
    init_deployment(folder, "steward")
    admit(folder, "a")
    run("release", str(folder), "a", "--actual-uj", str(2 * MJ), "--grade", "HwShunt")
    run("keys", "rotate", str(folder))
    backup = tmp_path / "backup"
    made = run("ledger", "backup", str(folder), str(backup))
    assert made["length"] == 2
    assert made["secret_key"] is False
    assert "steward.key" not in made["files"]
    assert {"ledger.cbor", "ledger.cbor.hwm", "pool.toml", "steward.pub"} <= set(made["files"])
    assert "rotations/00000000.cose" in made["files"]
    # The configuration judging its periods travels with it (docs/reliability.md §18).
    assert "configs/00000000.cose" in made["files"]
    # After the backup: two more acknowledged entries, then the machine's ledger is lost.
    admit(folder, "b")
    admit(folder, "c", "language")
    refused = run("ledger", "restore", str(backup), str(folder), code=1)
    assert refused["error"] == "restore_loses_entries"
    assert (refused["backup_length"], refused["acknowledged"], refused["lost"]) == (2, 4, 2)
    assert [(e["seq"], e["claim"]) for e in refused["entries"]] == [(2, "b"), (3, "c")]
    assert refused["usage_falls"] == {
        "vision": {"spent_uj": MJ, "held_devices": 1},
        "language": {"spent_uj": MJ, "held_devices": 1},
    }
    human = pool_cli("ledger", "restore", str(backup), str(folder))
    assert human.returncode == 1
    assert "restoring loses entries 2 to 3" in human.stdout
    assert "--accept-loss" in human.stdout
    # Nothing changed: the deployment still has its four entries.
    assert run("ledger", "verify", str(folder))["length"] == 4

    done = run("ledger", "restore", str(backup), str(folder), "--accept-loss")
    assert (done["ok"], done["lost"]) == (True, 2)
    log = [json.loads(line) for line in (folder / "restore.log").read_text().splitlines()]
    assert log[-1]["accepted_loss"] is True
    assert log[-1]["lost"] == 2
    assert [e["claim"] for e in log[-1]["entries"]] == ["b", "c"]
    replaced = [p for p in tmp_path.iterdir() if p.name.startswith("dep.replaced-")]
    assert len(replaced) == 1  # the replaced deployment is kept, never deleted
    verified = run("ledger", "verify", str(folder))
    assert (verified["length"], verified["rotations"]) == (2, 1)
    # No secret key came with the backup: sealing needs the key in force, put back apart.
    assert (
        pool_cli(
            "admit", str(folder), "--id", "d", "--entitlement", "vision", "--estimate-uj", "1"
        ).returncode
        == 1
    )
    shutil.copy2(replaced[0] / "steward.key", folder / "steward.key")
    admit(folder, "d")
    assert run("ledger", "verify", str(folder))["length"] == 3


def test_s6_1_restore_to_a_new_machine_with_the_key_loses_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "dep"
    init_deployment(folder, "steward")
    admit(folder, "a")
    backup = tmp_path / "backup"
    made = run("ledger", "backup", str(folder), str(backup), "--with-secret-key")
    assert "steward.key" in made["files"]
    assert (backup / "steward.key").stat().st_mode & 0o777 == 0o600
    fresh = tmp_path / "new-machine"
    done = run("ledger", "restore", str(backup), str(fresh))
    assert (done["ok"], done["lost"]) == (True, 0)
    # Running jobs' claim tokens (API.md "Run time") stay valid on the new machine.
    assert (fresh / CLAIM_SECRET).read_bytes() == (folder / CLAIM_SECRET).read_bytes()
    assert (fresh / CLAIM_SECRET).stat().st_mode & 0o777 == 0o600
    admit(fresh, "b")
    assert run("ledger", "verify", str(fresh))["length"] == 2
    usage = run("usage", str(fresh))
    vision = next(e for e in usage["entitlements"] if e["id"] == "vision")
    assert vision["usage"]["reserved_uj"] == 2 * MJ


def test_s6_4_a_backup_carries_the_claim_index_so_a_restore_starts_from_its_snapshot(
    tmp_path: Path,
) -> None:
    """a restored deployment starts from its newest snapshot (it needs the claim
    index for that), while the backup itself is still verified by a replay from entry 0."""
    from joulepool.claim import Claim
    from joulepool.deployment.open import open_pool
    from joulepool.grade import Energy, Grade
    from joulepool.ledger.snapshot import SnapshotFolder
    from joulepool.stores.claim_index import ClaimIndex, index_path

    folder = tmp_path / "dep"
    init_deployment(folder, "steward")
    pool = open_pool(folder, snapshot_every=6)
    try:
        for i in range(20):
            pool.submit(Claim(f"c{i}", "vision", 1, 1, Energy(5, Grade.Estimator)))
            pool.release(f"c{i}", Energy(4, Grade.HwShunt))
        pool.wait_for_snapshot()
    finally:
        pool.close()
    backup = tmp_path / "backup"
    made = run("ledger", "backup", str(folder), str(backup), "--with-secret-key")
    assert "ledger.cbor.claims" in made["files"]
    copied = ClaimIndex(index_path(backup / "ledger.cbor"), read_only=True)
    try:
        assert copied.covers == 40 and copied.rebase(40) and len(copied) == 20
    finally:
        copied.close()
    fresh = tmp_path / "new-machine"
    assert run("ledger", "restore", str(backup), str(fresh))["ok"] is True
    newest = SnapshotFolder.beside(fresh / "ledger.cbor").lengths()[0]
    restored = open_pool(fresh)
    try:
        assert restored.started_from == newest > 0
        refused = restored.submit(Claim("c3", "vision", 1, 1, Energy(5, Grade.Estimator)))
    except Exception as exc:  # §6.4: a released id is never admitted again
        assert "admitted before" in str(exc)
    else:
        raise AssertionError(f"c3 admitted again: {refused}")
    finally:
        restored.close()


def _tree(folder: Path) -> dict[str, bytes]:
    # SQLite's shared-memory and write-ahead files appear beside the claim index whenever
    # it is read (a reader of a WAL database makes them); they hold no data of their own.
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.name.endswith(("-shm", "-wal"))
    }


def test_s6_1_restore_of_a_fork_states_the_loss_and_needs_consent(tmp_path: Path) -> None:
    """a backup as long as the deployment or longer, of a copy that went its own way,
    replaces acknowledged entries: a loss, stated and refused without consent."""
    folder = tmp_path / "dep"
    run("init", str(folder), "--no-power-ceiling")  # releases of MJ a moment after admission
    admit(folder, "a")
    run("release", str(folder), "a", "--actual-uj", str(2 * MJ), "--grade", "HwShunt")
    fork = tmp_path / "fork"
    shutil.copytree(folder, fork)
    for claim in ("b", "c", "d"):
        run(
            "admit",
            str(folder),
            "--id",
            claim,
            "--entitlement",
            "vision",
            "--estimate-uj",
            str(2 * MJ),
        )
    for claim in ("x", "y", "z", "w"):
        admit(fork, claim, "language")
    backup = tmp_path / "backup"
    assert run("ledger", "backup", str(fork), str(backup), "--with-secret-key")["length"] == 6
    before = _tree(folder)
    refused = run("ledger", "restore", str(backup), str(folder), code=1)
    assert refused["error"] == "restore_loses_entries"
    assert (refused["common_length"], refused["acknowledged"], refused["lost"]) == (2, 5, 3)
    assert [(e["seq"], e["claim"]) for e in refused["entries"]] == [(2, "b"), (3, "c"), (4, "d")]
    assert refused["usage_falls"] == {"vision": {"spent_uj": 6 * MJ, "held_devices": 3}}
    human = pool_cli("ledger", "restore", str(backup), str(folder))
    assert human.returncode == 1 and "Traceback" not in human.stderr
    assert "restoring loses entries 2 to 4" in human.stdout
    assert "not an extension" in human.stdout and "--accept-loss" in human.stdout
    assert _tree(folder) == before  # a refused restore changes nothing

    done = run("ledger", "restore", str(backup), str(folder), "--accept-loss")
    assert (done["ok"], done["lost"]) == (True, 3)
    log = json.loads((folder / "restore.log").read_text().splitlines()[-1])
    assert [e["claim"] for e in log["entries"]] == ["b", "c", "d"]
    assert run("ledger", "verify", str(folder))["length"] == 6


def test_s6_1_restore_of_an_extension_loses_nothing(tmp_path: Path) -> None:
    """a backup that holds everything acknowledged and more (the deployment's ledger cut
    back, its record intact) restores without consent."""
    folder = tmp_path / "dep"
    run("init", str(folder), "--no-power-ceiling")  # releases of MJ a moment after admission
    admit(folder, "a")
    early = tmp_path / "early"
    shutil.copytree(folder, early)
    admit(folder, "b")
    backup = tmp_path / "backup"
    run("ledger", "backup", str(folder), str(backup), "--with-secret-key")
    done = run("ledger", "restore", str(backup), str(early))
    assert (done["ok"], done["lost"], done["common_length"]) == (True, 0, 1)


def test_s6_1_restore_of_another_stewards_backup_is_refused_even_with_accept_loss(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "dep"
    run("init", str(folder), "--no-power-ceiling")  # releases of MJ a moment after admission
    admit(folder, "a")
    before = _tree(folder)
    for steward in ("steward", "elsewhere"):
        other = tmp_path / f"other-{steward}"
        run("init", str(other), "--steward", steward)
        for claim in ("p", "q", "r"):
            admit(other, claim, "language")
        backup = tmp_path / f"backup-{steward}"
        run("ledger", "backup", str(other), str(backup), "--with-secret-key")
        for consent in ((), ("--accept-loss",)):
            refused = run("ledger", "restore", str(backup), str(folder), *consent, code=1)
            assert refused["error"] == "restore_other_steward"
            human = pool_cli("ledger", "restore", str(backup), str(folder), *consent)
            assert human.returncode == 1 and "Traceback" not in human.stderr
            line = human.stderr.strip()
            assert line.startswith("pool: restore_other_steward: ") and "\n" not in line
            assert f"'{steward}'" in line and "'steward'" in line  # names both
            assert _tree(folder) == before  # steward.pub, the ledger: nothing replaced
    assert not [p for p in tmp_path.iterdir() if ".replaced-" in p.name]


def test_s6_1_backups_keep_secrets_private_and_a_restore_serves_and_says_what_is_left(
    tmp_path: Path,
) -> None:
    """token hashes and the key stay 0600 in a backup, in a folder only its owner reads; a
    restored deployment starts `pool serve` with its tokens, once the key is put back, and
    the restore says so."""
    import httpx

    from tests.support.servers import start_serve

    folder = tmp_path / "dep"
    run("init", str(folder), "--no-power-ceiling")  # releases of MJ a moment after admission
    token = run("token", "add", str(folder), "--scope", "operator")["token"]
    admit(folder, "a")
    keyed = tmp_path / "keyed"
    run("ledger", "backup", str(folder), str(keyed), "--with-secret-key")
    backup = tmp_path / "backup"
    run("ledger", "backup", str(folder), str(backup))
    for made in (keyed, backup):
        assert made.stat().st_mode & 0o077 == 0
        assert (made / "tokens.toml").stat().st_mode & 0o777 == 0o600
    assert (keyed / "steward.key").stat().st_mode & 0o777 == 0o600

    # A backup whose tokens.toml others can read: the restore still leaves it 0600.
    (backup / "tokens.toml").chmod(0o644)
    fresh = tmp_path / "new-machine"
    done = run("ledger", "restore", str(backup), str(fresh))
    assert (done["secret_key_restored"], done["tokens_restored"]) == (False, True)
    assert any("steward.key" in step and "0600" in step for step in done["to_do"])
    assert (fresh / "tokens.toml").stat().st_mode & 0o777 == 0o600
    human = pool_cli("ledger", "restore", str(keyed), str(tmp_path / "other-machine"))
    assert human.returncode == 0
    assert "left to do" in human.stdout and "tokens.toml was restored" in human.stdout
    assert "steward key" not in human.stdout  # the key came with this one

    shutil.copy2(folder / "steward.key", fresh / "steward.key")
    serve = start_serve(fresh)
    try:
        answer = httpx.get(
            f"{serve.url}/v1/ledger", headers={"Authorization": f"Bearer {token}"}, timeout=30
        )
        assert answer.status_code == 200, answer.text
    finally:
        serve.kill()


def test_s6_1_restore_over_a_ledger_that_does_not_open_still_compares_history(
    tmp_path: Path,
) -> None:
    """a deployment whose record is gone (it no longer opens) still shows the history its
    file begins with: a fork's backup over it is a loss, its usage unknown."""
    folder = tmp_path / "dep"
    run("init", str(folder), "--no-power-ceiling")  # releases of MJ a moment after admission
    admit(folder, "a")
    fork = tmp_path / "fork"
    shutil.copytree(folder, fork)
    admit(folder, "b")
    admit(folder, "c")
    for claim in ("x", "y", "z"):
        admit(fork, claim, "language")
    backup = tmp_path / "backup"
    run("ledger", "backup", str(fork), str(backup))
    (folder / "ledger.cbor.hwm").unlink()
    before = _tree(folder)
    refused = run("ledger", "restore", str(backup), str(folder), code=1)
    assert refused["error"] == "restore_loses_entries"
    assert (refused["common_length"], refused["lost"], refused["forked"]) == (1, 2, True)
    assert refused["usage_falls"] is None
    assert _tree(folder) == before
