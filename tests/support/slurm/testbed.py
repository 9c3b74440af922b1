"""A real, throwaway single-node Slurm 22.05 for the bridge's tests (TEST ONLY).

It follows this project's Slurm bring-up recipe (bringup.sh, its recipe README), done from
Python and kept hermetic: every daemon is started from the installed Debian packages as a
child process (munged, mariadbd, slurmdbd, slurmctld, slurmd, the simulated RAPL meter
of `fake_rapl` and the simulated DCGM exporter of `fake_dcgm`), every file lives under one folder, ports are free ones picked at start,
and `stop()` ends each child by its PID. Nothing runs under systemd, nothing is left.

The one thing outside the folder is the simulated meter's register files at
`/dev/cpu/N/msr` (`acct_gather_energy/rapl` reads only there); it refuses to run where a real
MSR device exists, and removes what it created.

Needs root (daemons drop to the `slurm`, `munge` and `mysql` users) and the packages
`slurm-wlm munge lua-socket`, plus `slurmdbd slurm-wlm-mysql-plugin mariadb-server` for
accounting and energy.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from joulepool.errors import PoolError
from joulepool.files import write_atomically

CORE_PACKAGES = ("slurm-wlm", "munge", "lua-socket", "lua-sec")
ACCOUNTING_PACKAGES = ("slurmdbd", "slurm-wlm-mysql-plugin", "mariadb-server")
_CORE_FILES = {
    "/usr/sbin/slurmctld": "slurm-wlm",
    "/usr/sbin/slurmd": "slurm-wlm",
    "/usr/bin/sbatch": "slurm-wlm",
    "/usr/sbin/munged": "munge",
    "/usr/share/lua/5.1/socket/http.lua": "lua-socket",
    "/usr/share/lua/5.1/ssl.lua": "lua-sec",
}
_ACCOUNTING_FILES = {
    "/usr/sbin/slurmdbd": "slurmdbd",
    "/usr/lib/x86_64-linux-gnu/slurm-wlm/accounting_storage_mysql.so": "slurm-wlm-mysql-plugin",
    "/usr/sbin/mariadbd": "mariadb-server",
}
CLUSTER = "pooltest"
MAX_GPUS = 16
NODE = "localhost"
PARTITION = "debug"

NOOP_JOB_SUBMIT = """\
-- A job_submit.lua that does nothing (the testbed's default, and the benchmark's baseline).
function slurm_job_submit(job_desc, part_list, submit_uid)
  return slurm.SUCCESS
end
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end
"""


class TestbedUnavailable(PoolError):
    """The test cluster cannot be started here: a package is missing, or not root."""

    code = "testbed_unavailable"


class TestbedFailed(PoolError):
    """A daemon of the test cluster did not come up; the detail names it and its log."""

    code = "testbed_failed"


def missing_requirements(accounting: bool = True) -> str | None:
    """A one-line reason the testbed cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "the Slurm testbed must run as root (it starts munged, slurmctld and slurmd)"
    files = dict(_CORE_FILES)
    if accounting:
        files.update(_ACCOUNTING_FILES)
    missing = sorted({pkg for path, pkg in files.items() if not Path(path).exists()})
    if missing:
        return "install the Debian packages " + " ".join(missing) + " (apt-get install)"
    for user in ("slurm", "munge") + (("mysql",) if accounting else ()):
        try:
            pwd.getpwnam(user)
        except KeyError:
            return f"no {user!r} user: reinstall the package that creates it"
    return None


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _chown(path: Path, user: str) -> None:
    entry = pwd.getpwnam(user)
    os.chown(path, entry.pw_uid, entry.pw_gid)


@dataclass
class TestbedOptions:
    """What the test cluster looks like."""

    accounting: bool = True
    """slurmdbd + MariaDB, and energy from the simulated RAPL meter (sacct ConsumedEnergyRaw)."""
    cpus: int = 8
    """CPUs the node advertises (SlurmdParameters=config_overrides lets it exceed the host)."""
    nodes: int = 1
    """slurmd daemons, each its own node (Slurm's multiple-slurmd: one host, one port each)."""
    gpus: int = 4
    """`gpu` GRES on each node, backed by device files the testbed makes (see `_gpu_files`)."""
    watts: int = 100
    """The simulated package's draw."""
    gpu_watts: int = 250
    """Each simulated GPU's draw, served by the simulated DCGM exporter."""
    dcgm_port: int | None = None
    """The simulated exporter's port (a free one when None)."""
    epilog_slurmctld: Path | None = None
    prolog: Path | None = None
    """slurmd's Prolog (run at allocation: PrologFlags=Alloc) and Epilog, as root."""
    epilog: Path | None = None
    extra_conf: Sequence[str] = ()


@dataclass
class Testbed:
    """One running test cluster; use as a context manager or call `start()` and `stop()`."""

    root: Path
    options: TestbedOptions = field(default_factory=TestbedOptions)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    started_s: float = 0.0

    # -- paths -----------------------------------------------------------------------------

    @property
    def etc(self) -> Path:
        """The folder of slurm.conf (and so of job_submit.lua)."""
        return self.root / "etc"

    @property
    def conf(self) -> Path:
        """slurm.conf."""
        return self.etc / "slurm.conf"

    @property
    def job_submit(self) -> Path:
        """The job_submit.lua slurmctld reads (re-read whenever the file changes)."""
        return self.etc / "job_submit.lua"

    @property
    def log(self) -> Path:
        """Daemon logs."""
        return self.root / "log"

    @property
    def munge_socket(self) -> Path:
        """The private munged's socket (AuthInfo=socket=...)."""
        return self.root / "munge" / "sock" / "munge.socket"

    @property
    def env(self) -> dict[str, str]:
        """The environment Slurm's commands need to talk to this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    # -- life ------------------------------------------------------------------------------

    def __enter__(self) -> Testbed:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Bring the cluster up; on any failure, stop what started and raise `TestbedFailed`."""
        reason = missing_requirements(self.options.accounting)
        if reason is not None:
            raise TestbedUnavailable(reason)
        t0 = time.monotonic()
        try:
            self._layout()
            self._start_munge()
            if self.options.gpus:
                self._start_dcgm()
            if self.options.accounting:
                self._start_meter()
                self._start_mariadb()
                self._start_slurmdbd()
            self._write_slurm_conf()
            self._start("slurmctld", ["/usr/sbin/slurmctld", "-D"])
            for node in self.node_names:
                (self.root / "spool" / node).mkdir(exist_ok=True)
                self._start(f"slurmd-{node}", ["/usr/sbin/slurmd", "-D", "-N", node])
            self._wait("node idle", self._node_idle, 30.0)
        except BaseException:
            self.stop()
            raise
        self.started_s = time.monotonic() - t0

    def stop(self) -> None:
        """Cancel every job, then end each daemon by its PID (SIGTERM, then SIGKILL)."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            subprocess.run(
                ["scancel", "--quiet", "--partition", PARTITION],
                env=self.env,
                capture_output=True,
                timeout=10,
                check=False,
            )
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and self.squeue_ids():
                time.sleep(0.1)
        for name in (
            *(f"slurmd-{node}" for node in self.node_names),
            "slurmctld",
            "slurmdbd",
            "mariadb",
            "munged",
            "fake_rapl",
            "fake_dcgm",
        ):
            proc = self.procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=8)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)

    # -- commands --------------------------------------------------------------------------

    def run(
        self,
        args: Sequence[str],
        *,
        user: str | None = None,
        timeout: float = 30.0,
        check: bool = False,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a Slurm command against this cluster, as root or as `user`."""
        argv = list(args)
        full_env = {**self.env, **(env or {})}
        if user is not None:
            argv = ["runuser", "-u", user, "--", "env", f"SLURM_CONF={self.conf}", *argv]
        return subprocess.run(
            argv,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
            cwd=str(cwd or self.root / "jobs"),
        )

    def squeue_ids(self) -> list[int]:
        """Ids of every job slurmctld still lists as pending or running."""
        out = self.run(["squeue", "-h", "-o", "%i"], timeout=10)
        return [int(x) for x in out.stdout.split() if x.isdigit()]

    def set_job_submit(self, text: str) -> None:
        """Replace job_submit.lua (slurmctld re-reads it when it changes)."""
        before = int(self.job_submit.stat().st_mtime) if self.job_submit.exists() else 0
        write_atomically(self.job_submit, text.encode("utf-8"), 0o644)
        # The plugin compares modification times in whole seconds: two changes within one
        # second would look like none, so the new time is always a later whole second.
        mtime = max(before + 1, int(time.time()) + 1)
        os.utime(self.job_submit, (mtime, mtime))

    def kill_slurmctld(self) -> None:
        """SIGKILL slurmctld, as a crash would (its scripts' children are left running)."""
        proc = self.procs.pop("slurmctld")
        proc.kill()
        proc.wait(timeout=10)

    def start_slurmctld(self) -> None:
        """Start slurmctld again from its saved state."""
        self._start("slurmctld", ["/usr/sbin/slurmctld", "-D"])
        self._wait("slurmctld", lambda: self.run(["scontrol", "ping"]).returncode == 0, 30.0)

    @contextlib.contextmanager
    def meter_stopped(self) -> Iterator[None]:
        """Freeze the simulated meter (SIGSTOP): a job run meanwhile reads no energy."""
        proc = self.procs.get("fake_rapl")
        if proc is None:
            yield
            return
        proc.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            proc.send_signal(signal.SIGCONT)

    # -- steps -----------------------------------------------------------------------------

    def _layout(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)
        for sub in ("etc", "state", "spool", "log", "jobs", "munge"):
            (self.root / sub).mkdir(exist_ok=True)
        for sub in ("state", "log"):
            _chown(self.root / sub, "slurm")
        (self.root / "jobs").chmod(0o1777)
        if not self.job_submit.exists():
            self.set_job_submit(NOOP_JOB_SUBMIT)
        self.ports = {name: free_port() for name in ("slurmctld", "slurmd", "slurmdbd", "mariadb")}
        self.ports["dcgm"] = self.options.dcgm_port or free_port()

    def _start(self, name: str, argv: Sequence[str], *, user: str | None = None) -> None:
        out = (self.log / f"{name}.out").open("ab")
        ids: dict[str, object] = {}
        if user is not None:
            entry = pwd.getpwnam(user)
            ids = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
        self.procs[name] = subprocess.Popen(  # type: ignore[call-overload]
            list(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env,
            cwd=str(self.root),
            start_new_session=True,
            **ids,
        )
        out.close()

    def _wait(self, what: str, ready: object, timeout: float) -> None:
        assert callable(ready)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise TestbedFailed(
                        f"{name} exited ({proc.returncode}) while waiting for {what}; see {self.log}"
                    )
            if ready():
                return
            time.sleep(0.05)
        raise TestbedFailed(f"timed out after {timeout:.0f} s waiting for {what}; see {self.log}")

    def _start_munge(self) -> None:
        m = self.root / "munge"
        (m / "sock").mkdir(exist_ok=True)
        (m / "key").mkdir(exist_ok=True)
        key = m / "key" / "munge.key"
        key.write_bytes(os.urandom(1024))
        for p in (m, m / "sock", m / "key", key):
            _chown(p, "munge")
        m.chmod(0o755)
        (m / "sock").chmod(0o755)
        (m / "key").chmod(0o700)
        key.chmod(0o600)
        self._start(
            "munged",
            [
                "/usr/sbin/munged",
                "--foreground",
                f"--key-file={key}",
                f"--socket={self.munge_socket}",
                f"--pid-file={m / 'munged.pid'}",
                f"--log-file={m / 'munged.log'}",
                f"--seed-file={m / 'key' / 'munged.seed'}",
            ],
            user="munge",
        )
        self._wait("munged", self.munge_socket.exists, 10.0)

    def _start_meter(self) -> None:
        ready = self.root / "fake_rapl.ready"
        self._start(
            "fake_rapl",
            [
                sys.executable,
                str(Path(__file__).with_name("fake_rapl.py")),
                "--watts",
                str(self.options.watts),
                "--ready-file",
                str(ready),
            ],
        )
        self._wait("the simulated RAPL meter", ready.exists, 10.0)

    @property
    def node_names(self) -> list[str]:
        """The nodes' names: `localhost` alone, or node1, node2, ... on one host."""
        if self.options.nodes == 1:
            return [NODE]
        return [f"node{i}" for i in range(1, self.options.nodes + 1)]

    @property
    def dcgm_url(self) -> str:
        """The simulated DCGM exporter's metrics URL."""
        return f"http://127.0.0.1:{self.ports['dcgm']}/metrics"

    def reset_gpu_counters(self) -> None:
        """Reset the simulated GPUs' counters to 0, as a driver reload does."""
        self.procs["fake_dcgm"].send_signal(signal.SIGUSR1)

    @property
    def gpu_power_file(self) -> Path:
        """The simulated exporter's per-GPU draw, re-read at every scrape (`set_gpu_watts`)."""
        return self.root / "gpu-watts.json"

    def set_gpu_watts(self, watts: Mapping[int, int]) -> None:
        """Set simulated GPUs' draw (GPU index to watts) from the next scrape on; the rest
        draw `gpu_watts`. Written whole and renamed, so a scrape never reads half of it."""
        text = json.dumps({str(k): v for k, v in watts.items()})
        write_atomically(self.gpu_power_file, text.encode("utf-8"), 0o644)

    def _start_dcgm(self) -> None:
        ready = self.root / "fake_dcgm.ready"
        self._start(
            "fake_dcgm",
            [
                sys.executable,
                str(Path(__file__).with_name("fake_dcgm.py")),
                "--port",
                str(self.ports["dcgm"]),
                "--gpus",
                str(self.options.gpus * self.options.nodes),
                "--watts",
                str(self.options.gpu_watts),
                "--power-file",
                str(self.gpu_power_file),
                "--ready-file",
                str(ready),
            ],
        )
        self._wait("the simulated DCGM exporter", ready.exists, 10.0)

    def _gpu_files(self, first: int) -> str:
        """Character devices standing in for /dev/nvidiaN (slurmd counts a gpu GRES only from
        device files, and names each GPU by its file's number): clones of /dev/null, which
        task/none never binds, so they only make the count and the indices. Each node has
        its own numbers, so its GPUs are its own series at the simulated exporter."""
        folder = self.root / "dev"
        folder.mkdir(exist_ok=True)
        null = os.stat("/dev/null").st_rdev
        last = first + self.options.gpus - 1
        for i in range(first, last + 1):
            path = folder / f"nvidia{i}"
            if not path.exists():
                os.mknod(path, 0o666 | stat.S_IFCHR, null)
        return f"{folder}/nvidia[{first}-{last}]"

    def _start_mariadb(self) -> None:
        data = self.root / "mysql"
        data.mkdir(exist_ok=True)
        _chown(data, "mysql")
        # A private server without grant tables: any user may connect, nothing is installed.
        self._start(
            "mariadb",
            [
                "/usr/sbin/mariadbd",
                "--no-defaults",
                "--user=mysql",
                f"--datadir={data}",
                f"--socket={data / 'mysqld.sock'}",
                f"--port={self.ports['mariadb']}",
                "--bind-address=127.0.0.1",
                "--skip-grant-tables",
                "--skip-log-bin",
                f"--pid-file={data / 'mysqld.pid'}",
                f"--log-error={self.log / 'mariadb.log'}",
                "--innodb-buffer-pool-size=32M",
                "--innodb-log-file-size=8M",
            ],
        )
        self._wait("mariadb", lambda: _port_open(self.ports["mariadb"]), 30.0)

    def _start_slurmdbd(self) -> None:
        conf = self.etc / "slurmdbd.conf"
        conf.write_text(
            "\n".join(
                [
                    "AuthType=auth/munge",
                    f"AuthInfo=socket={self.munge_socket}",
                    "DbdHost=localhost",
                    f"DbdPort={self.ports['slurmdbd']}",
                    "SlurmUser=slurm",
                    f"LogFile={self.log / 'slurmdbd.log'}",
                    f"PidFile={self.root / 'state' / 'slurmdbd.pid'}",
                    "StorageType=accounting_storage/mysql",
                    "StorageHost=127.0.0.1",
                    f"StoragePort={self.ports['mariadb']}",
                    "StorageUser=slurm",
                    "StoragePass=pooltest",
                    "StorageLoc=slurm_acct_db",
                    "",
                ]
            ),
            encoding="utf-8",
        )
        _chown(conf, "slurm")
        conf.chmod(0o600)
        self._start("slurmdbd", ["/usr/sbin/slurmdbd", "-D"])
        self._wait("slurmdbd", lambda: _port_open(self.ports["slurmdbd"]), 30.0)

    def _write_slurm_conf(self) -> None:
        o = self.options
        lines = [
            f"ClusterName={CLUSTER}",
            "SlurmctldHost=localhost",
            f"SlurmctldPort={self.ports['slurmctld']}",
            f"SlurmdPort={self.ports['slurmd']}",
            "SlurmUser=slurm",
            "AuthType=auth/munge",
            f"AuthInfo=socket={self.munge_socket}",
            "CredType=cred/munge",
            f"StateSaveLocation={self.root / 'state'}",
            f"SlurmdSpoolDir={self.root / 'spool' / '%n'}",
            f"SlurmctldPidFile={self.root / 'state' / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.root / 'spool' / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={self.log / 'slurmctld.log'}",
            f"SlurmdLogFile={self.log / 'slurmd-%n.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerParameters=bf_interval=1",
            "SlurmdParameters=config_overrides",
            "MpiDefault=none",
            "MailProg=/bin/true",
            "ReturnToService=2",
            "JobAcctGatherType=jobacct_gather/linux",
            "JobSubmitPlugins=lua",
        ]
        if o.accounting:
            lines += [
                "AccountingStorageType=accounting_storage/slurmdbd",
                "AccountingStorageHost=localhost",
                f"AccountingStoragePort={self.ports['slurmdbd']}",
                # The accounting connection authenticates apart from AuthInfo: without this
                # it looks for the system munged's socket, which the testbed does not start.
                f"AccountingStoragePass={self.munge_socket}",
                "AccountingStoreFlags=job_comment",
                # sacct's AllocTRES lists a job's GPUs only where GPUs are accounted.
                "AccountingStorageTRES=gres/gpu",
                "AcctGatherEnergyType=acct_gather_energy/rapl",
                "AcctGatherNodeFreq=5",
                "JobAcctGatherFrequency=energy=5,task=5",
            ]
        else:
            lines.append("AccountingStorageType=accounting_storage/none")
        if o.epilog_slurmctld is not None:
            lines.append(f"EpilogSlurmctld={o.epilog_slurmctld}")
        if o.prolog is not None:
            # Contain: an .extern step spanning every node, the energy figure of a job on
            # several nodes (one node's job has its own line).
            contain = ",Contain" if o.nodes > 1 else ""
            lines += [f"Prolog={o.prolog}", f"PrologFlags=Alloc{contain}"]
        if o.epilog is not None:
            lines.append(f"Epilog={o.epilog}")
        gres = ""
        if o.gpus:
            lines.append("GresTypes=gpu")
            gres = f" Gres=gpu:{o.gpus}"
            if o.gpus > MAX_GPUS:
                raise TestbedFailed(f"at most {MAX_GPUS} simulated GPUs, asked {o.gpus}")
            (self.etc / "gres.conf").write_text(
                "".join(
                    f"NodeName={node} Name=gpu File={self._gpu_files(k * o.gpus)}\n"
                    for k, node in enumerate(self.node_names)
                ),
                encoding="utf-8",
            )
        lines += list(o.extra_conf)
        for node in self.node_names:
            where = ""
            if o.nodes > 1:
                where = f" NodeHostname=localhost NodeAddr=127.0.0.1 Port={free_port()}"
            lines.append(
                f"NodeName={node}{where} CPUs={o.cpus} Sockets=1 CoresPerSocket={o.cpus}"
                f" ThreadsPerCore=1 RealMemory=2000{gres} State=UNKNOWN"
            )
        lines += [
            f"PartitionName={PARTITION} Nodes={','.join(self.node_names)} Default=YES"
            " MaxTime=INFINITE State=UP",
            "",
        ]
        self.conf.write_text("\n".join(lines), encoding="utf-8")

    def _node_idle(self) -> bool:
        out = self.run(["sinfo", "-h", "-N", "-o", "%t"], timeout=10)
        states = out.stdout.split()
        return (
            out.returncode == 0
            and len(states) == len(self.node_names)
            and all(t.startswith("idle") for t in states)
        )


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def running_testbed(
    options: TestbedOptions | None = None, root: Path | None = None
) -> Iterator[Testbed]:
    """A running test cluster in a fresh folder (removed afterwards unless `root` was given)."""
    made = root is None
    folder = Path(tempfile.mkdtemp(prefix="joulepool-slurm-")) if root is None else root
    bed = Testbed(folder, options or TestbedOptions())
    try:
        with bed:
            yield bed
    finally:
        if made:
            shutil.rmtree(folder, ignore_errors=True)
