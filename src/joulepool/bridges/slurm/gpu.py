"""GPU energy per job, on each node: slurmd's Prolog and Epilog (§2.3, §2.5, §2.7, §6.2).

    python -m joulepool.bridges.slurm.gpu prolog --state-dir DIR [--dcgm-url URL]
    python -m joulepool.bridges.slurm.gpu epilog --state-dir DIR [--dcgm-url URL]

slurmd runs both as root on every node of a job (with `PrologFlags=Alloc`, the Prolog at
allocation), with `SLURM_JOB_ID`, `SLURMD_NODENAME` and `SLURM_JOB_GPUS` (the indices of
exactly the GPUs Slurm allocated to the job on this node) set. The Prolog reads those GPUs'
energy counters and keeps the readings in DIR; the Epilog reads them again and publishes
the node's figure for the job in the node's Slurm comment, where the controller's epilog
(and `pool slurm agent`) find it:

    pool-gpu:<job>=<µJ>/<grade>/<gpus>      the job's GPUs on this node spent <µJ>
    pool-gpu:<job>=none/<reason>/<gpus>     no figure: the reason (counter_reset, ...)

A requeued job's later run's entry ends in `@<run>` (`pool-gpu:7=912000/HwShunt/1@1`):
its Restarts count when it started (`SLURM_JOB_RESTART_COUNT`, kept by the Prolog), so the
controller's epilog never takes an earlier run's entry, still in the comment while the
run's own Epilog is at work, for the run that has just ended. A first run's entry has no
tag, as before. A node's comment keeps one entry a job, the newest.

slurmd runs the Prolog once for a job id on a node while it remembers the job's
credential (`slurm.conf` CredExpire, 120 s by default), unless the new run's credential is
newer than the old one's revocation; Slurm holds a requeued job back that long (its
EligibleTime), so each run it starts gets its Prolog. A run an administrator starts at
once on a node it ran on (`scontrol update jobid=N StartTime=now`) may get none: its
Epilog finds no start reading, publishes `none/no_start_reading`, and the run counts its
reservation (docs/slurm.md, "A requeue keeps the books").

The counters come from NVML where it works on the node (nvidia-ml-py and the driver), else
from the node's DCGM exporter (`--dcgm-url`). A whole GPU held by one job keeps the
meter's grade (HwShunt); GPUs shared through shards or MPS would be split by `attribute()`
and graded ModelBased (`gpu_energy`). A counter that went back (driver reload, exporter
restart) leaves the node without a figure (`counter_reset`), never a negative one or 0.

Neither script ever fails: a Prolog or Epilog exiting non-zero drains the node and requeues
the job, so every failure becomes a `none/<reason>` entry and a line on standard error.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from joulepool.bridges.slurm.jobs import GPU_ENTRY, SlurmCommandFailed, node_comment, run_slurm
from joulepool.errors import InvalidInput, PoolError
from joulepool.grade import Energy, Grade
from joulepool.meters import (
    DcgmMeter,
    Meter,
    MeterUnavailable,
    NvmlMeter,
    Reading,
    UnavailableReason,
    claim_share,
)

KEEP_ENTRIES = 100
"""Entries a node's comment keeps (newest last): enough for the controller's epilog and the
agent's grace period on a busy node; an entry pushed out leaves that job at its reservation."""
_GPUS = re.compile(r"\A\d{1,4}(,\d{1,4}){0,63}\Z")


@dataclass(frozen=True, slots=True)
class NodeFigure:
    """One node's GPU figure for one job: energy or the reason there is none (§2.7)."""

    job_id: int
    gpus: int
    energy: Energy | None
    reason: str = ""
    run: int | None = None
    """Which run of the job (its Restarts count at its start); None: not known."""

    def entry(self) -> str:
        """The node comment's entry (see the module docstring)."""
        tag = f"@{self.run}" if self.run else ""
        if self.energy is None:
            return f"pool-gpu:{self.job_id}=none/{self.reason}/{self.gpus}{tag}"
        grade = self.energy.grade.value
        return f"pool-gpu:{self.job_id}={self.energy.uj}/{grade}/{self.gpus}{tag}"


def parse_job_gpus(raw: str) -> list[str]:
    """`SLURM_JOB_GPUS` ("0,2") as GPU indices; empty for a job without GPUs here."""
    raw = raw.strip()
    if not raw:
        return []
    if not _GPUS.match(raw):
        raise InvalidInput("SLURM_JOB_GPUS", f"must be GPU indices like 0,2, got {raw[:80]!r}")
    indices = raw.split(",")
    if len(set(indices)) != len(indices):
        raise InvalidInput("SLURM_JOB_GPUS", f"lists a GPU twice: {raw!r}")
    return [str(int(i)) for i in indices]


def meters_for(gpus: Sequence[str], source: str, dcgm_url: str | None) -> list[Meter]:
    """One meter per GPU index, from `source` ("nvml" or "dcgm") (§2.3)."""
    if source == "nvml":
        return [NvmlMeter(g) for g in gpus]
    if dcgm_url is None:
        raise InvalidInput("--dcgm-url", "NVML cannot be read here and no DCGM exporter is named")
    return [DcgmMeter(dcgm_url, g) for g in gpus]


def choose_source(gpus: Sequence[str], dcgm_url: str | None) -> str:
    """NVML where it reads every one of the job's GPUs, else the DCGM exporter (§2.3).

    Every GPU is tried, not the first alone: a job whose second GPU NVML cannot see would
    otherwise be read through NVML and refused as `missing_device` at its first read.
    """
    try:
        for gpu in gpus:
            NvmlMeter(gpu).read()
    except MeterUnavailable as exc:
        if dcgm_url is None:
            raise
        if exc.reason in (UnavailableReason.library_missing, UnavailableReason.driver_error):
            return "dcgm"
        if exc.reason is UnavailableReason.missing_device:
            return "dcgm"
        raise
    return "nvml"


def gpu_energy(
    job: str,
    before: Mapping[str, Reading],
    after: Mapping[str, Reading],
    shared: Mapping[str, Mapping[str, int]] | None = None,
) -> Energy:
    """The job's energy on its GPUs between two reads (§2.5): whole GPUs keep the meter's
    grade; GPUs in `shared` (each occupant's shards or MPS share) are split by `attribute()`
    and come out ModelBased. A counter reset raises `MeterUnavailable` (§2.7)."""
    from joulepool.meters.reading import energy_between

    if set(before) != set(after):
        raise InvalidInput("readings", "the GPUs read at the end are not those read at the start")
    per_device = {d: energy_between(before[d], after[d]) for d in sorted(before)}
    if not shared:
        return claim_share(job, per_device)
    occupants = {d: shared.get(d, {job: 1}) for d in per_device}
    return claim_share(job, per_device, occupants)


def _reading(data: object) -> Reading:
    if not isinstance(data, dict):
        raise InvalidInput("state", "a reading is not an object")
    try:
        return Reading(
            str(data["meter"]),
            data["counter_uj"],
            data["read_at_us"],
            Grade(data["grade"]),
            data["resolution_uj"],
            data.get("wrap_uj"),
            data.get("max_power_uw"),
        )
    except (KeyError, ValueError, TypeError) as exc:
        raise InvalidInput("state", f"a stored reading is malformed: {exc}") from None


def _state_path(state_dir: Path, job_id: int, node: str) -> Path:
    # Named by node too: several slurmd daemons may share one host (multiple-slurmd).
    return state_dir / f"{job_id}.{node}.json"


def prolog(
    job_id: int,
    gpus: Sequence[str],
    state_dir: Path,
    dcgm_url: str | None,
    node: str = "",
    source: str | None = None,
    run: int = 0,
) -> None:
    """Read the job's GPUs at its start and keep the readings (or why there are none) (§2.3).

    `source` ("nvml" or "dcgm") reads through that source alone; None chooses
    (`choose_source`). The epilog reads through whichever source the prolog used. `run`
    is the job's Restarts count (`SLURM_JOB_RESTART_COUNT`): the Epilog tags its entry with
    it (§6.2: each run of a requeued job is charged its own figure).
    """
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    record: dict[str, object] = {"job": job_id, "gpus": list(gpus), "run": run}
    try:
        if source not in (None, "nvml", "dcgm"):
            raise InvalidInput("source", f"{source!r} is neither nvml nor dcgm")
        if source is None:
            source = choose_source(gpus, dcgm_url)
        readings = [m.read() for m in meters_for(gpus, source, dcgm_url)]
        record.update(source=source, readings=[r.to_json() for r in readings])
    except PoolError as exc:
        record["error"] = _reason(exc)
    path = _state_path(state_dir, job_id, node)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record), encoding="utf-8")
    tmp.chmod(0o600)
    tmp.replace(path)


def epilog(
    job_id: int,
    gpus: Sequence[str],
    state_dir: Path,
    dcgm_url: str | None,
    node: str = "",
    restarts: int = 0,
) -> NodeFigure:
    """Read the job's GPUs at its end; the node's figure for it (§6.2), tagged with the run
    its Prolog kept. `restarts` (the Epilog's `SLURM_JOB_RESTART_COUNT`) tags a figure with
    no Prolog record: the run that has just ended, unless it ended in a requeue (the count
    is then one more), which its figure being none makes harmless. A record of the previous
    version names no run: its figure is untagged, as that version published it."""
    path = _state_path(state_dir, job_id, node)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return NodeFigure(job_id, len(gpus), None, "no_start_reading", restarts)
    except (OSError, ValueError):
        return NodeFigure(job_id, len(gpus), None, "start_reading_unreadable", restarts)
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
    if not isinstance(record, dict):
        return NodeFigure(job_id, len(gpus), None, "start_reading_unreadable", restarts)
    kept = record.get("run")
    run = kept if type(kept) is int and 0 <= kept < 10**9 else None
    if "error" in record:
        return NodeFigure(job_id, len(gpus), None, str(record["error"]), run)
    if record.get("gpus") != list(gpus):
        return NodeFigure(job_id, len(gpus), None, "gpus_changed", run)
    try:
        before = {r.meter: r for r in map(_reading, record["readings"])}
        meters = meters_for(gpus, str(record["source"]), dcgm_url)
        after = {m.name: m.read() for m in meters}
        energy = gpu_energy(str(job_id), before, after)
    except (PoolError, KeyError, TypeError) as exc:
        return NodeFigure(job_id, len(gpus), None, _reason(exc), run)
    return NodeFigure(job_id, len(gpus), energy, run=run)


def _reason(exc: Exception) -> str:
    if isinstance(exc, MeterUnavailable):
        return exc.reason.value
    if isinstance(exc, PoolError):
        return exc.code
    return "invalid_state"


@contextlib.contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    """One writer of this node's comment at a time (jobs end concurrently)."""
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    with (state_dir / "comment.lock").open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def publish(node: str, figure: NodeFigure, state_dir: Path, env: Mapping[str, str]) -> None:
    """Add the figure to the node's comment, keeping the newest `KEEP_ENTRIES` entries and any
    text that is not the bridge's."""
    with _locked(state_dir):
        current = node_comment(node, env)
        tokens = current.split(",") if current else []
        ours = [t for t in tokens if GPU_ENTRY.match(t)]
        others = [t for t in tokens if t and not GPU_ENTRY.match(t)]
        prefix = f"pool-gpu:{figure.job_id}="
        ours = [t for t in ours if not t.startswith(prefix)] + [figure.entry()]
        comment = ",".join(others + ours[-KEEP_ENTRIES:])
        run_slurm(["scontrol", "update", f"nodename={node}", f"comment={comment}"], env)


def main(argv: list[str] | None = None) -> int:
    """slurmd's Prolog and Epilog; always exits 0 (a failing one would drain the node)."""
    parser = argparse.ArgumentParser(prog="pool-slurm-gpu", description=__doc__)
    parser.add_argument("phase", choices=("prolog", "epilog"))
    parser.add_argument("--state-dir", type=Path, default=Path("/var/spool/pool-gpu"))
    parser.add_argument("--dcgm-url", help="the node's DCGM exporter, when NVML cannot be read")
    args = parser.parse_args(argv)
    env = dict(os.environ)
    raw_job = env.get("SLURM_JOB_ID", "")
    node = env.get("SLURMD_NODENAME", "")
    if not raw_job.isdigit() or not node:
        print("pool slurm gpu: SLURM_JOB_ID and SLURMD_NODENAME must be set", file=sys.stderr)
        return 0
    job_id = int(raw_job)
    raw_run = env.get("SLURM_JOB_RESTART_COUNT", "0")
    run = int(raw_run) if raw_run.isascii() and raw_run.isdigit() and len(raw_run) <= 9 else 0
    try:
        gpus = parse_job_gpus(env.get("SLURM_JOB_GPUS", ""))
    except InvalidInput as exc:
        print(f"pool slurm gpu: job {job_id}: {exc}", file=sys.stderr)
        if args.phase == "epilog":
            _publish_quietly(node, NodeFigure(job_id, 0, None, exc.code), args.state_dir, env)
        return 0
    if not gpus:
        return 0
    if args.phase == "prolog":
        try:
            prolog(job_id, gpus, args.state_dir, args.dcgm_url, node, run=run)
        except OSError as exc:
            print(f"pool slurm gpu: job {job_id}: cannot keep readings: {exc}", file=sys.stderr)
        return 0
    figure = epilog(job_id, gpus, args.state_dir, args.dcgm_url, node, run)
    _publish_quietly(node, figure, args.state_dir, env)
    return 0


def _publish_quietly(
    node: str, figure: NodeFigure, state_dir: Path, env: Mapping[str, str]
) -> None:
    try:
        publish(node, figure, state_dir, env)
    except (SlurmCommandFailed, OSError) as exc:
        print(f"pool slurm gpu: job {figure.job_id}: not published: {exc}", file=sys.stderr)
        return
    print(f"pool slurm gpu: {figure.entry()}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
