"""`pool slurm agent`'s live readings: every running pool-admitted job's energy so far
(DESIGN.md §7; API.md `POST /v1/claims/{id}/readings`).

Every `sample_every_s` the agent reads each node's exporters once and posts, per running
job, the energy its GPUs used since its start readings:

- dcgm-exporter's `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` (a counter in whole mJ per GPU,
  labels `gpu`, `UUID`, `Hostname`), at `dcgm_url` with `{node}` replaced by the node's name;
- node_exporter's `node_rapl_package_joules_total` and `node_rapl_dram_joules_total` (J,
  printed from a float64; labels `index`, `path`), at `node_exporter_url`, counted only for a
  job that holds its nodes whole (`--exclusive`), as the epilog counts them.

Which GPUs a job holds on which node comes from `scontrol show job -d` (`GRES=gpu:N(IDX:..)`),
run once a pass for all jobs (one process, not one a job: a pass over 1,000 jobs stays one
controller query). Each exporter page a pass needs is read once, by at most `MAX_FETCHERS`
threads at a time, each within `SCRAPE_TIMEOUT_S`: one slow node costs the pass its timeout.
A GPU held by one job keeps the meter's grade (HwShunt); one listed for several jobs (shards,
MPS) is divided by `attribute()` and comes out ModelBased; a job with no counter read has no
figure and is sent nothing (the service then reports it unknown, never 0).

The baseline is the GPU Prolog's start readings (`gpu_state_dir`, the Prolog's
`--state-dir`) where the agent can read them, else its own first reading of the job; a
reading of 0 µJ at that instant is posted first. Exporter text is turned into µJ exactly
from its digits, never through a float. A counter that went back was reset (driver reload,
exporter restart) or, for RAPL, wrapped: the energy before it is kept and counting goes on
from the new value, so a figure never decreases; the part of one sample period around the
reset is not counted.

A job array has one claim (docs/slurm.md, "Arrays"): its reading is the sum over its
running tasks, posted only while that is the whole of its energy so far (no task has ended,
and each task counts from its start or from the claim's first reading); after that the
claim gets no reading, so the service reports it unknown (see `Sampler._sample_array`).

The standard library and joulepool only (this runs beside slurmctld as root).
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Context, Decimal, InvalidOperation
from pathlib import Path

from joulepool.bridges.slurm.jobs import PoolClient, SlurmCommandFailed, SlurmJob, run_slurm
from joulepool.errors import InvalidInput, PoolError

DCGM_ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
"""dcgm-exporter's per-GPU energy counter, in whole mJ (as `meters.prometheus` reads it)."""

RAPL_FAMILIES = ("node_rapl_package_joules_total", "node_rapl_dram_joules_total")
"""node_exporter's RAPL counters the agent adds for a job holding its node whole."""

SCRAPE_TIMEOUT_S = 5.0
MAX_EXPOSITION_BYTES = 8 * 1024 * 1024
"""An exporter's page larger than this is refused: a node has tens of GPUs, not millions."""
MAX_FETCHERS = 16
"""Exporter pages read at once: enough that 100 nodes take a few round trips, few enough
that the agent beside slurmctld never holds hundreds of sockets."""
MAX_DETAIL_BYTES = 64 * 1024 * 1024
"""`scontrol show job -d` for every job larger than this is refused (some 100,000 jobs)."""
MAX_JOBS = 200_000
"""The most jobs one `scontrol show job -d` may list: past Slurm's default MaxJobCount."""
MAX_RECHECKS = 32
"""Jobs a pass asks about one by one when the all-jobs text lists them twice: a bound on the
processes a hostile job name can cost (beyond it such a job has no reading this pass)."""
MAX_TEXT = 256
MAX_GPUS = 65_536
"""The most GPUs one job's detail may list: a bound on a hostile range like IDX:0-999999999."""

_EXACT = Context(prec=80)
MAX_DIGITS = 24
"""A counter's largest decimal exponent: 10**24 mJ or J is far past 2**64 µJ."""
_FLOAT_EXACT_UJ = 2**51
"""Above this a float64 printed in J no longer names one µJ (as `meters.prometheus` says)."""

_LINE = re.compile(r"\A([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?[ \t]+(\S+)(?:[ \t]+-?\d+)?\Z")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*(?:,|\Z)')
_GRES = re.compile(r"gpu(?::[^:(,\s]+)?:\d+\(IDX:([0-9,\-]*)\)")
_NODES = re.compile(r"^\s*Nodes=(\S+) .*?GRES=(\S*)", re.M)
_NAME = re.compile(r"\AJobId=\d+ (?:ArrayJobId=\d+ ArrayTaskId=\S+ )?JobName=(.*)$", re.M)


def parse_exposition(text: str, names: Iterable[str]) -> list[tuple[str, dict[str, str], str]]:
    """The samples of `names` in Prometheus text: (name, labels, value text), the value kept
    as text so it becomes µJ exactly. A malformed line of a wanted family is `InvalidInput`."""
    wanted = frozenset(names)
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(None, 1)[0]
        if name not in wanted:
            continue
        m = _LINE.match(line)
        if m is None:
            raise InvalidInput(name, f"a sample line that does not parse: {line[:120]!r}")
        labels: dict[str, str] = {}
        rest = m.group(2) or ""
        while rest.strip():
            lm = _LABEL.match(rest)
            if lm is None:
                raise InvalidInput(name, f"labels that do not parse: {rest[:120]!r}")
            labels[lm.group(1)] = lm.group(2)
            rest = rest[lm.end() :]
        out.append((name, labels, m.group(3)))
    return out


def fetch_text(url: str, timeout_s: float = SCRAPE_TIMEOUT_S) -> str:
    """An exporter's page; `SlurmCommandFailed`-like errors are the caller's: here `OSError`."""
    if not url.startswith(("http://", "https://")):
        raise InvalidInput("url", f"{url!r} is not http(s)")
    # Exporters are node-local: no proxy from the environment.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=timeout_s) as answer:
        body: bytes = answer.read(MAX_EXPOSITION_BYTES + 1)
    if len(body) > MAX_EXPOSITION_BYTES:
        raise InvalidInput(url, f"an exposition over {MAX_EXPOSITION_BYTES} bytes")
    return body.decode("utf-8")


def _decimal(text: str, where: str) -> Decimal:
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise InvalidInput(where, f"the counter {text!r} is not a number") from None
    if not value.is_finite() or value < 0:
        raise InvalidInput(where, f"the counter is {text[:40]}, not a figure")
    if value.adjusted() > MAX_DIGITS:
        # Past any counter's range; and turning 1e999999999 into an int would never end.
        raise InvalidInput(where, f"the counter {text[:40]} is past 10**{MAX_DIGITS}")
    return value


def mj_text_to_uj(text: str, where: str) -> int:
    """A counter printed in whole mJ as exact µJ (DESIGN.md §7); a fraction is refused."""
    value = _decimal(text, where)
    if value != value.to_integral_value():
        raise InvalidInput(where, f"the mJ counter {text} is not a whole number of mJ")
    plain = text.lstrip("+").isascii() and text.lstrip("+").isdigit()
    if not plain and value >= 2**53:
        raise InvalidInput(where, f"the mJ counter {text} was printed from a lossy float")
    return int(value) * 1000


def j_text_to_uj(text: str, where: str) -> int:
    """A counter printed in J (node_exporter: a float64 of µJ / 10**6) as the µJ it was
    printed from, exactly (the nearest µJ while below 2**51 µJ), never through a float."""
    value = _decimal(text, where)
    micro = _EXACT.multiply(value, Decimal(1_000_000)).quantize(Decimal(1), ROUND_HALF_EVEN)
    plain = text.lstrip("+").isascii() and text.lstrip("+").isdigit()
    if not plain and micro > _FLOAT_EXACT_UJ:
        raise InvalidInput(where, f"the joule counter {text} is too large to name one µJ")
    return int(micro)


def divide(total: int, occupants: Mapping[str, int], me: str) -> int:
    """`me`'s share of `total` under standard §2.5 (`attribution.attribute`, restated with
    the standard library for the node side): floor(total * w / W), the remainder one µJ at a
    time to the largest fractional remainders, ties by occupant id."""
    weight = sum(occupants.values())
    if weight == 0:
        raise InvalidInput("occupants", "all weights are zero")
    shares = {o: total * w // weight for o, w in occupants.items()}
    left = total - sum(shares.values())
    order = sorted(occupants, key=lambda o: (-(total * occupants[o] % weight), o))
    for o in order[:left]:
        shares[o] += 1
    return shares[me]


def dcgm_counters(text: str, where: str) -> dict[int, int]:
    """Each GPU's energy counter in µJ, by its index (label `gpu`), from dcgm-exporter's page.
    A GPU listed twice with different values (one series per pod) is left out: ambiguous."""
    seen: dict[int, set[int]] = {}
    for _name, labels, value in parse_exposition(text, (DCGM_ENERGY,)):
        gpu = labels.get("gpu", "")
        if gpu.isascii() and gpu.isdigit() and len(gpu) <= 4:
            seen.setdefault(int(gpu), set()).add(mj_text_to_uj(value, where))
    return {gpu: next(iter(v)) for gpu, v in seen.items() if len(v) == 1}


def rapl_counters(text: str, where: str) -> dict[str, int]:
    """Each RAPL zone's counter in µJ (`<family>:<index>`), from node_exporter's page."""
    out: dict[str, int] = {}
    for name, labels, value in parse_exposition(text, RAPL_FAMILIES):
        out[f"{name}:{labels.get('index', '')}"] = j_text_to_uj(value, where)
    return out


def expand_hostlist(text: str) -> list[str]:
    """`node[1-3,5]`, `a,b` as names (Slurm's hostlist, one bracket group a name)."""
    names: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", text):
        m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", part)
        if m is None:
            names.append(part)
            continue
        for item in m.group(2).split(","):
            lo, _, hi = item.partition("-")
            width = len(lo)
            span = range(int(lo), int(hi or lo) + 1)
            if len(names) + len(span) > MAX_GPUS:
                raise ValueError("too many names")
            names.extend(f"{m.group(1)}{i:0{width}d}{m.group(3)}" for i in span)
    return names


def expand_indices(text: str) -> list[int]:
    """`0-1,3` as [0, 1, 3]."""
    out: list[int] = []
    for item in text.split(","):
        if not item:
            continue
        lo, _, hi = item.partition("-")
        span = range(int(lo), int(hi or lo) + 1)
        if len(out) + len(span) > MAX_GPUS:
            raise ValueError("too many indices")
        out.extend(span)
    return out


@dataclass(frozen=True, slots=True)
class JobDetail:
    """What `scontrol show job -d` says of a running job: its GPUs per node and its name."""

    gpus: dict[str, list[int]]
    name: str | None


def parse_job_detail(text: str) -> JobDetail:
    """The GPU indices (`GRES=gpu:N(IDX:..)`) per node, and the job's name, from
    `scontrol show job -d` of one job."""
    gpus: dict[str, list[int]] = {}
    try:
        for nodes, gres in _NODES.findall(text):
            indices = [i for m in _GRES.finditer(gres) for i in expand_indices(m.group(1))]
            for node in expand_hostlist(nodes):
                gpus.setdefault(node, []).extend(indices)
    except ValueError:
        raise InvalidInput(
            "scontrol show job -d", "a node list or GPU index that does not parse"
        ) from None
    if sum(len(v) for v in gpus.values()) > MAX_GPUS:
        raise InvalidInput("scontrol show job -d", f"more than {MAX_GPUS} GPUs")
    name_m = _NAME.search(text)
    name = name_m.group(1).strip() if name_m else None
    if name is not None and (not name or len(name) > MAX_TEXT or not name.isprintable()):
        name = None
    return JobDetail(gpus, name)


_JOB_START = re.compile(r"^JobId=(\d{1,10}) ", re.M)


def parse_jobs_detail(text: str) -> dict[int, JobDetail | None]:
    """Every job's GPU indices per node and name (DESIGN.md §7), by job id, from one
    `scontrol show job -d` of all jobs: each `JobId=` block read as `parse_job_detail` reads
    one job. Over `MAX_DETAIL_BYTES` or `MAX_JOBS`, or a block that does not parse, is
    `InvalidInput`. An id listed twice maps to None: Slurm lists each job (array task, het
    component) once under its own id, so the other block is text a job's owner wrote into
    a field (a job name may hold a newline), and only that job's own query can say which."""
    if len(text) > MAX_DETAIL_BYTES:
        raise InvalidInput("scontrol show job -d", f"over {MAX_DETAIL_BYTES} bytes")
    starts = list(_JOB_START.finditer(text))
    if len(starts) > MAX_JOBS:
        raise InvalidInput("scontrol show job -d", f"more than {MAX_JOBS} jobs")
    out: dict[int, JobDetail | None] = {}
    for k, m in enumerate(starts):
        end = starts[k + 1].start() if k + 1 < len(starts) else len(text)
        job_id = int(m.group(1))
        detail = parse_job_detail(text[m.start() : end])
        out[job_id] = None if job_id in out else detail
    return out


@dataclass(slots=True)
class Counter:
    """One counter of one job since its baseline, across resets (never decreasing)."""

    base: int
    last: int
    carried: int = 0

    def advance(self, value: int) -> int:
        """The energy since the baseline once the counter reads `value`."""
        if value < self.last:
            # Reset or wrap: keep what was counted, go on from the new value.
            self.carried += self.last - self.base
            self.base = 0
        self.last = value
        return self.carried + self.last - self.base


@dataclass(slots=True)
class Track:
    """A running job the agent samples: its claim and its counters."""

    claim: str
    counters: dict[str, Counter] = field(default_factory=dict)
    posted_uj: int | None = None
    offset_uj: int = 0
    """Energy the service already holds for the claim from before this agent started, when
    the agent had to take its own baseline (no Prolog readings): counted on top of it."""


@dataclass(slots=True)
class ArrayTrack:
    """A job array's claim the agent samples: the tasks its sum counts, and the claim's
    posting state (`track`)."""

    track: Track
    tasks: set[int] = field(default_factory=set)
    from_start: bool = False
    """Whether every task counts from its own start (the Prolog's readings)."""


def _whose(job: SlurmJob, detail: JobDetail, array_job: int | None = None) -> dict[str, object]:
    """A reading's `job`: the job's id (an array's own id for its claim), user, name,
    partition, and whether Slurm may requeue it; an array never is (its tasks' earlier runs
    would go uncharged), so Pool makes no requeue due for it."""
    return {
        "id": str(job.job_id if array_job is None else array_job),
        **({"user": job.user} if job.user else {}),
        **({"name": detail.name} if detail.name else {}),
        **({"partition": job.partition} if job.partition else {}),
        "requeue": job.requeue and array_job is None,
    }


@dataclass
class Sampler:
    """The agent's sampling state between passes (see the module docstring)."""

    dcgm_url: str | None
    node_exporter_url: str | None
    every_s: int
    client: PoolClient
    env: Mapping[str, str]
    state_dir: Path | None = None
    log: Callable[[str], None] = print
    tracks: dict[int, Track] = field(default_factory=dict)
    arrays: dict[str, ArrayTrack] = field(default_factory=dict)
    unknown_arrays: set[str] = field(default_factory=set)
    """Array claims no longer sampled (a task ended): their energy so far is not known."""
    waiting: set[int] = field(default_factory=set)
    """Array tasks whose start readings the agent waits for (logged once each)."""
    last_at: float = 0.0
    scrape_timeout_s: float = SCRAPE_TIMEOUT_S
    max_fetchers: int = MAX_FETCHERS

    def due(self, now: float) -> bool:
        """Whether a sample is due (`sample_every_s` since the last; 0 never samples)."""
        return self.every_s > 0 and now - self.last_at >= self.every_s

    def sample(self, jobs: list[SlurmJob]) -> int:
        """Read every node once and post each running admitted job's reading; how many."""
        self.last_at = time.monotonic()
        running = [
            j
            for j in jobs
            if j.state == "RUNNING"
            and j.note is not None
            and j.note.state in ("admitted", "releasing")
            and (j.note.tasks is None or j.array_job is not None)
        ]
        for gone in set(self.tracks) - {j.job_id for j in running}:
            del self.tracks[gone]
        self.waiting &= {j.job_id for j in running}
        details: dict[int, JobDetail] = {}
        if running:
            try:
                every = parse_jobs_detail(run_slurm(["scontrol", "show", "job", "-d"], self.env))
            except (SlurmCommandFailed, InvalidInput) as exc:
                self.log(f"no GPU detail this pass: {exc}")
                every = {}
            rechecks = 0
            for job in running:
                detail = every.get(job.job_id)
                if detail is None and job.job_id in every and rechecks < MAX_RECHECKS:
                    rechecks += 1
                    detail = self._detail_of(job.job_id)
                if detail is not None:
                    details[job.job_id] = detail
                else:
                    self.log(f"job {job.job_id}: no GPU detail in scontrol show job -d")
        pages = self._fetch_all(running, details)
        at_ms = time.time_ns() // 1_000_000
        holders: dict[str, list[str]] = {}
        for job in running:
            detail = details.get(job.job_id)
            if detail is None:
                continue
            for node, indices in detail.gpus.items():
                for i in indices:
                    holders.setdefault(f"{node}:gpu{i}", []).append(str(job.job_id))
        sent = 0
        arrays: dict[str, list[SlurmJob]] = {}
        for job in running:
            assert job.note is not None
            if job.note.tasks is not None:
                arrays.setdefault(job.note.claim, []).append(job)
                continue
            detail = details.get(job.job_id)
            if detail is None:
                continue
            counters = self._counters(job, detail, pages)
            if counters is None:
                continue
            track = self.tracks.get(job.job_id)
            if track is None:
                track = Track(job.note.claim)
                self.tracks[job.job_id] = track
                base_ms, _ = self._baseline(job, detail, counters, track, at_ms)
                if not self._post(_whose(job, detail), track, base_ms, 0, "HwShunt"):
                    track.offset_uj = self._held_uj(track.claim)
            energy = self._energy(job, counters, track, holders)
            if energy is not None:
                energy = (energy[0] + track.offset_uj, energy[1])
            if energy is not None and self._post(_whose(job, detail), track, at_ms, *energy):
                sent += 1
        for gone_claim in set(self.arrays) - set(arrays):
            del self.arrays[gone_claim]
        self.unknown_arrays &= {j.note.claim for j in jobs if j.note is not None}
        for claim, tasks in arrays.items():
            sent += self._sample_array(claim, tasks, jobs, details, pages, holders, at_ms)
        return sent

    def _sample_array(
        self,
        claim: str,
        tasks: list[SlurmJob],
        jobs: list[SlurmJob],
        details: Mapping[int, JobDetail],
        pages: dict[str, dict[str, int] | None],
        holders: Mapping[str, list[str]],
        at_ms: int,
    ) -> int:
        """Post a job array's reading: its claim is the whole array's (docs/slurm.md,
        "Arrays"), so its energy so far is the sum over its tasks. Only while that sum is
        the whole: every task that has started is running now, and each one's energy is
        counted from its own start (the Prolog's readings) or from the claim's first reading.
        Once a task has ended, its figure is no live reading (the epilog's figures come at
        the array's end), and the sum over the rest would be a lower bound, which is not a
        reading: the claim is sampled no more, so the service reports it unknown. 1 when a
        reading was posted."""
        array_job = tasks[0].array_job
        assert array_job is not None
        if claim in self.unknown_arrays:
            return 0
        ids = {t.job_id for t in tasks}
        state = self.arrays.get(claim)
        ended = self._array_ended(array_job, ids, jobs)
        if state is not None and state.tasks - ids:
            ended = f"task {min(state.tasks - ids)} is no longer running"
        if ended is not None:
            self._give_up_array(claim, array_job, f"a task has ended ({ended})")
            return 0
        counters: dict[int, dict[str, int]] = {}
        for task in tasks:
            detail = details.get(task.job_id)
            found = None if detail is None else self._counters(task, detail, pages)
            if found is None:
                return 0  # a task unread this pass: no figure rather than part of one
            counters[task.job_id] = found
        if state is None:
            state = ArrayTrack(Track(claim))
            fresh: dict[int, tuple[int, bool]] = {}
            for task in tasks:
                track = Track(claim)
                self.tracks[task.job_id] = track
                fresh[task.job_id] = self._baseline(
                    task, details[task.job_id], counters[task.job_id], track, at_ms
                )
            base_ms = min(b for b, _ in fresh.values())
            state.from_start = all(whole for _, whole in fresh.values())
            if not state.from_start:
                # Some task has no start reading here: every task counts from now.
                base_ms = at_ms
                for task in tasks:
                    self.tracks[task.job_id].counters = {
                        k: Counter(v, v) for k, v in counters[task.job_id].items()
                    }
            self.arrays[claim] = state
            state.tasks = set(ids)
            first = tasks[0]
            if (
                not self._post(
                    _whose(first, details[first.job_id], array_job),
                    state.track,
                    base_ms,
                    0,
                    "HwShunt",
                )
                and not state.from_start
            ):
                # The service holds a figure from before (an agent restart): energy counted
                # from now would fall short of it.
                self._give_up_array(claim, array_job, "the service holds an earlier figure")
                return 0
        for task in tasks:
            if task.job_id in state.tasks:
                continue
            # A task that started since the claim's first reading counts from its own start:
            # until its Prolog's readings can be read here (the Prolog may still be at work),
            # the claim has no reading.
            track = Track(claim)
            _, whole = self._baseline(
                task, details[task.job_id], counters[task.job_id], track, at_ms
            )
            if not whole:
                if task.job_id not in self.waiting:
                    self.waiting.add(task.job_id)
                    self.log(
                        f"array {array_job}: claim {claim} has no reading while task "
                        f"{task.job_id} has no start reading here (the GPU Prolog's, in "
                        "gpu_state_dir): the sum without it would be a lower bound"
                    )
                return 0
            self.tracks[task.job_id] = track
            state.tasks.add(task.job_id)
        total, grades = 0, ["HwShunt"]
        for task in tasks:
            energy = self._energy(task, counters[task.job_id], self.tracks[task.job_id], holders)
            if energy is None:
                return 0
            total += energy[0]
            grades.append(energy[1])
        grade = "ModelBased" if "ModelBased" in grades else "HwShunt"
        first = tasks[0]
        whose = _whose(first, details[first.job_id], array_job)
        return int(self._post(whose, state.track, at_ms, total, grade))

    def _array_ended(self, array_job: int, running: set[int], jobs: list[SlurmJob]) -> str | None:
        """Which task of the array has run and is not running now, if any: slurmctld's
        records, then sacct's (a record slurmctld has dropped, MinJobAge, is still there)."""
        for job in jobs:
            if job.array_job != array_job or job.job_id in running:
                continue
            if (job.started and job.state != "PENDING") or job.restarts > 0:
                return f"task {job.job_id} is {job.state}"
        try:
            out = run_slurm(
                ["sacct", "-j", str(array_job), "-X", "-n", "-P", "-o", "JobIDRaw,JobID,State"],
                self.env,
            )
        except SlurmCommandFailed as exc:
            return f"sacct: {exc}"
        for line in out.splitlines():
            cols = line.strip().split("|")
            if len(cols) != 3 or not cols[0].isdigit() or "[" in cols[1]:
                continue
            state = cols[2].split(" ")[0]
            if int(cols[0]) not in running and state not in ("PENDING", "RUNNING"):
                return f"task {cols[0]} is {state}"
        return None

    def _give_up_array(self, claim: str, array_job: int, why: str) -> None:
        self.unknown_arrays.add(claim)
        self.arrays.pop(claim, None)
        self.log(
            f"array {array_job}: claim {claim} has no live reading from now on: {why}; "
            "the sum over its running tasks would be a lower bound, not its energy so far"
        )

    def _url(self, template: str, node: str) -> str:
        return template.replace("{node}", urllib.parse.quote(node, safe=""))

    def _detail_of(self, job_id: int) -> JobDetail | None:
        try:
            out = run_slurm(["scontrol", "show", "job", "-d", str(job_id)], self.env)
            return parse_job_detail(out)
        except (SlurmCommandFailed, InvalidInput) as exc:
            self.log(f"job {job_id}: no GPU detail: {exc}")
            return None

    def _fetch_all(
        self, running: list[SlurmJob], details: Mapping[int, JobDetail]
    ) -> dict[str, dict[str, int] | None]:
        """Every exporter page this pass needs, each read once, `max_fetchers` at a time; a
        page not read within `scrape_timeout_s` (plus a second's grace) is None."""
        wanted: dict[str, bool] = {}
        for job in running:
            detail = details.get(job.job_id)
            for node, indices in (detail.gpus if detail else {}).items():
                if not indices:
                    continue
                if self.dcgm_url is not None:
                    wanted[self._url(self.dcgm_url, node)] = True
                if job.exclusive and self.node_exporter_url is not None:
                    wanted[self._url(self.node_exporter_url, node)] = False
        pages: dict[str, dict[str, int] | None] = dict.fromkeys(wanted)
        if not wanted:
            return pages
        pool = ThreadPoolExecutor(max_workers=max(1, min(self.max_fetchers, len(wanted))))
        try:
            futures = {pool.submit(self._read, url, dcgm): url for url, dcgm in wanted.items()}
            # urllib's timeout bounds each socket wait, not a page that trickles in: the
            # deadline here bounds the pass, and a straggler's page is simply not used.
            done, late = wait(futures, timeout=self.scrape_timeout_s + 1.0)
            for future in done:
                pages[futures[future]] = future.result()
            for future in late:
                self.log(f"exporter {futures[future]}: no page in {self.scrape_timeout_s} s")
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        return pages

    def _read(self, url: str, dcgm: bool) -> dict[str, int] | None:
        try:
            text = fetch_text(url, self.scrape_timeout_s)
            if dcgm:
                return {f"gpu{k}": v for k, v in dcgm_counters(text, url).items()}
            return rapl_counters(text, url)
        except (OSError, UnicodeDecodeError, PoolError, ValueError, ArithmeticError) as exc:
            self.log(f"exporter {url}: {type(exc).__name__}: {exc}")
            return None

    def _counters(
        self, job: SlurmJob, detail: JobDetail, pages: dict[str, dict[str, int] | None]
    ) -> dict[str, int] | None:
        """Every counter the job's figure is made of, `<node>:<counter>` → µJ; None when one
        could not be read (no figure rather than part of one)."""
        out: dict[str, int] = {}
        for node, indices in detail.gpus.items():
            if not indices:
                continue
            if self.dcgm_url is None:
                return None
            page = pages.get(self._url(self.dcgm_url, node))
            if page is None:
                return None
            for i in indices:
                if f"gpu{i}" not in page:
                    return None
                out[f"{node}:gpu{i}"] = page[f"gpu{i}"]
            if job.exclusive and self.node_exporter_url is not None:
                rapl = pages.get(self._url(self.node_exporter_url, node))
                if rapl is None:
                    return None
                out.update({f"{node}:{k}": v for k, v in rapl.items()})
        return out or None

    def _baseline(
        self, job: SlurmJob, detail: JobDetail, counters: dict[str, int], track: Track, at_ms: int
    ) -> tuple[int, bool]:
        """Set the job's baselines: the Prolog's start readings where readable, else the
        counters as read at `at_ms` (not later: the pass's own reading is stamped `at_ms`,
        and the service refuses a reading older than the last). Returns the baselines'
        instant and whether every counter's baseline is the Prolog's (the job's start)."""
        base_ms = at_ms
        started: dict[str, int] = {}
        for node in detail.gpus:
            path = None if self.state_dir is None else self.state_dir / f"{job.job_id}.{node}.json"
            try:
                if path is None:
                    break
                record = json.loads(path.read_text(encoding="utf-8"))
                if record.get("source") != "dcgm":
                    continue
                for r in record["readings"]:
                    meter = str(r["meter"])
                    if meter.startswith("dcgm:") and type(r["counter_uj"]) is int:
                        started[f"{node}:gpu{meter[5:]}"] = r["counter_uj"]
                base_ms = min(base_ms, int(path.stat().st_mtime_ns // 1_000_000))
            except (OSError, ValueError, KeyError, TypeError):
                continue
        whole = True
        for key, value in counters.items():
            base = started.get(key, value)
            if key not in started or base > value:
                whole = False
            base = value if base > value else base  # reset since the Prolog: from now
            track.counters[key] = Counter(base, base)
        return base_ms, whole

    def _energy(
        self,
        job: SlurmJob,
        counters: dict[str, int],
        track: Track,
        holders: Mapping[str, list[str]],
    ) -> tuple[int, str] | None:
        """The job's energy since its baseline and its grade: whole devices keep HwShunt;
        a device listed for several jobs is divided (§2.5) and makes it ModelBased."""
        me = str(job.job_id)
        total = 0
        grade = "HwShunt"
        for key, value in counters.items():
            counter = track.counters.setdefault(key, Counter(value, value))
            spent = counter.advance(value)
            sharing = holders.get(key) or [me]
            if len(sharing) > 1:
                spent = divide(spent, dict.fromkeys(sharing, 1), me)
                grade = "ModelBased"
            total += spent
        return (total, grade) if counters else None

    def _held_uj(self, claim: str) -> int:
        """The energy so far the service holds for `claim` (a restarted agent goes on from
        it, so its figure never goes back); 0 when it holds none."""
        answer = self.client.call("GET", "/v1/claims/" + urllib.parse.quote(claim, safe=""))
        live = answer.body.get("live") if answer.status == 200 else None
        held = live.get("energy_uj") if isinstance(live, dict) else None
        return held if type(held) is int and held >= 0 else 0

    def _post(
        self, whose: dict[str, object], track: Track, at_ms: int, uj: int, grade: str
    ) -> bool:
        if track.posted_uj is not None and uj < track.posted_uj:
            return False  # a shared GPU's share may shrink as occupants come: never send less
        body = {
            "at_ms": at_ms,
            "energy": {"uj": uj, "grade": grade},
            "every_ms": self.every_s * 1000,
            "job": whose,
        }
        path = "/v1/claims/" + urllib.parse.quote(track.claim, safe="") + "/readings"
        answer = self.client.call("POST", path, body)
        if answer.status != 200:
            self.log(f"job {whose['id']}: reading refused: HTTP {answer.status} {answer.error}")
            return False
        track.posted_uj = uj
        return True
