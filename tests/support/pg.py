"""A real, throwaway PostgreSQL server for the PostgreSQL store's tests (DESIGN.md §6).

DESIGN.md §6: tests that need PostgreSQL start a real server, never a mock. `PgServer` runs
`initdb` into a temporary folder and starts `postgres` on a free loopback port and a private
socket folder, with fsync on, so a commit in a test is as durable as in production. As root
it runs both as an unprivileged user (PostgreSQL refuses to run as root). `restart()`,
`stop()` and `start()` let reliability tests take the server away under a running store.

Fixtures, for a test module to import: `pg_server` (one server per test session), `pg_dsn`
(its database), `pg_ledger` (a ledger name no other test uses) and `pg_proxy` (a relay that
cuts a connection around a COMMIT, or never answers). Without the server binaries, every
test using them is skipped with the package to install.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import psycopg
import pytest

PG_DIRS = ("/usr/lib/postgresql/17/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/15/bin")
INSTALL_HINT = "needs PostgreSQL server binaries (initdb, postgres): apt-get install postgresql"
SUPERUSER = "postgres"
DATABASE = "joulepool_test"
START_TIMEOUT_S = 30.0
INITDB_FLAGS = ("--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions")
# fsync and synchronous_commit stay on: a test's commit is as durable as production's.
SETTINGS = {
    "fsync": "on",
    "synchronous_commit": "on",
    "full_page_writes": "on",
    "shared_buffers": "16MB",
    "max_connections": "60",
    "max_wal_size": "256MB",
    "log_min_messages": "warning",
}

_ledgers = itertools.count()


def find_binaries() -> tuple[Path, Path] | None:
    """`initdb` and `postgres` from PATH or Debian's versioned folders, or None."""
    for folder in (None, *PG_DIRS):
        initdb = shutil.which("initdb", path=folder)
        postgres = shutil.which("postgres", path=folder)
        if initdb and postgres:
            return Path(initdb), Path(postgres)
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_as() -> pwd.struct_passwd | None:
    """The unprivileged account to run the server as when we are root; None when we are not."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise RuntimeError(
        "running as root and no unprivileged user (postgres, nobody) to run PostgreSQL as"
    )


class PgServer:
    """One PostgreSQL cluster in a temporary folder, on 127.0.0.1 and a private socket."""

    def __init__(self, initdb: Path, postgres: Path) -> None:
        self._initdb = initdb
        self._postgres = postgres
        self._account = _run_as()
        # Not under pytest's tmp_path: that is mode 0700 and owned by root, which the
        # unprivileged server account could not enter.
        self.base = Path(tempfile.mkdtemp(prefix="joulepool-pg-"))
        self.data = self.base / "data"
        self.socket_dir = self.base / "sock"
        self.log = self.base / "postgres.log"
        self.port = _free_port()
        self.host = "127.0.0.1"
        self._proc: subprocess.Popen[bytes] | None = None
        self.startup_s = 0.0
        self.initdb_s = 0.0
        self._init_cluster()

    # -- addresses -----------------------------------------------------------------------

    def dsn(self, dbname: str = DATABASE) -> str:
        """A libpq connection string for `dbname` over TCP loopback."""
        return f"host={self.host} port={self.port} dbname={dbname} user={SUPERUSER}"

    def socket_dsn(self, dbname: str = DATABASE) -> str:
        """The same database through the server's Unix socket."""
        return f"host={self.socket_dir} port={self.port} dbname={dbname} user={SUPERUSER}"

    # -- life cycle ----------------------------------------------------------------------

    def _preexec_kwargs(self) -> dict[str, object]:
        if self._account is None:
            return {}
        return {"user": self._account.pw_uid, "group": self._account.pw_gid, "extra_groups": []}

    def _init_cluster(self) -> None:
        self.socket_dir.mkdir()
        if self._account is not None:
            for path in (self.base, self.socket_dir):
                os.chown(path, self._account.pw_uid, self._account.pw_gid)
        started = time.monotonic()
        # --no-sync only skips flushing initdb's template files; the running server keeps
        # fsync on, which is what the tests rely on.
        result = subprocess.run(  # type: ignore[call-overload]
            [str(self._initdb), "-D", str(self.data), "-U", SUPERUSER, *INITDB_FLAGS],
            capture_output=True,
            check=False,
            env=self._env(),
            cwd=self.base,
            **self._preexec_kwargs(),
        )
        self.initdb_s = time.monotonic() - started
        if result.returncode != 0:
            raise RuntimeError(f"initdb failed: {result.stderr.decode(errors='replace')[-2000:]}")
        self.start()
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        if self._account is not None:
            env["HOME"] = str(self.base)
            env["USER"] = env["LOGNAME"] = self._account.pw_name
        return env

    @property
    def running(self) -> bool:
        """Whether the postmaster this object started is alive."""
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> float:
        """Start the server on the same port and data; return seconds until it accepts."""
        if self.running:
            return 0.0
        started = time.monotonic()
        log = self.log.open("ab")
        try:
            self._proc = subprocess.Popen(  # type: ignore[call-overload]
                [str(self._postgres), "-D", str(self.data), "-p", str(self.port)]
                + ["-k", str(self.socket_dir), "-c", f"listen_addresses={self.host}"]
                + [arg for k, v in SETTINGS.items() for arg in ("-c", f"{k}={v}")],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._env(),
                cwd=self.base,
                start_new_session=True,
                **self._preexec_kwargs(),
            )
        finally:
            log.close()
        deadline = started + START_TIMEOUT_S
        while True:
            try:
                with psycopg.connect(self.dsn("postgres"), connect_timeout=2):
                    break
            except psycopg.OperationalError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    tail = self.log.read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"postgres did not start:\n{tail}") from None
                time.sleep(0.02)
        self.startup_s = time.monotonic() - started
        return self.startup_s

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: "fast" (SIGINT: clean), "immediate" (SIGQUIT: like a crash, the
        next start replays the WAL) or "kill" (SIGKILL to the postmaster, then its children)."""
        if self._proc is None:
            return
        sig = {"fast": signal.SIGINT, "immediate": signal.SIGQUIT, "kill": signal.SIGKILL}[mode]
        if self._proc.poll() is None:
            if mode == "kill":
                # The whole session: backends orphaned by a killed postmaster would hold the port.
                os.killpg(self._proc.pid, signal.SIGKILL)
            else:
                self._proc.send_signal(sig)
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait()
        if mode == "kill":
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            # Backends outlive the postmaster for a moment, holding its shared memory: a start
            # before they are gone fails with "pre-existing shared memory block".
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    os.killpg(self._proc.pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.02)
            # A killed postmaster leaves its pid file; the next start must not mistake it.
            with contextlib.suppress(FileNotFoundError):
                (self.data / "postmaster.pid").unlink()
        self._proc = None

    def restart(self, mode: str = "fast") -> float:
        """Stop and start again on the same port; return the seconds the start took.

        After a SIGKILL its orphaned backends may hold the shared memory a moment longer,
        and the new postmaster refuses to start until they are gone: try again briefly.
        """
        self.stop(mode)
        for _ in range(40):
            try:
                return self.start()
            except RuntimeError:
                time.sleep(0.25)
        return self.start()

    def sql(
        self, query: str, params: Sequence[object] = (), dbname: str = DATABASE
    ) -> list[tuple[object, ...]]:
        """Run one statement as the superuser, outside any store (to tamper, or to look)."""
        with psycopg.connect(self.dsn(dbname), autocommit=True) as conn:
            cur = conn.execute(query.encode(), params)
            return cur.fetchall() if cur.description else []

    def close(self) -> None:
        """Stop the server and delete its folder."""
        self.stop("fast")
        shutil.rmtree(self.base, ignore_errors=True)


# The COMMIT statement in a Query or Parse message, and the server's CommandComplete tag for
# it: both end the word with a NUL, so "BEGIN ISOLATION LEVEL READ COMMITTED" matches neither.
_COMMIT_SENT = b"COMMIT\x00"
_COMMIT_DONE = b"COMMIT\x00"
_LEDGER_LOCK = b"pg_advisory_xact_lock"  # sent in full once per connection, then prepared


class FaultProxy:
    """A TCP relay in front of the server that fails the way networks do, on request.

    `cut_next_commit("before")` drops the next ledger writer's connection that sends COMMIT
    before the server gets it (the transaction rolls back); `cut_next_commit("after")` lets
    the COMMIT through and drops the connection once the server has answered it, withholding
    that answer (the entries are committed, the client cannot know). A ledger writer's
    connection is one that has taken the ledger's advisory lock: the claim index's and the
    snapshots' own connections commit too, but a cut there only delays a cache. With `silent` set, new
    connections are accepted and never answered, like a host that has vanished.
    """

    def __init__(self, server: PgServer) -> None:
        self._server = server
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self.silent = False
        self.cuts: list[str] = []
        self._armed: str | None = None
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def dsn(self, dbname: str = DATABASE) -> str:
        """The test database, reached through this relay."""
        return f"host=127.0.0.1 port={self.port} dbname={dbname} user={SUPERUSER}"

    def cut_next_commit(self, when: str) -> None:
        """Arm one cut: "before" the next COMMIT reaches the server, or "after" it answered."""
        assert when in ("before", "after")
        with self._lock:
            self._armed = when

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self._sockets.append(client)
            if self.silent:
                continue
            try:
                upstream = socket.create_connection((self._server.host, self._server.port))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets.append(upstream)
            pair = _Pair(self, client, upstream)
            threading.Thread(target=pair.client_to_server, daemon=True).start()
            threading.Thread(target=pair.server_to_client, daemon=True).start()

    def _take(self, when: str) -> bool:
        with self._lock:
            if self._armed == when:
                self._armed = None
                return True
            return False

    def close(self) -> None:
        """Stop relaying and close every connection."""
        self._closed = True
        self._listener.close()
        with self._lock:
            for s in self._sockets:
                _hang_up(s)


def _hang_up(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    s.close()


def _spans(tail: bytes, chunk: bytes, pattern: bytes) -> tuple[bool, bytes]:
    """Whether `pattern` ends in `chunk` (perhaps begun in the previous one), and the new tail.

    The tail is one byte short of the pattern, so a match already seen is never seen again.
    """
    keep = len(pattern) - 1
    return pattern in tail + chunk, (tail + chunk)[-keep:]


class _Pair:
    """One relayed connection: a client socket, its upstream socket, and a pending cut."""

    def __init__(self, proxy: FaultProxy, client: socket.socket, upstream: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        self.commit_in_flight = False
        self.writes_ledger = False

    def _cut(self, what: str) -> None:
        self.proxy.cuts.append(what)
        _hang_up(self.client)
        _hang_up(self.upstream)

    def client_to_server(self) -> None:
        tail = lock_tail = b""
        while True:
            try:
                chunk = self.client.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                _hang_up(self.upstream)
                return
            locks, lock_tail = _spans(lock_tail, chunk, _LEDGER_LOCK)
            self.writes_ledger = self.writes_ledger or locks
            hit, tail = _spans(tail, chunk, _COMMIT_SENT)
            if hit and self.writes_ledger:
                if self.proxy._take("before"):
                    self._cut("before commit")
                    return
                if self.proxy._take("after"):
                    self.commit_in_flight = True
            try:
                self.upstream.sendall(chunk)
            except OSError:
                _hang_up(self.client)
                return

    def server_to_client(self) -> None:
        tail = b""
        while True:
            try:
                chunk = self.upstream.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                _hang_up(self.client)
                return
            hit, tail = _spans(tail, chunk, _COMMIT_DONE)
            if self.commit_in_flight and hit:
                self._cut("after commit")
                return
            try:
                self.client.sendall(chunk)
            except OSError:
                _hang_up(self.upstream)
                return


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One PostgreSQL server for the whole session, stopped and deleted at its end."""
    binaries = find_binaries()
    if binaries is None:
        pytest.skip(INSTALL_HINT)
    server = PgServer(*binaries)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def pg_dsn(pg_server: PgServer) -> Iterator[str]:
    """The test database's DSN, with the server running (a test that stopped it gets it back)."""
    pg_server.start()
    yield pg_server.dsn()
    pg_server.start()


@pytest.fixture
def pg_ledger(request: pytest.FixtureRequest) -> str:
    """A ledger name no other test in the session uses, so tests share one table safely."""
    return f"{request.node.name[:40]}-{os.getpid()}-{next(_ledgers)}"


@pytest.fixture
def pg_proxy(pg_server: PgServer) -> Iterator[FaultProxy]:
    """A fault-injecting relay to the running server, closed after the test."""
    pg_server.start()
    proxy = FaultProxy(pg_server)
    try:
        yield proxy
    finally:
        proxy.close()
