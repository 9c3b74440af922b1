"""The start-up rollback check (standard §6.1, `stores.base.refuse_rollback`) on a
PostgreSQL ledger another replica is appending to: it reads the ledger's length and its
high-water record in one snapshot, so an append landing between two reads never makes a
healthy ledger look shorter than what it acknowledged (docs/reliability.md §16)."""

from __future__ import annotations

import subprocess
import sys
import time

import psycopg
import pytest

from joulepool.ledger.rollback import LedgerRolledBack
from joulepool.stores.base import refuse_rollback
from joulepool.stores.postgres import PostgresStore
from tests.support.pg import pg_dsn, pg_ledger, pg_server

__all__ = ["pg_dsn", "pg_ledger", "pg_server"]

pytestmark = pytest.mark.postgres

# Another replica: one entry per committed section, for as long as it runs. Each append
# raises the high-water record in its own transaction, as a serving replica's does.
APPENDER = """
import sys
from joulepool.stores.postgres import PostgresStore
store = PostgresStore(sys.argv[1], ledger=sys.argv[2])
n = len(store)
print("ready", flush=True)
while True:
    with store.writing() as w:
        w.unseen(w.length)
        w.append([n.to_bytes(8, "big")])
        n += 1
"""

CHECK_S = 6.0
"""How long the checks run beside the appender: thousands of calls on a loaded machine."""


def test_s6_1_the_start_check_beside_another_replicas_appends_never_refuses_a_whole_ledger(
    pg_dsn: str, pg_ledger: str
) -> None:
    with PostgresStore(pg_dsn, ledger=pg_ledger) as store:
        with store.writing() as w:
            w.append([b"first"])
        appender = subprocess.Popen(
            [sys.executable, "-c", APPENDER, pg_dsn, pg_ledger],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert appender.stdout is not None
            assert appender.stdout.readline().strip() == "ready", appender.stderr
            before = len(store)
            calls, refusals, example = 0, 0, ""
            deadline = time.monotonic() + CHECK_S
            while time.monotonic() < deadline:
                calls += 1
                try:
                    refuse_rollback(store)
                except LedgerRolledBack as exc:
                    refusals += 1
                    example = example or str(exc)
            appended = len(store) - before
            assert appender.poll() is None, appender.stderr.read() if appender.stderr else ""
        finally:
            appender.kill()
            appender.wait()
        print(f"\nstart checks {calls}, appends meanwhile {appended}, refusals {refusals}")
        # The check must have raced real appends for its zero to mean anything.
        assert calls >= 500 and appended >= 100, (calls, appended)
        assert refusals == 0, f"{refusals} of {calls} checks refused a whole ledger: {example}"
        # And it still refuses a real rollback: the record says more than the table holds.
        with store.writing() as w:
            n = w.length
        pg_rows = n - 3
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(
                "DELETE FROM pool_ledger_entries WHERE ledger = %s AND seq >= %s",
                (pg_ledger, pg_rows),
            )
        with pytest.raises(LedgerRolledBack) as info:
            refuse_rollback(store)
        assert (info.value.length, info.value.acknowledged) == (pg_rows, n)
