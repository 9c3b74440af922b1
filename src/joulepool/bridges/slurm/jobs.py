"""Talking to Pool and to Slurm, and reporting a finished job's energy (API.md; §2.3, §2.5, §6.2).

Standard library only (see `config`): the epilog imports this as SlurmUser.
"""

from __future__ import annotations

import json
import re
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from joulepool.bridges.slurm.config import ADMITTED_STATES, PoolNote, PoolUnreachable, parse_note
from joulepool.errors import PoolError

TERMINAL = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
    }
)
RUNS_AGAIN = frozenset(
    {"PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "SUSPENDED"}
)
"""States of a job that has not ended: at the end of a run, a requeued job's."""
_NO_FIGURE = {"", "0", "18446744073709551614", "18446744073709551615", "4294967294"}
"""sacct's ConsumedEnergyRaw when nothing was read: empty, 0, or Slurm's NO_VAL64/INFINITE64.
A job that ran spent energy; 0 here means no meter, and unknown is not a value."""


class SlurmCommandFailed(PoolError):
    """A Slurm command (squeue, sacct, scontrol) failed; the detail holds its message."""

    code = "slurm_command_failed"


class PoolAnswer:
    """An HTTP answer from `pool serve`: status and JSON body."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status = status
        self.body = body

    @property
    def error(self) -> str | None:
        """The API's error code on a non-200 answer."""
        value = self.body.get("error")
        return value if isinstance(value, str) else None


class PoolClient:
    """A minimal client of `pool serve` (API.md), standard library only."""

    def __init__(self, url: str, token: str, timeout_s: float, ca_file: Path | None = None) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        # https: the certificate chain and the host name are checked, against `ca_file`
        # where given, else the system's CAs; never unverified.
        self.context = (
            ssl.create_default_context(cafile=None if ca_file is None else str(ca_file))
            if self.url.startswith("https://")
            else None
        )

    def call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> PoolAnswer:
        """One request; a transport failure raises `PoolUnreachable`, an HTTP error is returned."""
        status, raw = self.send(method, path, body)
        return PoolAnswer(status, _json(raw))

    def send(
        self, method: str, path: str, body: Mapping[str, Any] | None = None
    ) -> tuple[int, bytes]:
        """One request's status and raw body (API.md); `PoolUnreachable` on a transport failure."""
        data = None if body is None else json.dumps(body).encode()
        # read_bridge_config admits http(s):// URLs only, so no file: or custom scheme.
        req = urllib.request.Request(  # noqa: S310
            self.url + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(  # noqa: S310
                req, timeout=self.timeout_s, context=self.context
            ) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise PoolUnreachable(f"{self.url}: {reason}") from None

    def ledger_length(self) -> int:
        """The ledger's length, the size line of its public checkpoint (API.md
        "Transparency", `GET /checkpoint`): it grows on every admit and release. Public, so
        a bridge token, which may not read `GET /v1/ledger`, has it too. The checkpoint is
        signed at most a second before it is served, so a change may show a pass late: the
        agent then asks for its held jobs a pass later, never not at all."""
        status, raw = self.send("GET", "/checkpoint")
        lines = raw.split(b"\n", 2)
        size = lines[1] if status == 200 and len(lines) == 3 else b""
        if size.isdigit() and size.isascii() and len(size) <= 20:
            return int(size)
        # No checkpoint where the steward's id can be no origin (503 `no_origin`): an
        # operator token still reads the length from the ledger's head.
        answer = self.call("GET", "/v1/ledger")
        length = answer.body.get("length")
        if answer.status != 200 or type(length) is not int:
            raise PoolUnreachable(
                f"{self.url}/checkpoint: HTTP {status}, and /v1/ledger: HTTP {answer.status} "
                f"{answer.error}: no ledger length"
            )
        return length


def _json(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        return {"error": "not_json", "detail": raw[:200].decode(errors="replace")}
    return value if isinstance(value, dict) else {"error": "not_json", "detail": str(value)[:200]}


def run_slurm(argv: Sequence[str], env: Mapping[str, str], timeout_s: float = 30.0) -> str:
    """Run a Slurm command; a failure raises `SlurmCommandFailed` with its message."""
    try:
        done = subprocess.run(
            list(argv),
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except FileNotFoundError:
        raise SlurmCommandFailed(
            f"{argv[0]}: not installed (apt-get install slurm-client)"
        ) from None
    except subprocess.TimeoutExpired:
        raise SlurmCommandFailed(f"{argv[0]}: no answer in {timeout_s:.0f} s") from None
    if done.returncode != 0:
        raise SlurmCommandFailed(f"{' '.join(argv[:3])}: {done.stderr.strip() or done.returncode}")
    return done.stdout


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """What squeue says of a job, and the bridge's note in its admin comment."""

    job_id: int
    state: str
    reason: str
    user: str
    account: str
    oversubscribe: str
    note: PoolNote | None
    gpus: int = 0
    """GPUs allocated (scontrol's TRES gres/gpu), over all nodes."""
    end_s: float | None = None
    """When it ended (epoch seconds), None while it has not."""
    array_job: int | None = None
    """For a task of a job array, the array's job id."""
    started: bool = True
    """Whether it was given nodes (a job cancelled while pending never was)."""
    exempt: str | None = None
    """Why job_submit.lua exempted it from Pool (`account:NAME`, `partition:NAME`,
    `cpu_only`), None for a job it did not exempt."""
    restarts: int = 0
    """How often it was requeued (scontrol's Restarts): each run's energy counts."""
    partition: str | None = None
    """Where it runs or waits: preemption and contention look within one partition."""
    requeue: bool = True
    """Whether Slurm may requeue it (Requeue=1): a job that may not is never a victim."""
    eligible_s: float | None = None
    """When it became eligible to start (EligibleTime, epoch seconds): how long it waits."""

    @property
    def exclusive(self) -> bool:
        """Whether the job had its nodes to itself (OverSubscribe=NO: --exclusive or the partition)."""
        return self.oversubscribe == "NO"


_RECORD = {
    "job": re.compile(r"\AJobId=(\d+) "),
    "array": re.compile(r"\AJobId=\d+ ArrayJobId=(\d+) ArrayTaskId=\S+ "),
    "user": re.compile(r"^   UserId=([^(\s]*)\(", re.M),
    "account": re.compile(r"^   Priority=\S+ Nice=\S+ Account=(\S+) ", re.M),
    "state": re.compile(r"^   JobState=(\S+) Reason=(\S+) ", re.M),
    "oversubscribe": re.compile(r"^   OverSubscribe=(\S+) ", re.M),
    "tres": re.compile(r"^   TRES=(\S*)$", re.M),
    "nodes": re.compile(r"^   NodeList=(\S*)$", re.M),
    "end": re.compile(r"^   StartTime=\S+ EndTime=(\S+) ", re.M),
    "restarts": re.compile(r"^   Requeue=\d+ Restarts=(\d{1,9}) ", re.M),
    "requeue": re.compile(r"^   Requeue=(\d+) Restarts=", re.M),
    "partition": re.compile(r"^   Partition=(\S+) ", re.M),
    "eligible": re.compile(r"^   SubmitTime=\S+ EligibleTime=(\S+)$", re.M),
}
_ADMIN = re.compile(r"^   AdminComment=(\S*) ?$", re.M)
MAX_PARTITION = 200
"""The longest partition name passed on (Slurm's own names are short)."""


def parse_scontrol_jobs(text: str) -> list[SlurmJob]:
    """Jobs from `scontrol show job` (Slurm 22.05 has no machine format for admin comments).

    A user controls some fields (a job name may hold a newline), so a record is trusted only
    as scontrol lays it out: fields at their line's start, and exactly one AdminComment
    line. A record with two is someone writing a note into a field of their own: it is
    left out, as is every record whose note names a claim another record also names.
    """
    jobs: list[SlurmJob] = []
    for record in re.split(r"\n\s*\n(?=JobId=)", text.strip()):
        job = _RECORD["job"].search(record)
        state = _RECORD["state"].search(record)
        if job is None or state is None:
            continue
        admin = _ADMIN.findall(record)
        if len(admin) > 1 or len(re.findall(r"^\s*AdminComment=", record, re.M)) > 1:
            continue

        def first(key: str, record: str = record) -> str:
            m = _RECORD[key].search(record)
            return m.group(1) if m else ""

        jobs.append(
            SlurmJob(
                int(job.group(1)),
                state.group(1),
                state.group(2),
                first("user"),
                first("account"),
                first("oversubscribe"),
                parse_note(admin[0]) if admin else None,
                _gpu_count(first("tres")),
                _epoch_s(first("end")),
                int(first("array")) if first("array") else None,
                first("nodes") not in ("", "(null)"),
                _exempt(admin[0]) if admin else None,
                int(first("restarts") or 0),
                first("partition")[:MAX_PARTITION] or None,
                first("requeue") != "0",
                _epoch_s(first("eligible")),
            )
        )
    # The tasks of one array share its note (Slurm copies it as each task starts).
    claims = Counter(
        (j.note.claim, j.array_job if j.note.tasks is not None else j.job_id)
        for j in jobs
        if j.note is not None
    )
    owners = Counter(claim for claim, _ in claims)
    jobs = [j for j in jobs if j.note is None or owners[j.note.claim] == 1]
    return sorted(jobs, key=lambda j: j.job_id)


_EXEMPT = re.compile(r"\Apool:exempt=([A-Za-z0-9_.:@+/-]{1,200})\Z")


def _exempt(admin: str) -> str | None:
    m = _EXEMPT.match(admin)
    return m.group(1) if m else None


def _epoch_s(text: str) -> float | None:
    """Slurm's local time (2026-12-03T14:35:43) as epoch seconds; None for Unknown."""
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def _gpu_count(tres: str) -> int:
    m = _GPU_TRES.search(tres)
    return int(m.group(1)) if m else 0


def list_jobs(env: Mapping[str, str], job_id: int | None = None) -> list[SlurmJob]:
    """Every job slurmctld still holds (all states), in job id order, i.e. submission order."""
    argv = ["scontrol", "show", "job"]
    if job_id is not None:
        argv.append(str(job_id))
    try:
        out = run_slurm(argv, env)
    except SlurmCommandFailed as exc:
        if job_id is not None and "Invalid job id" in str(exc):
            return []
        raise
    return parse_scontrol_jobs(out)


GPU_ENTRY = re.compile(
    r"\Apool-gpu:(\d+)=(?:(\d+)/(HwShunt|ModelBased|Estimator)|none/([a-z_]{1,40}))/(\d{1,4})"
    r"(?:@(\d{1,9}))?\Z"
)
"""A node's GPU figure for one job, in the node's comment (see `gpu.py`); group 6 is the
run of a requeued job (its Restarts count at its start), absent for a first run."""
GRADES = ("HwShunt", "ModelBased", "Estimator")
"""Best first (§2.3); a sum is graded by its weakest part."""
_GPU_TRES = re.compile(r"(?:^|,)gres/gpu=(\d+)(?:,|$)")


@dataclass(frozen=True, slots=True)
class JobEnergy:
    """What sacct says of a finished job: RAPL's figure, its nodes, its GPUs."""

    cpu_uj: int | None
    """ConsumedEnergyRaw in µJ, None where there is no figure."""
    nodes: tuple[str, ...]
    gpus: int
    """GPUs allocated over all nodes (AllocTRES gres/gpu)."""


@dataclass(frozen=True, slots=True)
class Ended:
    """A bridge job sacct shows ended."""

    state: str
    end_s: float
    """When it ended, epoch seconds."""
    note: PoolNote
    array_job: int | None = None
    started: bool = True
    """Whether it was given nodes: EpilogSlurmctld runs only for a job that was."""


_ARRAY_TASK = re.compile(r"\A(\d+)_(\d+)\Z")


def ended_jobs(env: Mapping[str, str], since_s: float) -> dict[int, Ended]:
    """The bridge's jobs sacct shows ended since `since_s` (epoch seconds), by job id. A
    requeued job's record is its latest run's, so it is not listed while it is pending or
    running again. An array's tasks are listed each under its own job id."""
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since_s))
    out = run_slurm(
        [
            "sacct",
            "-a",
            "-X",
            "-n",
            "-P",
            "-S",
            start,
            "-o",
            "JobIDRaw,JobID,State,End,NodeList,AdminComment",
        ],
        env,
    )
    found: dict[int, Ended] = {}
    for line in out.splitlines():
        cols = line.strip().split("|", 5)
        if len(cols) != 6 or not cols[0].isdigit():
            continue
        state = cols[2].split(" ")[0]
        note = parse_note(cols[5].strip() or None)
        end_s = _epoch_s(cols[3])
        if state not in TERMINAL or note is None or end_s is None:
            continue
        task = _ARRAY_TASK.match(cols[1])
        started = cols[4] not in ("", "None assigned", "None")
        found[int(cols[0])] = Ended(
            state, end_s, note, int(task.group(1)) if task else None, started
        )
    return found


def consumed_energy_uj(job_id: int, env: Mapping[str, str]) -> int | None:
    """The job's energy from sacct ConsumedEnergyRaw (joules → µJ), or None (see `job_energy`)."""
    return job_energy(job_id, env).cpu_uj


def job_energy(job_id: int, env: Mapping[str, str], requeued: bool = False) -> JobEnergy:
    """RAPL's figure for the job from sacct ConsumedEnergyRaw (joules → µJ), with its nodes
    and GPU count.

    The job's own line when it has a figure; else the `.extern` step (all nodes, the whole
    allocation); else, on one node, the largest step, since a batch job's `.batch` step spans
    the job and every other step runs inside it. A multi-node job with neither has no
    complete figure: steps overlap in time, so summing them would count joules twice.

    `requeued`: the run that has just ended in a requeue (sacct's duplicates, `-D`: the
    latest run recorded REQUEUED), not the job's latest record.
    """
    argv = ["sacct", "-j", str(job_id), "-n", "-P"]
    out = run_slurm(
        [*argv, *(["-D"] if requeued else []), "-o", _SACCT_RUN],
        env,
    )
    # One group a run: the job's own line (`N`, or `A_T` for an array's task), then its
    # steps (`N.batch`, `N.extern`, `N.0`).
    runs: list[list[list[str]]] = []
    for line in out.splitlines():
        cols = line.strip().split("|")
        if len(cols) < 6:
            continue
        if "." not in cols[0] or not runs:
            runs.append([])
        if runs:
            runs[-1].append(cols)
    if requeued:
        runs = [r for r in runs if r[0][5].split(" ")[0] == "REQUEUED"]
    job_line: int | None = None
    extern: int | None = None
    steps: list[int] = []
    nodes = 1
    node_list = ""
    gpus = 0
    for cols in runs[-1] if runs else []:
        jid, raw, nn = cols[0], cols[1].strip(), cols[2].strip()
        figure = None if raw in _NO_FIGURE or not raw.isdigit() else int(raw) * 1_000_000
        if jid == str(job_id):
            job_line = figure
            nodes = int(nn) if nn.isdigit() else 1
            node_list = cols[3].strip()
            gpus = _gpu_count(cols[4].strip())
        elif figure is not None and jid.endswith(".extern"):
            extern = figure
        elif figure is not None:
            steps.append(figure)
    names = _hostnames(node_list, env)
    if job_line is not None:
        return JobEnergy(job_line, names, gpus)
    if extern is not None:
        return JobEnergy(extern, names, gpus)
    if nodes == 1 and steps:
        return JobEnergy(max(steps), names, gpus)
    return JobEnergy(None, names, gpus)


_SACCT_RUN = "JobID,ConsumedEnergyRaw,NNodes,NodeList,AllocTRES,State"


def _hostnames(node_list: str, env: Mapping[str, str]) -> tuple[str, ...]:
    if not node_list or node_list in ("None", "None assigned"):
        return ()
    out = run_slurm(["scontrol", "show", "hostnames", node_list], env)
    return tuple(n for n in out.split() if n)


def gpu_figures(
    job_id: int, energy: JobEnergy, env: Mapping[str, str], wait_s: float, run: int = 0
) -> tuple[int, str] | None:
    """The job's GPU energy summed over its nodes, at the weakest grade, or None (§2.3, §2.7).

    Each node's Epilog publishes its figure in the node's comment (`gpu.py`); they arrive
    while the job completes, so this waits up to `wait_s` until the entries cover every GPU
    the job held. A node with no figure, or entries that never cover every GPU, leave the
    job without a complete figure: None, never a partial sum. Only run `run`'s entries
    count (§6.2): an earlier run's, still in a comment until this run's Epilog replaces
    it, is never taken for this run's.
    """
    deadline = time.monotonic() + wait_s
    while True:
        found: list[re.Match[str]] = []
        for node in energy.nodes:
            tokens = node_comment(node, env).split(",")
            found += [
                e
                for e in (GPU_ENTRY.match(t) for t in tokens)
                if e is not None and int(e.group(1)) == job_id and int(e.group(6) or 0) == run
            ]
        covered = sum(int(e.group(5)) for e in found)
        if covered >= energy.gpus or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    if covered != energy.gpus or any(e.group(2) is None for e in found):
        return None
    grade = max((e.group(3) for e in found), key=GRADES.index)
    return sum(int(e.group(2)) for e in found), grade


def node_comment(node: str, env: Mapping[str, str]) -> str:
    """A node's Slurm comment ("" when none): where the GPU Epilog publishes (`gpu.py`)."""
    out = run_slurm(["scontrol", "show", "node", node], env)
    m = re.search(r"^\s*Comment=(.*)$", out, re.M)
    value = m.group(1).strip() if m else ""
    return "" if value == "(null)" else value


def weakest(*grades: str) -> str:
    """The weakest of some grades (§2.3): a sum is never better than its weakest part."""
    return max(grades, key=GRADES.index)


@dataclass(frozen=True, slots=True)
class Report:
    """What the bridge told Pool about a finished job."""

    job_id: int
    claim: str
    outcome: str
    """released, already_released, unknown_claim, not_admitted."""
    actual_uj: int | None = None
    grade: str | None = None
    override: bool = False
    """The service doubted the figure (`implausible_actual`) and the bridge confirmed it."""

    def to_json(self) -> dict[str, Any]:
        """For logs and `--json`."""
        out: dict[str, Any] = {"job": self.job_id, "claim": self.claim, "outcome": self.outcome}
        if self.actual_uj is not None:
            out["actual"] = {"uj": self.actual_uj, "grade": self.grade}
        if self.override:
            out["override"] = True
        return out


def job_figure(
    job_id: int,
    exclusive: bool,
    gpus: int,
    env: Mapping[str, str],
    gpu_wait_s: float | None,
    requeued: bool = False,
    run: int = 0,
) -> tuple[int, str] | None:
    """One job's energy and grade (§2.3, §2.5), or None where any part has no figure.

    RAPL's figure (sacct) plus, for a job that held GPUs, the GPU figures its nodes
    published (`gpu_figures`; `gpu_wait_s` None: the nodes run no GPU Epilog). RAPL's
    figure read for an exclusive allocation is HwShunt; on a shared node the node-wide
    counter covers other jobs too, so the job's figure is a split, ModelBased. The sum takes
    its weakest part's grade; a part with no figure leaves the whole without one. `run`:
    which run's GPU entries count (its Restarts count at its start, §6.2).
    """
    energy = job_energy(job_id, env, requeued)
    if gpus > energy.gpus:
        # sacct lists GPUs only where slurm.conf accounts them (AccountingStorageTRES).
        energy = JobEnergy(energy.cpu_uj, energy.nodes, gpus)
    if energy.cpu_uj is None:
        return None
    figure = (energy.cpu_uj, "HwShunt" if exclusive else "ModelBased")
    if energy.gpus == 0:
        return figure
    gpu = None if gpu_wait_s is None else gpu_figures(job_id, energy, env, gpu_wait_s, run)
    return None if gpu is None else (figure[0] + gpu[0], weakest(figure[1], gpu[1]))


def array_figure(
    job: SlurmJob,
    note: PoolNote,
    env: Mapping[str, str],
    gpu_wait_s: float | None,
    settle_after_s: float | None = 0.0,
) -> tuple[int, str] | None:
    """A job array's energy once every task has ended: each task's figure, summed; a task
    with no figure, or that never ran, counts its share of the estimate, graded Estimator.
    None while a task is still pending or running, or ended less than `settle_after_s` ago
    (§6.2: the claim is the whole array's): a task that ended a moment ago may not have its
    final figure in sacct yet (its own epilog is still at work), so the epilog (None: never)
    leaves arrays to the agent's pass after its grace period."""
    if settle_after_s is None:
        return None
    assert job.array_job is not None
    assert note.tasks is not None
    out = run_slurm(
        ["sacct", "-j", str(job.array_job), "-X", "-n", "-P", "-o", "JobIDRaw,JobID,State,End"],
        env,
    )
    tasks: list[int] = []
    now = time.time()
    for line in out.splitlines():
        cols = line.strip().split("|")
        if len(cols) != 4 or not cols[0].isdigit():
            continue
        end_s = _epoch_s(cols[3])
        if cols[2].split(" ")[0] not in TERMINAL or end_s is None:
            return None
        if now - end_s < settle_after_s:
            return None
        if _ARRAY_TASK.match(cols[1]):
            tasks.append(int(cols[0]))
    tasks = sorted(set(tasks) | {job.job_id})
    per_task = note.estimate_uj // note.tasks
    total, grades = 0, []
    for task in tasks[: note.tasks]:
        figure = job_figure(task, job.exclusive, job.gpus, env, gpu_wait_s)
        total += per_task if figure is None else figure[0]
        grades.append("Estimator" if figure is None else figure[1])
    missing = note.tasks - len(tasks[: note.tasks])
    total += missing * per_task
    grades += ["Estimator"] * (missing > 0)
    return total, weakest(*grades)


def sacct_restarts(job_id: int, env: Mapping[str, str]) -> int:
    """How often a job was requeued, from sacct's runs (`-D`: one line a run, each run
    that was requeued recorded REQUEUED): the Restarts count of a job slurmctld no longer
    remembers, so its last run's GPU entries are found (§6.2)."""
    out = run_slurm(
        ["sacct", "-j", str(job_id), "-D", "-X", "-n", "-P", "-o", "JobIDRaw,State"], env
    )
    return sum(
        1
        for line in out.splitlines()
        if line.strip().split("|")[0] == str(job_id)
        and line.strip().split("|")[-1].startswith("REQUEUED")
    )


def run_detail(job: SlurmJob) -> str:
    """Which run of a requeued job a `run` record is (its Restarts count when it ended)."""
    return f"slurm job {job.job_id} restarts {job.restarts}"


def record_run(
    job: SlurmJob, client: PoolClient, env: Mapping[str, str], gpu_wait_s: float | None = None
) -> dict[str, Any] | None:
    """Keep a requeued run's energy in Pool's action log (DESIGN.md §7; API.md `POST
    /v1/actions`, kind `run`), so the job's release charges every run (§6.2): its figure as
    the epilog takes it, or null where it has none. None for a job that is not the bridge's
    admitted one, or an array's task (an array's claim is settled task by task)."""
    note = job.note
    if note is None or note.state not in ADMITTED_STATES or note.tasks is not None:
        return None
    # Restarts already counts the requeue that ended this run: the run is one before.
    run = max(0, job.restarts - 1)
    figure = job_figure(job.job_id, job.exclusive, job.gpus, env, gpu_wait_s, True, run)
    body = {
        "claim": note.claim,
        "kind": "run",
        "outcome": "recorded",
        "job": str(job.job_id),
        "detail": run_detail(job),
        "energy": None if figure is None else {"uj": figure[0], "grade": figure[1]},
    }
    answer = client.call("POST", "/v1/actions", body)
    if answer.status != 200:
        raise PoolUnreachable(f"run of {note.claim}: HTTP {answer.status} {answer.error}")
    return body


def earlier_runs(claim: str, client: PoolClient) -> list[tuple[int, str] | None]:
    """The runs of a requeued job `record_run` kept (§6.2): each its figure, or None where
    it had none; empty where the service keeps no action log."""
    query = urllib.parse.urlencode({"claim": claim, "kind": "run", "limit": 1000})
    answer = client.call("GET", f"/v1/actions?{query}")
    if answer.status == 503 and answer.error == "no_action_log":
        return []
    runs = answer.body.get("actions")
    if answer.status != 200 or not isinstance(runs, list):
        raise PoolUnreachable(f"earlier runs of {claim}: HTTP {answer.status} {answer.error}")
    out: list[tuple[int, str] | None] = []
    for run in runs:
        evidence = run.get("evidence") if isinstance(run, dict) else None
        uj = evidence.get("energy_uj") if isinstance(evidence, dict) else None
        grade = evidence.get("grade") if isinstance(evidence, dict) else None
        ok = type(uj) is int and uj >= 0 and grade in GRADES
        out.append((int(str(uj)), str(grade)) if ok else None)
    return out


def _reserved_uj(client: PoolClient, claim: str) -> int | None:
    """The claim's reservation (`GET /v1/claims/{id}`), None for a claim Pool never admitted."""
    state = client.call("GET", f"/v1/claims/{claim}")
    if state.status == 404:
        return None
    reserved = state.body.get("reserved", {})
    if state.status != 200 or not isinstance(reserved, dict) or type(reserved.get("uj")) is not int:
        raise PoolUnreachable(f"GET claim {claim}: HTTP {state.status} {state.error}")
    return int(reserved["uj"])


def report_job(
    job: SlurmJob,
    client: PoolClient,
    env: Mapping[str, str],
    gpu_wait_s: float | None = None,
    settle_after_s: float | None = 0.0,
) -> Report | None:
    """Release a finished job's claim with what it spent (§6.2), graded by the evidence (§2.3).

    The actual is `job_figure`'s (for a task of an array, `array_figure`'s, once the whole
    array has ended). Where there is no figure the claim is charged its reservation, graded
    Estimator: never 0 (unknown is not a value), never a partial sum, never a better grade
    than the evidence. Returns None for a job that is not the bridge's, or that Pool never
    admitted; outcome `array_running` while its array is not settled (see `array_figure`).
    """
    note = job.note
    if note is None:
        return None
    if note.state not in ADMITTED_STATES:
        return Report(job.job_id, note.claim, "not_admitted")
    figure: tuple[int, str] | None
    runs: list[tuple[int, str] | None] | None = None
    if note.tasks is not None and job.array_job is not None:
        figure = array_figure(job, note, env, gpu_wait_s, settle_after_s)
        if figure is None:
            return Report(job.job_id, note.claim, "array_running")
    else:
        figure = job_figure(job.job_id, job.exclusive, job.gpus, env, gpu_wait_s, run=job.restarts)
        # Asked for every job: one released by the agent from sacct's record no longer
        # knows its Restarts. A run whose epilog never reached Pool (fewer kept than
        # Restarts) counts as a run with no figure, never as none at all.
        kept = earlier_runs(note.claim, client)
        missing: list[tuple[int, str] | None] = [None] * max(0, job.restarts - len(kept))
        runs = [figure, *kept, *missing]
    if runs is not None and len(runs) > 1:
        # Every run counts (§6.2); one with no figure counts the reservation, graded
        # Estimator, as an array's task does: never 0, never less than was measured.
        reserved = None
        if any(r is None for r in runs):
            reserved = _reserved_uj(client, note.claim)
            if reserved is None:
                return Report(job.job_id, note.claim, "unknown_claim")
        parts = [(reserved, "Estimator") if r is None else r for r in runs]
        actual = sum(int(uj or 0) for uj, _ in parts)
        grade = weakest(*(g for _, g in parts))
    elif figure is not None:
        actual, grade = figure
    else:
        found = _reserved_uj(client, note.claim)
        if found is None:
            return Report(job.job_id, note.claim, "unknown_claim")
        actual, grade = found, "Estimator"
    body: dict[str, Any] = {"actual": {"uj": actual, "grade": grade}}
    answer = client.call("POST", f"/v1/claims/{note.claim}/release", body)
    override = False
    if answer.error == "implausible_actual":
        # The figure is a meter's reading (or the claim's own reservation, which charges
        # nothing new): the ledger records what was measured, so the bridge confirms it as
        # an operator would, and both logs say so (its Report, the service's `override ...
        # by <token>` line). Refusing would leave the claim open, its reservation counted and
        # its devices held, until someone released it by hand (docs/slurm.md).
        override = True
        answer = client.call("POST", f"/v1/claims/{note.claim}/release", {**body, "override": True})
    if answer.status == 200:
        return Report(job.job_id, note.claim, "released", actual, grade, override)
    if answer.error in ("already_released", "unknown_claim"):
        return Report(job.job_id, note.claim, answer.error or "", actual, grade)
    raise PoolUnreachable(
        f"release {note.claim}: HTTP {answer.status} {answer.error}: {answer.body.get('detail')}"
    )
