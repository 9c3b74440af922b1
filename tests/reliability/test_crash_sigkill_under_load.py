"""Crash: `pool serve` under concurrent load, killed with SIGKILL at random moments.

After every kill the server is started again on the same folder, and the ledger is audited:
every admission and release a client was answered with is in it at the index it was given,
it verifies from entry 0, no claim and no entry appears twice, and the usage the restarted
service reports is the usage the ledger replays to (§6.1).

SIGKILL cannot tear a write on Linux: a `pwrite` either happens or not, and the page cache
outlives the process. A torn final write is what a power cut leaves, so some rounds inject
one after the kill: the first bytes of a properly sealed next entry, whose verdict no
client was ever given. The restarted service must refuse to start over it, naming it and
the command that recovers it; `pool ledger recover` must remove exactly those bytes.
Store-level counterparts: tests/stores/test_file_store.py (torn write reported and
recovered, a second writer refused).
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from joulepool.deployment.config import CONFIG, KEY, LEDGER, read_config
from joulepool.events import Admitted
from joulepool.grade import Energy, Grade
from joulepool.ledger.cose import GENESIS, content_address, seal
from joulepool.ledger.entry import core_of
from joulepool.ledger.keys import load_key_file
from joulepool.stores.file import FileStore
from tests.support.faults import (
    MJ,
    Figures,
    Told,
    audit,
    drive,
    retry_pending,
    roomy,
    usage_matches,
)
from tests.support.servers import Deployment, Serve, pool_cli, start_serve

ROUNDS = int(os.environ.get("JOULEPOOL_CRASH_ROUNDS", "20"))
CLIENTS = 6
TORN_EVERY = 4  # one round in four also leaves a torn final write, as a power cut would


def tear(folder: Path, rng: random.Random, label: str) -> int:
    """Append the first bytes of a properly sealed next entry: a write a power cut cut short."""
    key = load_key_file(folder / KEY, require_secret=True)
    with FileStore(folder / LEDGER, writer=False) as store:
        length = len(store)
        head = content_address(store.entry(length - 1)) if length else GENESIS
    event = Admitted(label, "vision", 1, 1, Energy(MJ, Grade.HwShunt), 0, 1_764_000_000_000)
    raw = seal(core_of(event, length, head, key.kid), key.kid, key.signing_key)
    cut = rng.randrange(1, len(raw))
    with (folder / LEDGER).open("ab") as fh:
        fh.write(raw[:cut])
    return cut


def refused_over_torn_write(folder: Path) -> str:
    """Start `pool serve` over a torn ledger: it must stay unready and say why."""
    serve = start_serve(folder, wait=False)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert serve.proc.poll() is None, serve.output()
            try:
                r = httpx.get(f"{serve.url}/readyz", timeout=2)
            except httpx.TransportError:
                time.sleep(0.05)
                continue
            body = r.json()
            assert r.status_code == 503, body
            if "replayed" not in body["detail"]:
                return str(body["detail"])
            time.sleep(0.05)
        raise AssertionError("pool serve never reported the torn write")
    finally:
        serve.kill()


def load_round(told: Told, url: str, token: str, prefix: str) -> None:
    """One round's load, merged into `told` once every client has stopped."""
    told.merge(drive([url], token, prefix, CLIENTS, threading.Event()))


@pytest.mark.slow
def test_sigkill_under_load_loses_nothing_a_client_was_told(tmp_path: Path) -> None:
    deployment = Deployment.create(tmp_path / "d")
    folder = deployment.folder
    key = load_key_file(folder / "steward.pub")
    tree = roomy(folder)
    assert read_config(folder / CONFIG).tree == tree
    rng = random.Random(20260601)
    told = Told()
    figures = Figures("crash_sigkill_under_load")
    torn_injected = recovered = 0
    retried = {"landed_before": 0, "decided_now": 0}
    serve: Serve = start_serve(folder)
    try:
        for round_no in range(ROUNDS):
            # Every client stops at its first unanswered request: its server is gone.
            load = threading.Thread(
                target=load_round, args=(told, serve.url, deployment.operator, f"r{round_no}")
            )
            load.start()
            time.sleep(rng.uniform(0.05, 0.8))
            assert serve.proc.poll() is None, serve.output()
            os.kill(serve.proc.pid, signal.SIGKILL)
            serve.proc.wait(timeout=30)
            load.join(timeout=120)
            assert not load.is_alive()
            figures.faults_injected += 1

            with FileStore(folder / LEDGER, writer=False) as store:
                assert store.tail is None, f"round {round_no}: SIGKILL left {store.tail}"
                length = len(store)
            if round_no % TORN_EVERY == TORN_EVERY - 1:
                cut = tear(folder, rng, f"never-told-{round_no}")
                torn_injected += 1
                figures.faults_injected += 1
                detail = refused_over_torn_write(folder)
                assert "torn write" in detail and "pool ledger recover" in detail, detail
                assert f"entry {length}" in detail, detail
                proc = pool_cli("ledger", "recover", str(folder / LEDGER), "--json")
                assert proc.returncode == 0, proc.stderr
                done = json.loads(proc.stdout)
                assert done == {
                    "recovered": True,
                    "offset": (folder / LEDGER).stat().st_size,
                    "removed_bytes": cut,
                    "entries": length,
                }
                recovered += 1

            serve = start_serve(folder)
            for k, v in retry_pending(serve.url, deployment.operator, told).items():
                retried[k] += v
            with serve.client(deployment.operator) as ops:
                raw = ops.get("/v1/ledger/entries").content
                reported = ops.get("/v1/entitlements").json()["entitlements"]
                ledger = ops.get("/v1/ledger").json()
            from joulepool.conformance.ledger_ops import split_ledger

            entries, tail = split_ledger(raw)
            assert tail is None
            assert len(entries) == ledger["length"] >= length  # retries may have appended
            result = audit(entries, key.kid, key.public_key, tree, told)
            assert result.lost == [], f"round {round_no}: told but not in the ledger: {result.lost}"
            assert result.replayer.head.hex() == ledger["head_hex"]
            usage_matches(result.replayer, reported)
            assert told.errors == [], told.errors[:5]
            figures.rounds += 1
            figures.entries_checked += result.entries
    finally:
        serve.kill()
    # The documented verifier agrees, on the file as the last restart left it.
    proc = pool_cli("ledger", "verify", str(folder / LEDGER), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verdict = json.loads(proc.stdout)
    assert verdict["ok"] is True
    assert len(told.admits) >= ROUNDS, "the load was too light to mean anything"
    assert torn_injected == recovered == ROUNDS // TORN_EVERY
    figures.admissions_told = len(told.admits)
    figures.releases_told = len(told.releases)
    figures.errors_answered = len(told.errors)
    figures.entries_lost = 0
    figures.extra = {
        "sigkills": ROUNDS,
        "torn_writes_injected": torn_injected,
        "torn_writes_recovered": recovered,
        "unanswered_requests": told.unanswered,
        "retries_found_already_in_ledger": retried["landed_before"],
        "retries_decided_after_restart": retried["decided_now"],
        "final_ledger_length": verdict["length"],
        # Entries durable before the kill whose answer never reached a client: kept, harmless.
        "written_not_told": verdict["length"] - len(told.admits) - len(told.releases),
    }
    figures.record()
