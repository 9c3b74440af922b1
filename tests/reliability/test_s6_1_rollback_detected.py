"""Standard §6.1: a quota never refills because the ledger got shorter.

A hostile tester with `truncate`, a stale backup and a copy of another history tries to make
every surface (`Pool` start-up, `pool serve`, `pool ledger verify DIR`, `pool admit`) answer
from a history shorter than one the deployment acknowledged, through its high-water record
or a kept witness receipt. Every attempt must be refused, naming both lengths, and the
service must never become ready. Only `pool ledger acknowledge --accept-loss` lowers the
record, on purpose.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from joulepool.deployment.config import LEDGER, WITNESSES
from joulepool.deployment.init import init_deployment
from joulepool.deployment.open import open_pool
from joulepool.deployment.witnesses import keep_receipt
from joulepool.grade import Energy, Grade
from joulepool.ledger.keys import KeyPair
from joulepool.ledger.rollback import HighWaterMissing, HighWaterUnreadable, LedgerRolledBack
from joulepool.ledger.witness import sign_witness
from joulepool.pool import Pool
from joulepool.stores.base import head_at
from joulepool.stores.highwater import SLOT, record_path
from tests.support.builders import claim
from tests.support.faults import Figures
from tests.support.faults import claim as claim_json
from tests.support.servers import Deployment, pool_cli, start_serve

MJ = 1_000_000_000_000
AUDITOR = KeyPair.from_seed("auditor", bytes(range(2, 34)))
_figures = Figures("rollback")


def grow(folder: Path, start: int, count: int) -> int:
    """Admit and release `count` small claims from `start`; the ledger's new length."""
    pool = open_pool(folder)
    try:
        for i in range(start, start + count):
            assert pool.submit(claim(f"job-{i}", "vision", MJ // 100)).seq is not None
            pool.release(f"job-{i}", Energy(MJ // 200, Grade.HwShunt))
        return pool.length
    finally:
        pool.close()


def offsets(folder: Path) -> list[int]:
    """Each entry's byte offset in the ledger file."""
    from joulepool.stores.file import FileStore

    with FileStore(folder / LEDGER, writer=False) as store:
        return [store.offset(i) for i in range(len(store))]


def cut(folder: Path, entries: int) -> None:
    """Cut the ledger file back to its first `entries` entries, at an entry boundary."""
    ledger = folder / LEDGER
    size = offsets(folder)[entries] if entries < len(offsets(folder)) else ledger.stat().st_size
    with ledger.open("r+b") as fh:
        fh.truncate(size)


@pytest.fixture(scope="module", autouse=True)
def _record_figures() -> Iterator[None]:
    yield
    # Every test above fails if one rollback starts, so none did when this is written.
    _figures.extra["rollbacks_accepted"] = 0
    _figures.record()


def refused_start(folder: Path) -> LedgerRolledBack:
    with pytest.raises(LedgerRolledBack) as info:
        open_pool(folder)
    _figures.faults_injected += 1
    return info.value


@pytest.fixture
def deployment(tmp_path: Path) -> Path:
    folder = tmp_path / "d"
    init_deployment(folder, "steward")
    assert grow(folder, 0, 60) == 120
    return folder


@pytest.mark.parametrize("keep", [0, 1, 50, 119])
def test_s6_1_a_ledger_cut_back_at_an_entry_boundary_is_refused_naming_both_lengths(
    deployment: Path, keep: int
) -> None:
    cut(deployment, keep)
    refusal = refused_start(deployment)
    assert (refusal.length, refusal.acknowledged) == (keep, 120)
    assert f"has {keep} entries" in str(refusal) and "acknowledged 120" in str(refusal)
    # The command line refuses it as well, and appends nothing.
    size = (deployment / LEDGER).stat().st_size
    out = pool_cli(
        "admit",
        str(deployment),
        "--id",
        "x",
        "--entitlement",
        "vision",
        "--estimate-uj",
        "1",
        "--grade",
        "HwShunt",
        "--json",
    )
    assert out.returncode != 0 and "ledger_rolled_back" in out.stderr, out
    assert "Traceback" not in out.stderr
    assert (deployment / LEDGER).stat().st_size == size
    verify = pool_cli("ledger", "verify", str(deployment), "--json")
    assert verify.returncode == 1, verify
    report = json.loads(verify.stdout)
    assert report["error"] == "ledger_rolled_back"
    assert (report["length"], report["acknowledged"]) == (keep, 120)


def test_s6_1_a_stale_backup_put_back_is_refused(deployment: Path, tmp_path: Path) -> None:
    backup = tmp_path / "backup.cbor"
    shutil.copyfile(deployment / LEDGER, backup)
    grow(deployment, 100, 5)
    shutil.copyfile(backup, deployment / LEDGER)
    refusal = refused_start(deployment)
    assert (refusal.length, refusal.acknowledged) == (120, 130)


def test_s6_1_another_history_of_the_same_length_is_refused(tmp_path: Path) -> None:
    # Two deployments of one steward key: the second's ledger is as long, but not the same.
    first, second = tmp_path / "a", tmp_path / "b"
    init_deployment(first, "steward")
    shutil.copytree(first, second)
    grow(first, 0, 10)
    pool = open_pool(second)
    for i in range(10):
        pool.submit(claim(f"other-{i}", "language", MJ // 100))
        pool.release(f"other-{i}", Energy(1, Grade.HwShunt))
    pool.close()
    shutil.copyfile(second / LEDGER, first / LEDGER)
    refusal = refused_start(first)
    assert (refusal.length, refusal.acknowledged) == (20, 20)
    assert "rewritten or replaced" in str(refusal)


def test_s6_1_a_kept_witness_receipt_holds_even_when_the_record_is_lost_too(
    deployment: Path,
) -> None:
    # A receipt kept at 120, then the file cut back and its record with it
    # (a whole-folder restore of both, say). The receipt alone still refuses the start.
    pool = open_pool(deployment)
    receipt = sign_witness(AUDITOR, "steward", pool.head, pool.length, 1)
    pool.close()
    keep_receipt(deployment / WITNESSES, AUDITOR.kid, AUDITOR.public_key, receipt, 120)
    cut(deployment, 80)
    record = record_path(deployment / LEDGER)
    record.unlink()
    out = pool_cli("ledger", "acknowledge", str(deployment))
    assert out.returncode != 0 and "witness receipt auditor-120.receipt" in out.stderr, out
    assert not record.exists(), "a refused acknowledge wrote nothing"
    with pytest.raises(HighWaterMissing):
        open_pool(deployment)


def test_s6_1_the_service_never_becomes_ready_on_a_rolled_back_ledger(tmp_path: Path) -> None:
    deployment = Deployment.create(tmp_path / "d")
    serve = start_serve(deployment.folder)
    try:
        with serve.client(deployment.operator) as ops:
            for i in range(8):
                assert ops.post("/v1/claims", json=claim_json(f"j{i}")).status_code == 200
            ledger = ops.get("/v1/ledger").json()
            assert ledger["length"] == 8
            # A witness countersigns the head at 8, and the service keeps the receipt.
            head = bytes.fromhex(ledger["head_hex"])
            receipt = sign_witness(AUDITOR, "steward", head, 8, 1)
            kept = ops.post(
                "/v1/witness-receipts",
                json={
                    "witness": AUDITOR.kid,
                    "public_key_hex": AUDITOR.public_key.hex(),
                    "receipt_hex": receipt.hex(),
                },
            )
            assert kept.status_code == 200 and kept.json()["through"] == 8, kept.text
    finally:
        serve.kill()
    cut(deployment.folder, 5)
    serve = start_serve(deployment.folder, wait=False)
    try:
        answer = None
        for _ in range(200):
            try:
                answer = httpx.get(f"{serve.url}/readyz", timeout=2)
            except httpx.TransportError:
                continue
            if answer.status_code == 503 and "ledger_rolled_back" in answer.text:
                break
        assert answer is not None and answer.status_code == 503, answer
        body = answer.json()
        assert "ledger_rolled_back" in body["detail"], body
        assert "has 5 entries" in body["detail"] and "acknowledged 8" in body["detail"], body
        with serve.client(deployment.operator) as ops:
            r = ops.post("/v1/claims", json=claim_json("after"))
            assert r.status_code == 503 and r.json()["error"] == "not_ready", r.text
        assert "Traceback" not in serve.output()
    finally:
        serve.kill()
    _figures.faults_injected += 1


def test_s6_1_a_ledger_without_a_record_is_refused_until_acknowledged(deployment: Path) -> None:
    record_path(deployment / LEDGER).unlink()
    with pytest.raises(HighWaterMissing, match="pool ledger acknowledge"):
        open_pool(deployment)
    verify = pool_cli("ledger", "verify", str(deployment))
    assert verify.returncode == 1 and "high_water_missing" in verify.stdout, verify
    out = pool_cli("ledger", "acknowledge", str(deployment), "--json")
    assert out.returncode == 0, out
    assert json.loads(out.stdout)["acknowledged"] == 120
    assert grow(deployment, 500, 1) == 122


def test_s6_1_only_accept_loss_lowers_the_record(deployment: Path) -> None:
    cut(deployment, 100)
    out = pool_cli("ledger", "acknowledge", str(deployment))
    assert out.returncode != 0 and "ledger_rolled_back" in out.stderr, out
    refused_start(deployment)
    out = pool_cli("ledger", "acknowledge", str(deployment), "--accept-loss", "--json")
    assert out.returncode == 0, out
    assert json.loads(out.stdout) | {"head_hex": ""} == {
        "ledger": str(deployment / LEDGER),
        "acknowledged": 100,
        "previous": 120,
        "head_hex": "",
    }
    assert grow(deployment, 500, 1) == 102


def test_s6_1_a_ledger_that_does_not_verify_is_never_acknowledged(deployment: Path) -> None:
    data = bytearray((deployment / LEDGER).read_bytes())
    data[offsets(deployment)[7] + 40] ^= 0x01
    (deployment / LEDGER).write_bytes(bytes(data))
    out = pool_cli("ledger", "acknowledge", str(deployment), "--accept-loss")
    assert out.returncode != 0 and "does not verify" in out.stderr, out


def test_s6_1_one_damaged_copy_of_the_record_is_survived_both_are_refused(
    deployment: Path,
) -> None:
    record = record_path(deployment / LEDGER)
    data = bytearray(record.read_bytes())
    assert len(data) == 2 * SLOT
    newest = max((0, 1), key=lambda i: int.from_bytes(data[i * SLOT + 8 : i * SLOT + 16], "big"))
    data[newest * SLOT + 20] ^= 0x80  # a flipped bit in the newest copy: it fails its checksum
    record.write_bytes(bytes(data))
    # The older copy is one append behind the ledger: never ahead, so the start goes on.
    pool = open_pool(deployment)
    assert pool.length == 120
    pool.close()
    data[(1 - newest) * SLOT + 20] ^= 0x80
    record.write_bytes(bytes(data))
    with pytest.raises(HighWaterUnreadable, match="pool ledger acknowledge"):
        open_pool(deployment)


def test_s6_1_the_record_follows_every_append_and_never_runs_ahead(tmp_path: Path) -> None:
    folder = tmp_path / "d"
    init_deployment(folder, "steward")
    pool = open_pool(folder)
    for i in range(5):
        pool.submit(claim(f"c{i}", "vision", MJ // 100))
        point = pool.store.high_water()
        assert point is not None
        assert (point.length, point.head) == (pool.length, pool.head)
        assert head_at(pool.store, point.length) == point.head
    pool.close()


def test_s6_1_a_pool_over_a_memory_store_holds_to_given_marks() -> None:
    from joulepool.ledger.rollback import HighWater, Mark
    from joulepool.stores.memory import MemoryStore
    from tests.support.builders import team_tree

    key = KeyPair.from_seed("steward", bytes(32))
    pool = Pool(team_tree(), key, MemoryStore())
    assert pool.submit(claim("c", "a", 10)).seq == 0
    entries = list(pool.entries())
    mark = Mark("a receipt", HighWater(1, pool.head))
    with pytest.raises(LedgerRolledBack, match="a receipt acknowledged 1"):
        Pool(team_tree(), key, MemoryStore(), acknowledged=[mark])
    assert Pool(team_tree(), key, MemoryStore(entries), acknowledged=[mark]).length == 1
