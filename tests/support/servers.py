"""Real `pool serve` processes for tests: a free loopback port, ready once replay is done."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from joulepool.deployment.config import CONFIG, TOKENS, read_config
from joulepool.deployment.init import init_deployment
from joulepool.service.tokens import add_token


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Deployment:
    """A deployment folder with an operator token and one tenant token per team."""

    folder: Path
    operator: str
    tenants: dict[str, str] = field(default_factory=dict)

    @classmethod
    def create(
        cls, folder: Path, tenants: tuple[str, ...] = ("vision", "language", "robotics")
    ) -> Deployment:
        init_deployment(folder, "steward")
        d = cls(folder, "")
        d.operator = d.add_token("ops", "operator")
        for t in tenants:
            d.tenants[t] = d.add_token(t, f"tenant:{t}")
        return d

    def add_token(self, name: str, scope: str) -> str:
        """A new token in this deployment's tokens.toml, its scope checked against pool.toml."""
        return add_token(self.folder / TOKENS, name, scope, read_config(self.folder / CONFIG).tree)


@dataclass
class Serve:
    """One running `pool serve`."""

    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def client(self, token: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        self.proc.wait(timeout=30)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def pool_cli(
    *args: str, stdin: str | None = None, timeout_s: int = 120
) -> subprocess.CompletedProcess[str]:
    """The `pool` command line, as an operator runs it: a real process, fed `stdin` (none
    unless given)."""
    return subprocess.run(
        [sys.executable, "-m", "joulepool", *args],
        capture_output=True,
        text=True,
        check=False,
        **({"stdin": subprocess.DEVNULL} if stdin is None else {"input": stdin}),
        timeout=timeout_s,
    )


def start_serve(
    folder: Path,
    *extra: str,
    wait: bool = True,
    port: int | None = None,
    nofile: int | None = None,
) -> Serve:
    """Start `pool serve` on a free port and wait until /readyz says ready; under a
    descriptor limit (soft and hard, so the service cannot raise it) when `nofile` is given."""
    port = port or free_port()
    log = folder.parent / f"serve-{port}.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-m", "joulepool", "serve", str(folder), "--port", str(port), *extra]
    if nofile is not None:
        argv = ["sh", "-c", f'ulimit -n {nofile} && exec "$0" "$@"', *argv]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    serve = Serve(proc, f"http://127.0.0.1:{port}", log)
    if wait:
        wait_ready(serve)
    return serve


def serving(folder: Path) -> Generator[tuple[Deployment, Serve], None, None]:
    """A new deployment at `folder` with its tokens, served until the generator closes: the
    body of a module-scoped `served` fixture (`yield from serving(...)`)."""
    deployment = Deployment.create(folder)
    serve = start_serve(deployment.folder)
    try:
        yield deployment, serve
    finally:
        serve.kill()


def wait_ready(serve: Serve, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if serve.proc.poll() is not None:
            raise RuntimeError(f"pool serve exited {serve.proc.returncode}:\n{serve.output()}")
        try:
            if httpx.get(f"{serve.url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    serve.kill()
    raise RuntimeError(f"pool serve not ready in {timeout_s} s:\n{serve.output()}")


def wait_known(serve: Serve, token: str, timeout_s: float = 10) -> None:
    """Wait until the running `pool serve` takes in a token added to its tokens.toml
    (it watches the file: within a second, docs/api.md "Tokens")."""
    deadline = time.monotonic() + timeout_s
    with serve.client(token) as client:
        while client.get("/v1/token").status_code == 401:
            if time.monotonic() >= deadline:
                raise AssertionError(f"pool serve never took the token in:\n{serve.output()}")
            time.sleep(0.05)


def sighup(serve: Serve) -> str:
    """Send SIGHUP; return what `pool serve` said about it (reloaded, or refused and why)."""
    seen = len(serve.output())
    serve.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        said = serve.output()[seen:]
        if "configuration reloaded" in said or "reload refused" in said:
            return said
        time.sleep(0.05)
    raise AssertionError(f"no word on SIGHUP:\n{serve.output()}")


def admit_and_release(serve: Serve, token: str, first: int, count: int, uj: int) -> None:
    """Admit claims `job-<first>`.. of `uj` µJ for vision through the API, releasing each
    at half its estimate: `count` admissions and `count` releases, each asserted."""
    with serve.client(token) as ops:
        for i in range(first, first + count):
            body = {
                "id": f"job-{i}",
                "entitlement": "vision",
                "gang_size": 1,
                "devices_per_member": 1,
                "estimate": {"uj": uj, "grade": "HwShunt"},
            }
            assert ops.post("/v1/claims", json=body).json()["verdict"] == "admit"
            release = {"actual": {"uj": uj // 2, "grade": "HwShunt"}}
            assert ops.post(f"/v1/claims/job-{i}/release", json=release).status_code == 200
