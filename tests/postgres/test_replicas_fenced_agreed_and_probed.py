"""PostgreSQL replicas at a trust boundary (DESIGN.md §6): bounded waits, one
configuration, and a readiness probe that sees the database.

- A replica frozen (SIGSTOP) inside its transaction, holding the ledger's advisory lock,
  costs the others about `idle_in_transaction_s` (5 s), not PostgreSQL's default
  idle-in-transaction timeout: PostgreSQL ends the frozen session, the waiting replica gets
  the lock and answers; when the frozen one wakes its transaction is gone (`ledger_fenced`,
  nothing written), it acknowledges nothing it could not commit, and catches up by itself.
- Replicas whose pool.toml differ never decide under different trees: the digest of the
  deciding configuration is recorded per ledger and checked in every append's transaction,
  a replica with another digest refuses to decide (`config_mismatch`) and `/readyz` names
  both digests; a SIGHUP with a changed pool.toml records the new one.
- `/readyz` is a bounded round trip to PostgreSQL: never ready while it is down or silent.

Real `pool serve` processes, a real PostgreSQL server (tests/support/pg.py); nothing mocked.
Store-level counterparts: tests/postgres/test_store.py.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from joulepool.deployment.config import CONFIG, config_digest, read_config, write_config
from joulepool.ledger.keys import load_key_file
from joulepool.stores.postgres import PostgresStore
from joulepool.tree import Entitlement, Tree
from tests.support.faults import MJ, Figures, Told, audit, claim, drive, roomy
from tests.support.pg import FaultProxy, PgServer, pg_dsn, pg_ledger, pg_proxy, pg_server
from tests.support.servers import Deployment, Serve, sighup, start_serve

__all__ = ["pg_dsn", "pg_ledger", "pg_proxy", "pg_server"]

pytestmark = pytest.mark.postgres

STORE_ERRORS = {"store_unavailable", "commit_outcome_unknown", "ledger_fenced", "store_error"}
# The advisory lock a replica holds, and the state of its session, by application_name.
HOLDER = (
    "SELECT a.state FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid"
    " WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = %s"
)
IDLE_IN_TRANSACTION = (
    "SELECT count(*) FROM pg_stat_activity"
    " WHERE application_name = %s AND state = 'idle in transaction'"
)

_figures = Figures("postgres_replicas")


@pytest.fixture(scope="module", autouse=True)
def _record_figures() -> Iterator[None]:
    yield
    _figures.rounds = max(_figures.rounds, 1)
    _figures.record()


def ledger_in_db(dsn: str, ledger: str) -> list[bytes]:
    with PostgresStore(dsn, ledger=ledger) as store:
        return list(store.entries())


def frozen_holding_the_lock(server: PgServer, serve: Serve, app: str) -> int:
    """SIGSTOP `serve` until it is frozen inside its transaction, holding the ledger's lock,
    as PostgreSQL sees it (its session idle in transaction); return the tries it took."""
    rng = random.Random(14)
    pid = serve.proc.pid
    for attempt in range(1, 401):
        os.kill(pid, signal.SIGSTOP)
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:
            rows = server.sql(HOLDER, (app,))
            if not rows:
                break  # frozen outside a section: no lock held
            if rows[0][0] == "idle in transaction":
                return attempt
            time.sleep(0.01)  # a statement is finishing on the server
        os.kill(pid, signal.SIGCONT)
        time.sleep(rng.uniform(0.0, 0.03))
    raise AssertionError("never caught the replica holding the lock")


def test_a_frozen_replica_stalls_the_others_seconds_and_is_fenced(
    tmp_path: Path, pg_server: PgServer, pg_dsn: str, pg_ledger: str
) -> None:
    deployment = Deployment.create(tmp_path / "d")
    tree = roomy(deployment.folder, devices=10_000)
    key = load_key_file(deployment.folder / "steward.pub")
    a = start_serve(
        deployment.folder,
        "--postgres",
        f"{pg_dsn} application_name=replica-a",
        "--ledger",
        pg_ledger,
    )
    b = start_serve(
        deployment.folder,
        "--postgres",
        f"{pg_dsn} application_name=replica-b",
        "--ledger",
        pg_ledger,
    )
    told = Told()
    stop = threading.Event()
    result: list[Told] = []

    def store_fault(r: httpx.Response) -> bool:
        return r.status_code == 503 and r.json().get("error") in STORE_ERRORS

    # Replica A under load, so its commit thread is inside a section much of the time.
    load = threading.Thread(
        target=lambda: result.append(
            drive([a.url], deployment.operator, "fz", 4, stop, on_error=store_fault, timeout_s=90)
        )
    )
    try:
        load.start()
        time.sleep(1.0)
        tries = frozen_holding_the_lock(pg_server, a, "replica-a")
        try:
            # B decides while A is frozen with the lock: it waits, then answers.
            began = time.monotonic()
            with b.client(deployment.operator) as ops:
                ops.timeout = httpx.Timeout(90)
                r = ops.post("/v1/claims", json=claim("during-freeze"))
            stalled = time.monotonic() - began
            assert r.status_code == 200, r.text
            assert r.json()["verdict"] == "admit"
            told.admits["during-freeze"] = r.json()["seq"]
            assert stalled < 7.5, f"a frozen replica stalled another {stalled:.1f} s"
            # PostgreSQL ended A's session: it holds nothing while it sleeps.
            assert pg_server.sql(IDLE_IN_TRANSACTION, ("replica-a",)) == [(0,)]
            assert pg_server.sql(HOLDER, ("replica-a",)) == []
        finally:
            os.kill(a.proc.pid, signal.SIGCONT)
        # A wakes: the batch it was deciding is refused, never acknowledged; it goes on.
        time.sleep(2.0)
        stop.set()
        load.join(timeout=180)
        assert not load.is_alive()
        told.merge(result[0])
        codes = told.codes
        # The batch A was deciding is refused (`ledger_fenced`: nothing was written), or,
        # if A was frozen before it read the ledger's length, started again on a new
        # connection; either way it is never acknowledged without its entries (the audit).
        assert set(codes) <= STORE_ERRORS, told.errors[:5]
        entries = ledger_in_db(pg_dsn, pg_ledger)
        with a.client(deployment.operator) as ops:
            after = ops.post("/v1/claims", json=claim("after-thaw"))
            assert after.status_code == 200, after.text
            # It caught up with what B committed while it was frozen.
            assert after.json()["seq"] == len(entries)
            told.admits["after-thaw"] = after.json()["seq"]
            assert (
                ops.get("/v1/claims/during-freeze").json()["admitted_seq"]
                == (told.admits["during-freeze"])
            )
        entries = ledger_in_db(pg_dsn, pg_ledger)
        checked = audit(entries, key.kid, key.public_key, tree, told)
        assert checked.lost == [], f"told but not committed: {checked.lost}"
        assert "Traceback" not in a.output() + b.output()
        if codes:
            assert "ERROR:" in a.output(), a.output()[-3000:]
    finally:
        stop.set()
        with_sigcont(a)
        a.kill()
        b.kill()
    _figures.faults_injected += 1
    _figures.entries_checked += checked.entries
    _figures.admissions_told += len(told.admits)
    _figures.releases_told += len(told.releases)
    _figures.errors_answered += len(told.errors)
    _figures.entries_lost += len(checked.lost)
    _figures.extra |= {
        "frozen_stall_s": round(stalled, 2),
        "freeze_tries": tries,
        "frozen_replica_error_codes": dict(sorted(codes.items())),
    }


def with_sigcont(serve: Serve) -> None:
    if serve.proc.poll() is None:
        os.kill(serve.proc.pid, signal.SIGCONT)


# -- one configuration across replicas ------------------------------------------------------


def rewrite_tree(folder: Path, tree: Tree) -> None:
    config = read_config(folder / CONFIG)
    (folder / CONFIG).unlink()
    write_config(folder / CONFIG, config.steward, tree, config.idle, config.period)


def digest_of(folder: Path) -> str:
    c = read_config(folder / CONFIG)
    return config_digest(c).hex()


def no_borrowing(tree: Tree, node: str) -> Tree:
    """`tree` with `node` capped at its guarantee: it may not borrow."""
    return Tree(
        Entitlement(
            e.id,
            e.guarantee_uj,
            e.guarantee_devices,
            e.over_quota_weight,
            parent=e.parent,
            limit_uj=e.guarantee_uj if e.id == node else e.limit_uj,
            priority=e.priority,
        )
        for e in tree
    )


def readyz(serve: Serve) -> httpx.Response:
    return httpx.get(f"{serve.url}/readyz", timeout=10)


def test_replicas_with_different_pool_toml_refuse_to_decide_until_they_agree(
    tmp_path: Path, pg_dsn: str, pg_ledger: str
) -> None:
    one = Deployment.create(tmp_path / "a")
    other = tmp_path / "b"
    shutil.copytree(one.folder, other)
    original = read_config(one.folder / CONFIG).tree
    capped = no_borrowing(original, "robotics")
    rewrite_tree(one.folder, capped)  # A: robotics may not borrow; B: it may
    x, y = digest_of(one.folder), digest_of(other)
    assert x != y
    big = claim("borrow", "robotics", 25 * MJ)  # past robotics' 20 MJ guarantee
    pg = ("--postgres", pg_dsn, "--ledger", pg_ledger)
    a = start_serve(one.folder, *pg)
    b = start_serve(other, *pg, wait=False)
    refusals = 0
    try:
        with a.client(one.operator) as ops_a, b.client(one.operator) as ops_b:
            assert ops_a.post("/v1/claims", json=big).json()["verdict"] == "deny"
            assert ops_a.post("/v1/claims", json=claim("a0")).json()["seq"] == 0
            deadline = time.monotonic() + 60
            while True:
                try:
                    r = readyz(b)
                except httpx.TransportError:
                    r = None
                if r is not None and r.status_code == 503 and "replayed" not in r.text:
                    break
                assert time.monotonic() < deadline, b.output()
                time.sleep(0.1)
            assert r.json()["error"] == "config_mismatch", r.text
            assert x in r.json()["detail"] and y in r.json()["detail"], r.text
            # B refuses to decide: no borrowing admitted under its tree, nothing written.
            r = ops_b.post("/v1/claims", json=big)
            assert (r.status_code, r.json()["error"]) == (503, "config_mismatch"), r.text
            refusals += 1
            assert len(ledger_in_db(pg_dsn, pg_ledger)) == 1
            assert "config_mismatch" in b.output() and "ERROR:" in b.output(), b.output()
            # A routine SIGHUP of B (its pool.toml unchanged) overrides nothing.
            assert "configuration reloaded" in sighup(b)
            assert readyz(b).json()["error"] == "config_mismatch"
            assert ops_a.post("/v1/claims", json=claim("a1")).json()["seq"] == 1
            assert readyz(a).status_code == 200

            # The operator makes pool.toml the same everywhere and reloads A first.
            rewrite_tree(one.folder, original)
            assert "configuration reloaded" in sighup(a)
            assert readyz(b).status_code == 200, readyz(b).text
            assert ops_b.post("/v1/claims", json=big).json()["verdict"] == "admit"

            # A change rolled out by SIGHUP: from A's reload on, B decides nothing until
            # it is reloaded too; at no moment do two trees decide.
            rewrite_tree(one.folder, capped)
            rewrite_tree(other, capped)
            assert "configuration reloaded" in sighup(a)
            r = ops_b.post("/v1/claims", json=claim("b-between", "robotics", 25 * MJ))
            assert (r.status_code, r.json()["error"]) == (503, "config_mismatch"), r.text
            refusals += 1
            assert readyz(b).json()["error"] == "config_mismatch"
            assert ops_a.post("/v1/claims", json=claim("a2")).json()["verdict"] == "admit"
            assert "configuration reloaded" in sighup(b)
            assert readyz(b).status_code == 200
            r = ops_b.post("/v1/claims", json=claim("b-after", "robotics", 25 * MJ))
            assert r.json()["verdict"] == "deny", r.text  # capped: no borrowing now
            assert ops_b.post("/v1/claims", json=claim("b1")).json()["verdict"] == "admit"
        with PostgresStore(pg_dsn, ledger=pg_ledger) as store:
            recorded = store.recorded_config()
        assert recorded is not None and recorded.digest.hex() == x
        assert "Traceback" not in a.output() + b.output()
    finally:
        a.kill()
        b.kill()
    _figures.faults_injected += 2
    _figures.errors_answered += refusals
    _figures.extra["config_mismatch_refusals"] = refusals


# -- readiness sees the database -----------------------------------------------------------


def test_readyz_is_503_within_a_bound_while_postgresql_is_down_or_silent(
    tmp_path: Path, pg_server: PgServer, pg_proxy: FaultProxy, pg_ledger: str
) -> None:
    deployment = Deployment.create(tmp_path / "d")
    serve = start_serve(deployment.folder, "--postgres", pg_proxy.dsn(), "--ledger", pg_ledger)
    waits: list[float] = []
    try:
        assert readyz(serve).status_code == 200
        # The server is gone and the network answers nothing: every probe is answered
        # within the probe's bound, 503 store_unavailable, and logged once.
        pg_proxy.silent = True
        pg_server.restart("kill")
        for _ in range(4):
            began = time.monotonic()
            r = readyz(serve)
            waits.append(time.monotonic() - began)
            assert (r.status_code, r.json()["error"]) == (503, "store_unavailable"), r.text
        assert max(waits) < 3.0, waits
        # Reachable again: ready again, without a restart.
        pg_proxy.silent = False
        deadline = time.monotonic() + 30
        while readyz(serve).status_code != 200:
            assert time.monotonic() < deadline, serve.output()
            time.sleep(0.2)
        # Stopped outright: refused connections, 503 at once; started: ready again.
        pg_server.stop("fast")
        began = time.monotonic()
        r = readyz(serve)
        refused_s = time.monotonic() - began
        assert (r.status_code, r.json()["error"]) == (503, "store_unavailable"), r.text
        with serve.client(deployment.operator) as ops:
            r = ops.post("/v1/claims", json=claim("down"))
            assert (r.status_code, r.json()["error"]) == (503, "store_unavailable"), r.text
        pg_server.start()
        deadline = time.monotonic() + 30
        while readyz(serve).status_code != 200:
            assert time.monotonic() < deadline, serve.output()
            time.sleep(0.2)
        with serve.client(deployment.operator) as ops:
            assert ops.post("/v1/claims", json=claim("up")).json()["verdict"] == "admit"
        log = serve.output()
        unready = [line for line in log.splitlines() if "not ready: store_unavailable" in line]
        assert unready and all(line.startswith("ERROR:") for line in unready), log
        assert len(unready) <= 4, log  # once per change of cause, not once per probe
        assert "Traceback" not in log
    finally:
        pg_proxy.silent = False
        pg_server.start()
        serve.kill()
    _figures.faults_injected += 2
    _figures.extra |= {
        "readyz_silent_postgres_max_s": round(max(waits), 2),
        "readyz_stopped_postgres_s": round(refused_s, 2),
    }
