"""Readiness and start-up refusals of `pool serve` on a ledger file.

- A second `pool serve` on the same folder used to stay unready for ever (the ledger file's
  lock was taken in the background replay): it now exits non-zero at once, naming the pid
  that holds the lock.
- `/readyz` said ready on a full disk: it now answers 503 `disk_full` while the ledger's
  filesystem is nearly full or the last append found no space, and ready again once there
  is room, with no restart.
- A ledger refused at start was visible only on `/readyz`: every refusal to start and every
  store failure is now logged at error level (the `joulepool` logger, shown through
  uvicorn's log configuration), naming the entry index or the cause.

Real `pool serve` processes, a real tmpfs (ENOSPC from the kernel); nothing mocked.
PostgreSQL's counterpart: tests/postgres/test_replicas_fenced_agreed_and_probed.py.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import cbor2
import httpx
import pytest

from joulepool.conformance.ledger_ops import split_ledger
from joulepool.deployment.config import LEDGER
from joulepool.errors import DiskFull
from joulepool.ledger.keys import load_key_file
from joulepool.stores.file import MIN_FREE_BYTES, FileStore, create
from tests.support.disks import fill, tmpfs
from tests.support.faults import Figures, Told, audit, claim, roomy
from tests.support.servers import Deployment, Serve, start_serve

_figures = Figures("readiness")


@pytest.fixture(scope="module", autouse=True)
def _record_figures() -> Iterator[None]:
    yield
    _figures.rounds = max(_figures.rounds, 1)
    _figures.record()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 256 KiB tmpfs, so ENOSPC is the kernel's."""
    with tmpfs(tmp_path / "disk", "256k") as mount:
        yield mount


def error_lines(log: str, *words: str) -> list[str]:
    """The log's error-level lines that hold every one of `words`."""
    return [
        line
        for line in log.splitlines()
        if line.startswith("ERROR:") and all(w in line for w in words)
    ]


def refusal_on_readyz(serve: Serve) -> dict[str, str]:
    """Poll /readyz until it gives its final word on a ledger that does not start."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert serve.proc.poll() is None, serve.output()
        try:
            r = httpx.get(f"{serve.url}/readyz", timeout=5)
        except httpx.TransportError:
            time.sleep(0.05)
            continue
        assert r.status_code == 503, r.text
        if "replayed" not in r.json()["detail"]:
            body: dict[str, str] = r.json()
            return body
        time.sleep(0.05)
    raise AssertionError(f"no refusal on /readyz:\n{serve.output()}")


def test_a_second_pool_serve_on_one_folder_exits_naming_the_holder(tmp_path: Path) -> None:
    deployment = Deployment.create(tmp_path / "d")
    first = start_serve(deployment.folder)
    try:
        began = time.monotonic()
        second = start_serve(deployment.folder, wait=False)
        try:
            code = second.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"a second pool serve on one folder did not exit:\n{second.output()}"
            ) from None
        finally:
            second.kill()
        took = time.monotonic() - began
        out = second.output()
        assert code != 0, out
        lines = error_lines(out, "ledger_locked", f"pid {first.proc.pid}", str(LEDGER))
        assert lines, out
        assert "Traceback" not in out, out
        # The first one never noticed.
        with first.client(deployment.operator) as ops:
            assert ops.get("/readyz").status_code == 200
            assert ops.post("/v1/claims", json=claim("still")).json()["verdict"] == "admit"
    finally:
        first.kill()
    _figures.faults_injected += 1
    _figures.extra["second_serve_exit_s"] = round(took, 2)


def test_readyz_is_503_disk_full_while_the_ledger_cannot_be_written(small_disk: Path) -> None:
    deployment = Deployment.create(small_disk / "d")
    folder = deployment.folder
    tree = roomy(folder, devices=10_000)
    key = load_key_file(folder / "steward.pub")
    told = Told()
    serve = start_serve(folder)
    try:
        with serve.client(deployment.operator) as ops:
            for i in range(5):
                told.admits[f"a{i}"] = ops.post("/v1/claims", json=claim(f"a{i}")).json()["seq"]
            assert ops.get("/readyz").status_code == 200
            filler = fill(small_disk)
            r = ops.get("/readyz")
            assert (r.status_code, r.json()["error"]) == (503, "disk_full"), r.text
            assert "bytes free" in r.json()["detail"], r.text
            # The disk's last page may still take a few entries; then appends are refused.
            for i in range(64):
                r = ops.post("/v1/claims", json=claim(f"slack-{i}"))
                if r.status_code != 200:
                    break
                told.admits[f"slack-{i}"] = r.json()["seq"]
            assert (r.status_code, r.json()["error"]) == (503, "disk_full"), r.text
            assert ops.get("/readyz").json()["error"] == "disk_full"
            # Space freed: ready again, and admitting, with no restart.
            filler.unlink()
            r = ops.get("/readyz")
            assert r.status_code == 200, r.text
            r = ops.post("/v1/claims", json=claim("after"))
            assert r.json()["verdict"] == "admit", r.text
            told.admits["after"] = r.json()["seq"]
            entries, tail = split_ledger(ops.get("/v1/ledger/entries").content)
        assert tail is None
        assert audit(entries, key.kid, key.public_key, tree, told).lost == []
        log = serve.output()
        # The refused append, and the probe's change of mind, each logged at error level.
        assert error_lines(log, "disk_full", "nothing was written"), log
        assert len(error_lines(log, "not ready: disk_full")) == 1, log
        assert "Traceback" not in log
    finally:
        serve.kill()
    _figures.faults_injected += 1
    _figures.admissions_told += len(told.admits)
    _figures.entries_checked += len(entries)


def test_after_an_append_found_no_space_the_store_is_unready_until_there_is_room(
    small_disk: Path,
) -> None:
    # statvfs alone cannot see a quota, or room too small for the append that failed: after
    # a refused append, ready() allocates that append's size before saying yes again.
    path = small_disk / "ledger.cbor"
    with create(path) as store:
        store.append([cbor2.dumps(b"\x01" * 100)])
        store.ready()
        filler = fill(small_disk)
        with pytest.raises(DiskFull, match="bytes free"):
            store.ready()
        big = [cbor2.dumps(b"\x02" * 8189)]  # one CBOR item of 8192 bytes
        with pytest.raises(DiskFull):
            store.append(big)
        with pytest.raises(DiskFull, match="still no room for those 8192 bytes"):
            store.ready(min_free=0)  # the free-space floor off: only the allocation speaks
        assert sorted(p.name for p in small_disk.iterdir()) == [
            "filler",
            path.name,
            f"{path.name}.hwm",
        ]
        filler.unlink()
        store.ready(min_free=0)
        store.ready()
        store.append(big)
        assert len(store) == 2
    with FileStore(path, writer=False) as again:
        assert again.tail is None and len(again) == 2
    assert MIN_FREE_BYTES < 256 << 10  # a fresh 256 KiB disk starts ready


def damage_entry(path: Path, index: int) -> None:
    """Flip a byte in the last part (the signature) of entry `index`."""
    data = bytearray(path.read_bytes())
    entries, _ = split_ledger(bytes(data))
    end = sum(len(e) for e in entries[: index + 1])
    data[end - 5] ^= 0x10
    path.write_bytes(bytes(data))


def test_a_refused_ledger_is_logged_at_error_level_with_its_index(tmp_path: Path) -> None:
    deployment = Deployment.create(tmp_path / "d")
    serve = start_serve(deployment.folder)
    with serve.client(deployment.operator) as ops:
        for i in range(3):
            assert ops.post("/v1/claims", json=claim(f"c{i}")).json()["seq"] == i
    serve.kill()
    ledger = deployment.folder / LEDGER
    whole = ledger.read_bytes()

    damage_entry(ledger, 1)
    serve = start_serve(deployment.folder, wait=False)
    try:
        body = refusal_on_readyz(serve)
        assert body["error"] == "not_ready" and "entry 1" in body["detail"], body
        lines = error_lines(serve.output(), "not ready: ledger_refused: entry 1: ")
        assert len(lines) == 1, serve.output()
        assert "Traceback" not in serve.output()
    finally:
        serve.kill()

    # A torn final write: refused at its entry and byte offset, in the log too.
    ledger.write_bytes(whole + whole[: len(whole) // 6])
    serve = start_serve(deployment.folder, wait=False)
    try:
        body = refusal_on_readyz(serve)
        assert "torn" in body["detail"], body
        lines = error_lines(serve.output(), "not ready: torn_write: ", "entry 3 at byte offset")
        assert len(lines) == 1, serve.output()
        assert "Traceback" not in serve.output()
    finally:
        serve.kill()
    _figures.faults_injected += 2
