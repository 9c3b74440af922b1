"""The PostgreSQL store keeps its snapshots in the database: `pool serve --postgres` seals
state snapshots into a table beside the ledger's entries, a restart folds only the tail
after the newest that checks out, and a damaged one is skipped, never trusted in part
(DESIGN.md §4)."""

from __future__ import annotations

import time
from pathlib import Path

import psycopg
import pytest

from tests.support.pg import pg_dsn, pg_ledger, pg_server
from tests.support.servers import Deployment, Serve, admit_and_release, start_serve

__all__ = ["pg_dsn", "pg_ledger", "pg_server"]

pytestmark = pytest.mark.postgres

MJ = 10**12


def lengths(dsn: str, ledger: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT length FROM pool_ledger_snapshots WHERE ledger = %s ORDER BY length DESC",
            (ledger,),
        ).fetchall()
    return [int(r[0]) for r in rows]


def traffic(serve: Serve, d: Deployment, first: int, count: int) -> None:
    admit_and_release(serve, d.operator, first, count, MJ)


def readiness(serve: Serve, d: Deployment) -> tuple[dict[str, object], int]:
    with serve.client(d.operator) as ops:
        ready = ops.get("/readyz").json()
        vision = ops.get("/v1/entitlements/vision").json()
    return ready, int(vision["usage"]["charged_uj"])


def test_design_s4_postgres_snapshots_bound_a_restart_and_a_damaged_one_is_skipped(
    tmp_path: Path, pg_dsn: str, pg_ledger: str
) -> None:
    d = Deployment.create(tmp_path / "d")
    args = ("--postgres", pg_dsn, "--ledger", pg_ledger)
    serve = start_serve(d.folder, *args, "--snapshot-every", "4", "--snapshot-seconds", "3600")
    try:
        traffic(serve, d, 0, 9)
        deadline = time.monotonic() + 30
        while not lengths(pg_dsn, pg_ledger) or lengths(pg_dsn, pg_ledger)[0] < 16:
            assert time.monotonic() < deadline, lengths(pg_dsn, pg_ledger)
            time.sleep(0.1)
    finally:
        serve.kill()
    kept = lengths(pg_dsn, pg_ledger)
    assert 1 < len(kept) <= 3  # the newest few, the rest pruned
    again = start_serve(d.folder, *args)
    try:
        ready, charged = readiness(again, d)
        assert (ready["length"], ready["started_from"], charged) == (18, kept[0], 9 * (MJ // 2))
        traffic(again, d, 9, 1)  # it goes on deciding from the restored state
        # §6.4 across the restart: an id released before the snapshot is found in the
        # ledger's unique claim table, not in any replica's memory.
        with again.client(d.operator) as ops:
            reused = {
                "id": "job-0",
                "entitlement": "vision",
                "gang_size": 1,
                "devices_per_member": 1,
                "estimate": {"uj": MJ, "grade": "HwShunt"},
            }
            refused = ops.post("/v1/claims", json=reused)
        assert (refused.status_code, refused.json()["error"]) == (409, "claim_exists")
        with again.client(d.operator) as ops:
            metrics = ops.get("/metrics").text
        # The snapshot table answers /metrics too: the newest length, and an age that is known.
        figures = dict(
            line.split(" ", 1) for line in metrics.splitlines() if line.startswith("pool_snapshot_")
        )
        assert int(float(figures["pool_snapshot_length"])) >= kept[0]
        assert 0 <= float(figures["pool_snapshot_age_seconds"]) < 600
        with psycopg.connect(pg_dsn) as conn:
            row = conn.execute(
                "SELECT count(*), max(released) FROM pool_ledger_claims WHERE ledger = %s",
                (pg_ledger,),
            ).fetchone()
        assert row == (10, 19)
    finally:
        again.kill()
    # A flipped byte in the newest snapshot's row: skipped as a whole, the next one used.
    with psycopg.connect(pg_dsn) as conn:
        conn.execute(
            "UPDATE pool_ledger_snapshots SET snapshot = overlay(snapshot placing"
            " '\\xff'::bytea from octet_length(snapshot) - 3 for 1)"
            " WHERE ledger = %s AND length = %s",
            (pg_ledger, kept[0]),
        )
    third = start_serve(d.folder, *args)
    try:
        ready, charged = readiness(third, d)
        assert (ready["length"], ready["started_from"]) == (20, kept[1])
        assert charged == 10 * (MJ // 2)
        assert f"snapshot at {kept[0]} in table pool_ledger_snapshots" in third.output()
    finally:
        third.kill()
