"""Full disk: `pool serve` with its deployment on a small tmpfs that fills up.

While the disk is full every submission that would admit gets a clear error (503
`disk_full`) and no Admit, releases likewise; nothing already in the ledger changes; and once
space is freed the same process admits again, with no restart. ENOSPC comes from the kernel
(a real tmpfs), not from a mock. Store-level counterpart:
tests/stores/test_file_store.py::test_a_full_disk_refuses_the_append_and_damages_nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from joulepool.conformance.ledger_ops import split_ledger
from joulepool.deployment.config import LEDGER
from joulepool.ledger.keys import load_key_file
from joulepool.stores.file import FileStore
from tests.support.disks import fill, tmpfs
from tests.support.faults import MJ, Figures, Told, audit, claim, roomy, usage_matches
from tests.support.servers import Deployment, start_serve

DISK = "256k"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real tmpfs of DISK bytes, so ENOSPC is the kernel's."""
    with tmpfs(tmp_path / "disk", DISK) as mount:
        yield mount


def test_a_full_disk_refuses_admissions_damages_nothing_and_recovers_without_restart(
    small_disk: Path,
) -> None:
    deployment = Deployment.create(small_disk / "d")
    folder = deployment.folder
    tree = roomy(folder, devices=10_000)
    key = load_key_file(folder / "steward.pub")
    ledger_path = folder / LEDGER
    figures = Figures("full_disk")
    told = Told()
    serve = start_serve(folder)
    pid = serve.proc.pid
    try:
        with serve.client(deployment.operator) as ops:
            for i in range(20):
                r = ops.post("/v1/claims", json=claim(f"before-{i}"))
                assert r.json()["verdict"] == "admit"
                told.admits[f"before-{i}"] = r.json()["seq"]
            r = ops.post(
                "/v1/claims/before-0/release", json={"actual": {"uj": 1, "grade": "HwShunt"}}
            )
            told.releases["before-0"] = r.json()["seq"]

            filler = fill(small_disk)
            figures.faults_injected += 1
            # tmpfs hands out whole pages: the ledger's last page may still take a few
            # entries. Each of those is a real, durable admission; the disk is full once
            # one append is refused.
            first_refusal: dict[str, object] | None = None
            for i in range(64):
                r = ops.post("/v1/claims", json=claim(f"slack-{i}"))
                if r.status_code == 200:
                    told.admits[f"slack-{i}"] = r.json()["seq"]
                    continue
                first_refusal = {"status": r.status_code, **r.json()}
                break
            assert first_refusal is not None, "the disk never filled"
            assert first_refusal["status"] == 503
            assert first_refusal["error"] == "disk_full"
            assert "nothing was written" in str(first_refusal["detail"])
            figures.extra["slack_admissions"] = i

            before = ledger_path.read_bytes()
            length = ops.get("/v1/ledger").json()["length"]
            refusals = 1

            # Serial submissions, a release, and a concurrent burst that shares group commits.
            for j in range(10):
                r = ops.post("/v1/claims", json=claim(f"full-{j}"))
                assert (r.status_code, r.json()["error"]) == (503, "disk_full"), r.text
                refusals += 1
            r = ops.post(
                "/v1/claims/before-1/release", json={"actual": {"uj": 1, "grade": "HwShunt"}}
            )
            assert (r.status_code, r.json()["error"]) == (503, "disk_full"), r.text
            refusals += 1
            answers: list[httpx.Response] = []
            lock = threading.Lock()

            def burst(n: int) -> None:
                with serve.client(deployment.operator) as http:
                    for k in range(5):
                        got = http.post("/v1/claims", json=claim(f"burst-{n}-{k}"))
                        with lock:
                            answers.append(got)

            threads = [threading.Thread(target=burst, args=(n,)) for n in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len(answers) == 40
            assert all(a.status_code == 503 and a.json()["error"] == "disk_full" for a in answers)
            refusals += len(answers)
            # A verdict that writes nothing (here a Deny) is still given on a full disk.
            r = ops.post("/v1/claims", json=claim("too-big", uj=10**7 * MJ))
            assert (r.status_code, r.json()["verdict"]) == (200, "deny")

            assert ledger_path.read_bytes() == before, "a refused append changed the ledger"
            assert ops.get("/v1/ledger").json()["length"] == length
            for j in range(10):
                assert ops.get(f"/v1/claims/full-{j}").status_code == 404
            assert ops.get("/v1/claims/before-1").json()["state"] == "running"

            filler.unlink()
            # Same process, no restart: the claims refused before are admitted now.
            for j in range(10):
                r = ops.post("/v1/claims", json=claim(f"full-{j}"))
                assert r.status_code == 200 and r.json()["verdict"] == "admit", r.text
                assert r.json()["seq"] == length + j
                told.admits[f"full-{j}"] = r.json()["seq"]
            r = ops.post(
                "/v1/claims/before-1/release", json={"actual": {"uj": 1, "grade": "HwShunt"}}
            )
            assert r.status_code == 200
            told.releases["before-1"] = r.json()["seq"]
            assert serve.proc.pid == pid and serve.proc.poll() is None

            raw = ops.get("/v1/ledger/entries").content
            reported = ops.get("/v1/entitlements").json()["entitlements"]
        assert ledger_path.read_bytes()[: len(before)] == before
        entries, tail = split_ledger(raw)
        assert tail is None
        result = audit(entries, key.kid, key.public_key, tree, told)
        assert result.lost == []
        usage_matches(result.replayer, reported)
    finally:
        serve.kill()
    with FileStore(ledger_path, writer=False) as store:
        assert store.tail is None
    proc = subprocess.run(
        [sys.executable, "-m", "joulepool", "ledger", "verify", str(ledger_path), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0 and json.loads(proc.stdout)["ok"] is True, proc.stdout
    figures.rounds = 1
    figures.entries_checked = result.entries
    figures.admissions_told = len(told.admits)
    figures.releases_told = len(told.releases)
    figures.errors_answered = refusals
    figures.entries_lost = len(result.lost)
    figures.extra["disk"] = DISK
    figures.record()


def test_s6_7_keeping_a_witness_receipt_on_a_full_disk_is_503_disk_full_and_breaks_nothing(
    small_disk: Path,
) -> None:
    from joulepool.deployment.config import WITNESSES
    from joulepool.ledger.keys import KeyPair
    from joulepool.ledger.witness import sign_witness

    auditor = KeyPair.from_seed("auditor", bytes(range(2, 34)))
    deployment = Deployment.create(small_disk / "d")
    witnesses = deployment.folder / WITNESSES
    serve = start_serve(deployment.folder)
    try:
        with serve.client(deployment.operator) as ops:
            for i in range(3):
                assert ops.post("/v1/claims", json=claim(f"w{i}")).status_code == 200
            head = bytes.fromhex(ops.get("/v1/ledger").json()["head_hex"])
            body = {
                "witness": auditor.kid,
                "public_key_hex": auditor.public_key.hex(),
                "receipt_hex": sign_witness(auditor, "steward", head, 3, 1).hex(),
            }
            filler = fill(small_disk)
            r = ops.post("/v1/witness-receipts", json=body)
            assert r.status_code == 503, r.text
            assert r.json()["error"] == "disk_full", r.text
            # Nothing half-written: no receipt, no key, no temporary file.
            assert sorted(p.name for p in witnesses.iterdir()) == []
            assert ops.get("/v1/witness-receipts").json() == {"receipts": []}
            assert ops.get("/v1/ledger").json()["attestation"] == "self-attested"
            filler.unlink()
            r = ops.post("/v1/witness-receipts", json=body)
            assert r.status_code == 200 and r.json()["through"] == 3, r.text
            # A receipt file emptied behind the service's back (an older version's torn
            # write) vouches for nothing, and breaks no read.
            (witnesses / "auditor-9.receipt").write_bytes(b"")
            listed = ops.get("/v1/witness-receipts")
            assert listed.status_code == 200, listed.text
            assert [k["length"] for k in listed.json()["receipts"]] == [3]
            ledger = ops.get("/v1/ledger").json()
            assert ledger["attestation"] == "witnessed" and ledger["witnessed_through"] == 3
    finally:
        serve.kill()
    assert "Traceback" not in serve.output()
