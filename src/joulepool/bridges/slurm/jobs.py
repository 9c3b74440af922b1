"""Talking to Pool and to Slurm, and reporting a finished job's energy (API.md; §2.3, §2.5, §6.2).

Standard library only (see `config`): the epilog imports this as SlurmUser.
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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

    def __init__(self, url: str, token: str, timeout_s: float) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s

    def call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> PoolAnswer:
        """One request; a transport failure raises `PoolUnreachable`, an HTTP error is returned."""
        data = None if body is None else json.dumps(body).encode()
        # read_bridge_config admits http:// URLs only, so no file: or custom scheme.
        req = urllib.request.Request(  # noqa: S310
            self.url + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:  # noqa: S310
                return PoolAnswer(resp.status, _json(resp.read()))
        except urllib.error.HTTPError as exc:
            return PoolAnswer(exc.code, _json(exc.read()))
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise PoolUnreachable(f"{self.url}: {reason}") from None

    def ledger_length(self) -> int:
        """The ledger's length (API.md `GET /v1/ledger`): it grows on every admit and release."""
        answer = self.call("GET", "/v1/ledger")
        length = answer.body.get("length")
        if answer.status != 200 or type(length) is not int:
            raise PoolUnreachable(f"{self.url}/v1/ledger: HTTP {answer.status} {answer.error}")
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

    @property
    def exclusive(self) -> bool:
        """Whether the job had its nodes to itself (OverSubscribe=NO: --exclusive or the partition)."""
        return self.oversubscribe == "NO"


_RECORD = {
    "job": re.compile(r"\AJobId=(\d+) "),
    "user": re.compile(r"^   UserId=([^(\s]*)\(", re.M),
    "account": re.compile(r"^   Priority=\S+ Nice=\S+ Account=(\S+) ", re.M),
    "state": re.compile(r"^   JobState=(\S+) Reason=(\S+) ", re.M),
    "oversubscribe": re.compile(r"^   OverSubscribe=(\S+) ", re.M),
}
_ADMIN = re.compile(r"^   AdminComment=(\S*) ?$", re.M)


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
            )
        )
    claims = Counter(j.note.claim for j in jobs if j.note is not None)
    jobs = [j for j in jobs if j.note is None or claims[j.note.claim] == 1]
    return sorted(jobs, key=lambda j: j.job_id)


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


def consumed_energy_uj(job_id: int, env: Mapping[str, str]) -> int | None:
    """The job's energy from sacct ConsumedEnergyRaw (joules → µJ), or None when there is none.

    The job's own line when it has a figure; else the `.extern` step (all nodes, the whole
    allocation); else, on one node, the largest step, since a batch job's `.batch` step spans
    the job and every other step runs inside it. A multi-node job with neither has no
    complete figure: steps overlap in time, so summing them would count joules twice.
    """
    out = run_slurm(
        ["sacct", "-j", str(job_id), "-n", "-P", "-o", "JobID,ConsumedEnergyRaw,NNodes"], env
    )
    job_line: int | None = None
    extern: int | None = None
    steps: list[int] = []
    nodes = 1
    for line in out.splitlines():
        cols = line.strip().split("|")
        if len(cols) < 3:
            continue
        jid, raw, nn = cols[0], cols[1].strip(), cols[2].strip()
        figure = None if raw in _NO_FIGURE or not raw.isdigit() else int(raw) * 1_000_000
        if jid == str(job_id):
            job_line = figure
            nodes = int(nn) if nn.isdigit() else 1
        elif figure is not None and jid.endswith(".extern"):
            extern = figure
        elif figure is not None:
            steps.append(figure)
    if job_line is not None:
        return job_line
    if extern is not None:
        return extern
    if nodes == 1 and steps:
        return max(steps)
    return None


@dataclass(frozen=True, slots=True)
class Report:
    """What the bridge told Pool about a finished job."""

    job_id: int
    claim: str
    outcome: str
    """released, already_released, unknown_claim, not_admitted."""
    actual_uj: int | None = None
    grade: str | None = None

    def to_json(self) -> dict[str, Any]:
        """For logs and `--json`."""
        out: dict[str, Any] = {"job": self.job_id, "claim": self.claim, "outcome": self.outcome}
        if self.actual_uj is not None:
            out["actual"] = {"uj": self.actual_uj, "grade": self.grade}
        return out


def report_job(job: SlurmJob, client: PoolClient, env: Mapping[str, str]) -> Report | None:
    """Release a finished job's claim with what it spent (§6.2), graded by the evidence (§2.3).

    A figure read for an exclusive allocation is HwShunt; on a shared node the node-wide
    counter covers other jobs too, so the job's figure is a split, ModelBased (§2.5). With no
    figure at all the claim is charged its reservation, graded Estimator: never 0 (unknown is
    not a value), never a better grade than the evidence. Returns None for a job that is not
    the bridge's, or that Pool never admitted.
    """
    note = job.note
    if note is None:
        return None
    if note.state not in ADMITTED_STATES:
        return Report(job.job_id, note.claim, "not_admitted")
    energy = consumed_energy_uj(job.job_id, env)
    if energy is not None:
        actual, grade = energy, "HwShunt" if job.exclusive else "ModelBased"
    else:
        state = client.call("GET", f"/v1/claims/{note.claim}")
        if state.status == 404:
            return Report(job.job_id, note.claim, "unknown_claim")
        reserved = state.body.get("reserved", {})
        if (
            state.status != 200
            or not isinstance(reserved, dict)
            or type(reserved.get("uj")) is not int
        ):
            raise PoolUnreachable(f"GET claim {note.claim}: HTTP {state.status} {state.error}")
        actual, grade = reserved["uj"], "Estimator"
    answer = client.call(
        "POST", f"/v1/claims/{note.claim}/release", {"actual": {"uj": actual, "grade": grade}}
    )
    if answer.status == 200:
        return Report(job.job_id, note.claim, "released", actual, grade)
    if answer.error in ("already_released", "unknown_claim"):
        return Report(job.job_id, note.claim, answer.error or "", actual, grade)
    raise PoolUnreachable(
        f"release {note.claim}: HTTP {answer.status} {answer.error}: {answer.body.get('detail')}"
    )
