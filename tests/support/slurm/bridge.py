"""A real Slurm (testbed), a real `pool serve` and the bridge installed between them.

One `Bridge` serves a whole test module: Slurm comes up in seconds, but not in nothing.
Every daemon and the agent are children of this process, ended by PID in `close()`, which
runs even when a test fails.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from joulepool.bridges.slurm.config import parse_note
from joulepool.bridges.slurm.install import (
    CONFIG,
    EPILOG,
    GPU_EPILOG,
    GPU_PROLOG,
    install_config,
)
from joulepool.bridges.slurm.jobs import GPU_ENTRY, SlurmJob, list_jobs
from tests.support.servers import Deployment, Serve, free_port, start_serve
from tests.support.slurm.testbed import (
    ACCOUNTING_PACKAGES,
    CORE_PACKAGES,
    Testbed,
    TestbedOptions,
    missing_requirements,
)

WAIT_FOR_GO = "while [ ! -e go-$SLURM_JOB_ID ]; do sleep 0.1; done"
"""A job script that runs until the test calls `Bridge.go`."""
INSTALL_HINT = "needs Slurm, munge, lua-socket and accounting: apt-get install " + " ".join(
    CORE_PACKAGES + ACCOUNTING_PACKAGES
)
ACCOUNTS = {"phys": "vision", "ling": "language", "robo": "robotics"}
SUBMITTER = "nobody"
"""Jobs are submitted by an unprivileged user, as on a real cluster (root may lift any hold)."""


def require_slurm() -> None:
    """Skip with the packages to install when the testbed cannot run here."""
    reason = missing_requirements(accounting=True)
    if reason is not None:
        pytest.skip(f"{reason}; {INSTALL_HINT}")


def python_for(user: str) -> str:
    """An interpreter (3.11+, for tomllib) that `user` may run: the epilog runs as SlurmUser."""
    for candidate in (sys.executable, "/usr/bin/python3"):
        ok = subprocess.run(
            ["runuser", "-u", user, "--", candidate, "-c", "import tomllib"],
            capture_output=True,
            check=False,
        )
        if ok.returncode == 0:
            return candidate
    pytest.skip(
        f"no Python 3.11+ that the {user} user can run for the epilog (apt-get install python3)"
    )


@dataclass
class Bridge:
    """The whole assembly; see the module docstring."""

    root: Path
    bed: Testbed
    deployment: Deployment
    serve: Serve
    port: int
    config: Path
    agent: subprocess.Popen[bytes] | None = None
    closers: list[Callable[[], None]] = field(default_factory=list)
    tls: dict[str, Path] | None = None
    """With TLS: `pool serve`'s certificate and key, and the CA that signed it."""

    # -- Pool ------------------------------------------------------------------------------

    def pool(self) -> httpx.Client:
        """An operator client of the running `pool serve`."""
        if self.tls is None:
            return self.serve.client(self.deployment.operator)
        return httpx.Client(
            base_url=f"https://127.0.0.1:{self.port}",
            headers={"Authorization": f"Bearer {self.deployment.operator}"},
            verify=ssl.create_default_context(cafile=str(self.tls["ca"])),
            timeout=30,
        )

    def claim(self, claim_id: str) -> dict[str, Any]:
        """GET /v1/claims/{id}."""
        with self.pool() as c:
            r = c.get(f"/v1/claims/{claim_id}")
            assert r.status_code == 200, r.text
            return dict(r.json())

    def stop_pool(self) -> None:
        """Take `pool serve` away (SIGTERM, as an operator would)."""
        self.serve.kill(signal.SIGTERM)

    def start_pool(self) -> None:
        """Start `pool serve` again on the same port and folder."""
        self.serve = serve_pool(self.deployment.folder, self.port, self.tls)

    # -- Slurm -----------------------------------------------------------------------------

    def sbatch(self, *args: str, user: str = SUBMITTER) -> subprocess.CompletedProcess[str]:
        """Real sbatch, as `user`, from the shared jobs folder."""
        return self.bed.run(["sbatch", "--parsable", "-o", "job-%j.out", *args], user=user)

    def submit(self, *args: str, user: str = SUBMITTER) -> int:
        """sbatch that must succeed; the job id."""
        done = self.sbatch(*args, user=user)
        assert done.returncode == 0, done.stderr
        return int(done.stdout.strip().split(";")[0])

    def job(self, job_id: int) -> SlurmJob:
        """squeue's view of one job (any state, while slurmctld remembers it)."""
        jobs = list_jobs(self.bed.env, job_id)
        assert jobs, f"slurmctld no longer lists job {job_id}"
        return jobs[0]

    def wait_job(
        self, job_id: int, pred: Callable[[SlurmJob], bool], timeout_s: float = 30
    ) -> SlurmJob:
        """Poll until `pred(job)`, or fail with the job's last state."""
        deadline = time.monotonic() + timeout_s
        job = self.job(job_id)
        while not pred(job):
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} stuck: {job}\n{self.logs()}")
            time.sleep(0.1)
            job = self.job(job_id)
        return job

    def wait_released(self, claim_id: str, timeout_s: float = 30) -> dict[str, Any]:
        """Poll Pool until the claim is released (the epilog has reported)."""
        deadline = time.monotonic() + timeout_s
        while True:
            state = self.claim(claim_id)
            if state["state"] == "released":
                return state
            if time.monotonic() > deadline:
                raise AssertionError(f"claim {claim_id} never released: {state}\n{self.logs()}")
            time.sleep(0.1)

    def set_config(self, **changes: str) -> None:
        """Edit `[pool]` keys of the bridge's file (job_submit.lua reads it at every submission)."""
        lines = self.config.read_text().splitlines()
        for key, value in changes.items():
            lines = [f"{key} = {value}" if ln.startswith(f"{key} =") else ln for ln in lines]
        self.config.write_text("\n".join(lines) + "\n")

    def logs(self) -> str:
        """The tail of the agent's and slurmctld's logs, for failure messages."""
        out = []
        for name in ("agent.log", "log/slurmctld.log"):
            p = self.root / name
            if p.exists():
                out.append(
                    f"--- {name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:])
                )
        return "\n".join(out)

    def go(self, job_id: int) -> None:
        """Let a job that waits for its go file (`WAIT_FOR_GO`) finish."""
        (self.bed.root / "jobs" / f"go-{job_id}").touch()

    def gpu_entries(self, node: str, job_id: int) -> list[re.Match[str]]:
        """The job's GPU figures in the node's comment (published by the GPU Epilog)."""
        out = self.bed.run(["scontrol", "show", "node", node], check=True).stdout
        m = re.search(r"^\s*Comment=(.*)$", out, re.M)
        found = [GPU_ENTRY.match(t) for t in (m.group(1).split(",") if m else [])]
        return [e for e in found if e is not None and int(e.group(1)) == job_id]

    # -- the agent -------------------------------------------------------------------------

    def restart_agent(self) -> None:
        """Stop the agent and start it again (it reads the configuration at its start)."""
        assert self.agent is not None
        self.agent.terminate()
        self.agent.wait(timeout=10)
        self.start_agent()

    def start_agent(self) -> None:
        """`pool slurm agent`, as root, polling every 0.2 s."""
        log = (self.root / "agent.log").open("ab")
        self.agent = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "joulepool",
                "slurm",
                "agent",
                "--config",
                str(self.config),
                "--interval",
                "0.2",
            ],
            env={**self.bed.env, "PYTHONUNBUFFERED": "1"},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()

    def close(self) -> None:
        """End everything this bridge started, by PID, newest first."""
        if self.agent is not None and self.agent.poll() is None:
            self.agent.send_signal(signal.SIGTERM)
            try:
                self.agent.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.agent.kill()
                self.agent.wait(timeout=5)
        self.bed.stop()
        if self.serve.proc.poll() is None:
            self.serve.kill(signal.SIGTERM)


def note_of(job: SlurmJob) -> Any:
    """The bridge's note on a job, which must be there."""
    assert job.note is not None, f"job {job.job_id} has no Pool note"
    return job.note


def serve_pool(folder: Path, port: int, tls: dict[str, Path] | None) -> Serve:
    """`pool serve` on `port`, over TLS with `tls`'s certificate, ready."""
    if tls is None:
        return start_serve(folder, port=port)
    serve = start_serve(
        folder, "--tls-cert", str(tls["cert"]), "--tls-key", str(tls["key"]), wait=False, port=port
    )
    trust = ssl.create_default_context(cafile=str(tls["ca"]))
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"https://127.0.0.1:{port}/readyz", verify=trust, timeout=2).is_success:
                return serve
        except httpx.TransportError:
            pass
        if serve.proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"pool serve over TLS did not come up:\n{serve.output()}")
        time.sleep(0.05)


CONTRIB = Path(__file__).parents[3] / "contrib"


def dispatch_pieces(etc: Path, log: Path) -> tuple[Path, Path]:
    """slurmd's Prolog and Epilog as contrib/slurm's prolog.d/epilog.d dispatchers, with the
    bridge's GPU scripts as pieces beside a site's own (which log the job id to `log`)."""
    out = []
    for phase, bridge_piece in (("prolog", GPU_PROLOG), ("epilog", GPU_EPILOG)):
        dispatcher = etc / f"{phase}.sh"
        shutil.copy2(CONTRIB / "slurm" / f"{phase}.sh", dispatcher)
        pieces = etc / f"{phase}.d"
        pieces.mkdir()
        site = pieces / "10-site"
        site.write_text(f'#!/bin/sh\necho "{phase} $SLURM_JOB_ID" >> {log}\n')
        site.chmod(0o755)
        (pieces / "50-pool-gpu").symlink_to(etc / bridge_piece)
        (pieces / "90-disabled").write_text("#!/bin/sh\nexit 1\n")  # not executable: skipped
        out.append(dispatcher)
    return out[0], out[1]


def start_bridge(
    period: str | None = None,
    tls: dict[str, Path] | None = None,
    nodes: int = 1,
    dispatch: bool = False,
) -> Bridge:
    """Bring up Pool, Slurm with the bridge installed, and the agent; `period` replaces
    the deployment's `[period]` table (DESIGN.md §3), `pool init`'s monthly one by default;
    with `tls` (certificate, key, CA), `pool serve` speaks only TLS and the bridge verifies it;
    with `dispatch`, slurmd runs the GPU scripts as pieces of prolog.d/epilog.d dispatchers
    (`dispatch_pieces`; the site's pieces log to ROOT/site-pieces.log)."""
    require_slurm()
    interpreter = python_for("slurm")
    root = Path(tempfile.mkdtemp(prefix="joulepool-slurm-"))
    root.chmod(0o755)
    started: list[Callable[[], None]] = []
    try:
        deployment = Deployment.create(root / "pool")
        if period is not None:
            config = deployment.folder / "pool.toml"
            config.write_text(config.read_text().replace('[period]\nkind = "month"\n', period))
        port = free_port()
        serve = serve_pool(deployment.folder, port, tls)
        started.append(lambda: serve.kill(signal.SIGTERM))
        token = root / "operator.token"
        token.write_text(deployment.operator)
        etc = root / "etc"
        etc.mkdir()
        dcgm_port = free_port()
        install_config(
            etc,
            url=f"{'https' if tls else 'http'}://127.0.0.1:{port}",
            ca_file=None if tls is None else tls["ca"],
            token=deployment.operator,
            accounts=ACCOUNTS,
            cluster="pooltest",
            # The test machine is shared and slow; production keeps the 500 ms default.
            timeout_ms=900,
            python=interpreter,
            slurm_conf=etc / "slurm.conf",
            gpu=True,
            dcgm_url=f"http://127.0.0.1:{dcgm_port}/metrics",
            gpu_state_dir=root / "gpu-state",
        )
        prolog, epilog = etc / GPU_PROLOG, etc / GPU_EPILOG
        if dispatch:
            prolog, epilog = dispatch_pieces(etc, root / "site-pieces.log")
        bed = Testbed(
            root,
            TestbedOptions(
                epilog_slurmctld=etc / EPILOG,
                prolog=prolog,
                epilog=epilog,
                dcgm_port=dcgm_port,
                nodes=nodes,
            ),
        )
        bed.start()
        bridge = Bridge(root, bed, deployment, serve, port, etc / CONFIG, tls=tls)
        bridge.start_agent()
        return bridge
    except BaseException:
        for stop in reversed(started):
            stop()
        shutil.rmtree(root, ignore_errors=True)
        raise


def module_bridge(**options: Any) -> Iterator[Bridge]:
    """The body of a module-scoped `bridge` fixture: `yield from module_bridge(...)` with
    `start_bridge`'s options; everything is stopped and removed afterwards."""
    b = start_bridge(**options)
    try:
        yield b
    finally:
        b.close()
        shutil.rmtree(b.root, ignore_errors=True)


def percentile(values: list[float], pct: int) -> float:
    """The nearest-rank percentile."""
    ordered = sorted(values)
    rank = max(1, -(-pct * len(ordered) // 100))
    return ordered[rank - 1]


def summary_ms(values: list[float]) -> dict[str, float]:
    """Median and p99 in milliseconds."""
    return {
        "median_ms": round(statistics.median(values) * 1000, 1),
        "p99_ms": round(percentile(values, 99) * 1000, 1),
    }


__all__ = ["Bridge", "note_of", "os", "parse_note", "start_bridge", "summary_ms"]
