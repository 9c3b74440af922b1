"""The PostgreSQL store's connections, and the one place a stale connection is retried
(DESIGN.md §6).

A connection idle across a PostgreSQL restart fails its next statement. `Link.run` replaces
it and runs the work once more, on a connection opened just now; a second failure is the
answer. Every read, the schema check, the readiness probe, a section's BEGIN and lock, and
the claim index's statements go through it, so the rule lives here and nowhere else. Work
that sent a COMMIT never does: its outcome would be unknown, and a retry could write twice.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any, TypeAlias, TypeVar

import psycopg

from joulepool.errors import StoreError
from joulepool.stores.postgres.errors import PostgresUnavailable

Conn: TypeAlias = psycopg.Connection[tuple[Any, ...]]
Refusal: TypeAlias = Callable[[str, psycopg.Error, str], StoreError]
"""The store's error for a statement the server refused: (doing, the error, what was written)."""

T = TypeVar("T")

DSN_DEFAULTS = {
    "application_name": "joulepool",
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
    "tcp_user_timeout": "30000",
}
"""Added to a DSN that does not set them. Keepalives and tcp_user_timeout bound how long a
replica waits on a server that vanished from the network (about 30 s), instead of the
kernel's two hours; application_name makes replicas visible in pg_stat_activity."""


def describe(params: dict[str, Any]) -> str:
    """Where a DSN points, for messages: host, port and database; never the password
    (DESIGN.md §6)."""
    host = str(params.get("host") or params.get("hostaddr") or os.environ.get("PGHOST") or "")
    port = str(params.get("port") or os.environ.get("PGPORT") or "5432")
    db = str(params.get("dbname") or os.environ.get("PGDATABASE") or params.get("user") or "")
    if not host or host.startswith("/"):
        where = f"socket {host or 'in the default folder'}, port {port}"
    else:
        where = f"{host}:{port}"
    return f"PostgreSQL at {where}" + (f", database {db!r}" if db else "")


def reason(exc: BaseException) -> str:
    """libpq's message on one line (it names host and port, never the password; DESIGN.md §6)."""
    text = " ".join(str(exc).split())
    for prefix in ("connection failed: ", "connection is bad: "):
        text = text.removeprefix(prefix)
    return text or type(exc).__name__


def lost(conn: Conn | None) -> bool:
    """The connection is gone (server stopped, network cut), not merely a refused statement
    (DESIGN.md §6).

    Asked of the connection, not the exception's class: psycopg files a lock timeout under
    OperationalError too, and that leaves the connection perfectly usable.
    """
    return conn is None or conn.closed or conn.broken


def answered(conn: Conn | None, exc: psycopg.Error) -> bool:
    """Whether a failed COMMIT was refused by a server that is still there, so rolled back
    (DESIGN.md §6).

    Anything else is unknown: no answer at all (no SQLSTATE), a lost connection, or an
    error of class 57 (shutdown, crash) or 58 (I/O) that may have come after the WAL flush.
    """
    state = exc.sqlstate or ""
    return not lost(conn) and bool(state) and state[:2] not in ("57", "58")


class Link:
    """One lazily opened connection, replaced when it breaks (a PostgreSQL restart).

    `connect` opens a set-up connection; `refuse` is the store's error for a statement the
    server refused; `where` names the server in messages. Not thread-safe: its owner holds
    a lock around each use.
    """

    def __init__(self, connect: Callable[[], Conn], refuse: Refusal, where: str) -> None:
        self._connect = connect
        self._refuse = refuse
        self._where = where
        self.conn: Conn | None = None

    def get(self) -> tuple[Conn, bool]:
        """The connection, and whether it was opened just now (a stale one may be retried;
        DESIGN.md §6)."""
        conn = self.conn
        if not lost(conn):
            assert conn is not None
            return conn, False
        self.drop()
        self.conn = self._connect()
        return self.conn, True

    def drop(self) -> None:
        """Close and forget the connection; the server rolls back anything it left open
        (DESIGN.md §6)."""
        conn, self.conn = self.conn, None
        if conn is not None:
            # Closing a broken connection can fail; it is discarded either way.
            with contextlib.suppress(psycopg.Error):
                conn.close()

    def run(self, doing: str, work: Callable[[Conn], T], *, written: str) -> T:
        """`work(conn)`, run once more on a new connection if the one it ran on had gone
        stale (DESIGN.md §6: a replica recovers from a PostgreSQL restart by itself).

        `work` must send no COMMIT: it is repeated whole. A connection lost although opened
        just now is `PostgresUnavailable`, and a statement the server refused is the
        store's refusal, never repeated; `doing` and `written` (what was written: nothing)
        complete their messages.
        """
        while True:
            try:
                conn, fresh = self.get()
            except PostgresUnavailable as exc:
                raise PostgresUnavailable(f"{exc.detail}; {written}") from None
            try:
                return work(conn)
            except psycopg.Error as exc:
                if not lost(conn):
                    raise self._refuse(doing, exc, written) from None
                self.drop()
                if fresh:
                    raise PostgresUnavailable(
                        f"{self._where}: the connection was lost while {doing}: "
                        f"{reason(exc)}; {written}"
                    ) from None
