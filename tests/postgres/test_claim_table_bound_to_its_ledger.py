"""The PostgreSQL claim table is bound to the steward, the length and the head it covers
(DESIGN.md §4): rows another ledger left under this ledger's name are discarded and rebuilt
from the ledger, never trusted, and the start-up check reads the ledger and cuts the rows
past its end in one transaction under the ledger's lock."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from joulepool.stores.postgres import PostgresClaimIndex, PostgresStore
from tests.support.pg import pg_dsn, pg_ledger, pg_server
from tests.support.servers import Deployment, admit_and_release, start_serve

__all__ = ["pg_dsn", "pg_ledger", "pg_server"]

pytestmark = pytest.mark.postgres

MJ = 10**12


def snapshots(dsn: str, ledger: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT length FROM pool_ledger_snapshots WHERE ledger = %s", (ledger,)
        ).fetchall()
    return [int(r[0]) for r in rows]


def serve_traffic(d: Deployment, dsn: str, ledger: str, first: int, count: int) -> None:
    """`count` claims admitted and released through `pool serve`, with a snapshot sealed."""
    args = ("--postgres", dsn, "--ledger", ledger, "--snapshot-every", "4")
    serve = start_serve(d.folder, *args, "--snapshot-seconds", "3600")
    try:
        admit_and_release(serve, d.operator, first, count, MJ)
        deadline = time.monotonic() + 30
        while not snapshots(dsn, ledger):
            assert time.monotonic() < deadline, "no snapshot was sealed"
            time.sleep(0.1)
    finally:
        serve.kill()


def move_claim_rows(dsn: str, source: str, target: str) -> None:
    """The attack: the target ledger's claim rows replaced by the source ledger's, in every
    claim table the schema has."""
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        tables = [
            str(r[0])
            for r in conn.execute(
                "SELECT table_name FROM information_schema.columns"
                " WHERE column_name = 'ledger' AND table_name LIKE 'pool_ledger_claims%'"
            ).fetchall()
        ]
        for table in tables:
            name = sql.Identifier(table)
            conn.execute(sql.SQL("DELETE FROM {} WHERE ledger = %s").format(name), (target,))
            conn.execute(
                sql.SQL("UPDATE {} SET ledger = %s WHERE ledger = %s").format(name),
                (target, source),
            )


def test_design_s4_a_claim_table_of_another_ledger_is_discarded_and_rebuilt(
    tmp_path: Path, pg_dsn: str, pg_ledger: str
) -> None:
    ours, theirs = Deployment.create(tmp_path / "ours"), Deployment.create(tmp_path / "theirs")
    mine, other = f"{pg_ledger}-ours", f"{pg_ledger}-theirs"
    serve_traffic(ours, pg_dsn, mine, 0, 10)
    # Another steward's ledger, longer, with other claim ids.
    serve_traffic(theirs, pg_dsn, other, 100, 12)
    move_claim_rows(pg_dsn, other, mine)

    again = start_serve(ours.folder, "--postgres", pg_dsn, "--ledger", mine)
    try:
        with again.client(ours.operator) as ops:
            for i in range(10):
                got = ops.get(f"/v1/claims/job-{i}")
                assert got.status_code == 200, (i, got.text)
                reused = {
                    "id": f"job-{i}",
                    "entitlement": "vision",
                    "gang_size": 1,
                    "devices_per_member": 1,
                    "estimate": {"uj": MJ, "grade": "HwShunt"},
                }
                refused = ops.post("/v1/claims", json=reused)
                assert (refused.status_code, refused.json()["error"]) == (409, "claim_exists")
            # Their claims are not ours.
            assert ops.get("/v1/claims/job-100").status_code == 404
        assert "claim index is discarded and rebuilt" in again.output()
    finally:
        again.kill()


def test_design_s4_the_claim_table_check_waits_for_the_ledgers_lock(
    pg_dsn: str, pg_ledger: str
) -> None:
    from joulepool.deployment.open import heads_of

    store = PostgresStore(pg_dsn, ledger=pg_ledger)
    index = PostgresClaimIndex(store)
    try:
        index.bind("steward", heads_of(store))
        done = threading.Event()

        def check() -> None:
            assert index.covers == 0
            done.set()

        with psycopg.connect(pg_dsn, autocommit=True) as holder:
            holder.execute("SELECT pg_advisory_lock(%s)", (store.lock_key,))
            checker = threading.Thread(target=check)
            checker.start()
            # An append would hold this lock: the check neither reads the length nor cuts
            # rows while one is under way.
            assert not done.wait(1.0)
            holder.execute("SELECT pg_advisory_unlock(%s)", (store.lock_key,))
            assert done.wait(30)
            checker.join()
        assert index.covers == 0
    finally:
        index.close()
        store.close()
