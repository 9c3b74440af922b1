"""What a running claim is doing now: readings, progress and their projections (DESIGN.md §7).

Soft state, never ledger entries: the ledger keeps only Admitted and Released (§6.2), and a
release still charges the whole actual. A process that restarts knows nothing of a running
claim until its next reading, and unknown is `None`, never 0 (§1.4, §2.7).

A reading is the energy a claim's devices used since its start readings (the prolog's),
with the grade the epilog would give it. A reading older than twice the sample period is
stale: no figure. The projections are one pure function of (policy, live state, the
claim's reservation, now) so that every surface and the acts built later read the same
figures: the §2.7 verdict, the §5.1 realised cost, the share of the reservation used (an
integer percent, floored) and when the reservation runs out at the current power.

Memory is bounded per claim: only the samples the idle window needs are kept, and never
more than `MAX_SAMPLES`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from joulepool.checks import check_figure, check_keys, check_text
from joulepool.errors import ClaimError, InvalidInput
from joulepool.grade import Energy, Grade
from joulepool.idle import (
    IdleObservation,
    IdlePolicy,
    IdleVerdictKind,
    idle_verdict,
    mean_uw,
)
from joulepool.preemption import realised_cost

MAX_SAMPLES = 512
"""The most samples kept for one claim, whatever the window: a bound on memory even for a
window far longer than the sample period, or a sender that reports far faster than it."""

MAX_TEXT = 256
"""The longest job id, user, name or unit a reading or a progress report may carry."""

DEFAULT_SAMPLE_PERIOD_MS = 30_000
"""The agent's sample period by default (`sample_every_s` = 30 in the bridge's config)."""

MIN_PERIOD_MS = 1_000
MAX_PERIOD_MS = 3_600_000
"""The sample periods a sender may declare: a second to an hour."""

NO_READING = "no_reading"
"""Why there is no §2.7 verdict when no reading has arrived since this process started."""

STALE = "stale"
"""Why there is no §2.7 verdict when the last reading is older than twice the sample period."""

PROGRESS = "progress"
"""Why a claim whose power is under the threshold is working: its reported units went up
within the idle window. Completed units are work, whatever the draw (§2.7, §5.1)."""


@dataclass(frozen=True, slots=True)
class Reading:
    """Energy since the claim's start readings, at an instant, with its grade (DESIGN.md §7)."""

    at_ms: int
    energy: Energy
    every_ms: int = DEFAULT_SAMPLE_PERIOD_MS


@dataclass(frozen=True, slots=True)
class Job:
    """Whose work it is, as the workload manager names it (the operator sees whose job)."""

    id: str
    user: str | None = None
    name: str | None = None
    partition: str | None = None
    """The partition it runs or waits in: preemption and contention look only within one."""
    requeue: bool = True
    """Whether the workload manager may requeue it (Slurm's Requeue=1)."""

    def to_json(self) -> dict[str, object]:
        """`{"id", "user", "name", "partition", "requeue"}`, absent parts null."""
        return {
            "id": self.id,
            "user": self.user,
            "name": self.name,
            "partition": self.partition,
            "requeue": self.requeue,
        }


@dataclass(frozen=True, slots=True)
class Progress:
    """Units completed so far, cumulative (§5.1: completed, not attempted)."""

    units: int
    unit: str
    total: int | None
    at_ms: int


@dataclass(frozen=True, slots=True)
class WaitReport:
    """An admitted claim whose job the workload manager has not started for want of
    resources (DESIGN.md §7): where it waits, for how many GPUs, and since when."""

    at_ms: int
    since_ms: int
    partition: str
    gpus: int
    every_ms: int = DEFAULT_SAMPLE_PERIOD_MS

    def fresh(self, now_ms: int) -> bool:
        """A report older than twice its sender's period says nothing (like a reading)."""
        return now_ms - self.at_ms <= 2 * self.every_ms


@dataclass(slots=True)
class ClaimLive:
    """One running claim's soft state: the window's samples, its progress, its job, and
    whether it waits for resources."""

    samples: deque[Reading] = field(default_factory=deque)
    progress: Progress | None = None
    job: Job | None = None
    every_ms: int = DEFAULT_SAMPLE_PERIOD_MS
    advanced_at_ms: int | None = None
    """When its reported units last went up: a workload completing units is working (§2.7)."""
    waiting: WaitReport | None = None
    cached: tuple[tuple[object, ...], Projection] | None = None
    """The last fresh projection and what it was computed from: the figures change only
    with a reading, a report or the policy, so a pass over every claim recomputes none."""

    @property
    def latest(self) -> Reading | None:
        """The newest reading, if any arrived since this process started."""
        return self.samples[-1] if self.samples else None


def _text(value: object, where: str) -> str:
    text = check_text(value, where)
    if len(text) > MAX_TEXT or not text.isprintable():
        raise InvalidInput(where, f"must be printable and at most {MAX_TEXT} characters")
    return text


def parse_reading(body: object, where: str = "body") -> tuple[Reading, Job | None]:
    """A reading as API.md's `POST /v1/claims/{id}/readings` takes it (DESIGN.md §7):
    `{"at_ms", "energy": {"uj", "grade"}, "every_ms"?, "job"?: {"id", "user"?, "name"?}}`,
    where `every_ms` is the sender's sample period (a reading is stale after two)."""
    obj = check_keys(body, where, ("at_ms", "energy"), ("every_ms", "job"))
    at_ms = check_figure(obj["at_ms"], f"{where}.at_ms")
    energy = Energy.from_json(obj["energy"], f"{where}.energy")
    job = None
    if "job" in obj:
        job = parse_job(obj["job"], f"{where}.job")
    return Reading(at_ms, energy, _every(obj, where)), job


def _every(obj: Mapping[str, Any], where: str) -> int:
    if "every_ms" not in obj:
        return DEFAULT_SAMPLE_PERIOD_MS
    every = check_figure(obj["every_ms"], f"{where}.every_ms")
    if not MIN_PERIOD_MS <= every <= MAX_PERIOD_MS:
        raise InvalidInput(
            f"{where}.every_ms", f"must be between {MIN_PERIOD_MS} and {MAX_PERIOD_MS} ms"
        )
    return every


def parse_job(value: object, where: str) -> Job:
    """`{"id", "user"?, "name"?, "partition"?, "requeue"?}`: whose job, where it runs, and
    whether it may be requeued (absent: it may) (DESIGN.md §7)."""
    j = check_keys(value, where, ("id",), ("user", "name", "partition", "requeue"))
    requeue = j.get("requeue", True)
    if not isinstance(requeue, bool):
        raise InvalidInput(f"{where}.requeue", "must be true or false")
    return Job(
        _text(j["id"], f"{where}.id"),
        _text(j["user"], f"{where}.user") if "user" in j else None,
        _text(j["name"], f"{where}.name") if "name" in j else None,
        _text(j["partition"], f"{where}.partition") if "partition" in j else None,
        requeue,
    )


def parse_waiting(body: object, where: str = "body") -> tuple[WaitReport, Job | None]:
    """A waiting report as API.md's `POST /v1/claims/{id}/waiting` takes it (DESIGN.md §7):
    `{"at_ms", "since_ms", "partition", "gpus", "every_ms"?, "job"?}`."""
    obj = check_keys(body, where, ("at_ms", "since_ms", "partition", "gpus"), ("every_ms", "job"))
    at_ms = check_figure(obj["at_ms"], f"{where}.at_ms")
    since_ms = check_figure(obj["since_ms"], f"{where}.since_ms")
    if since_ms > at_ms:
        raise InvalidInput(f"{where}.since_ms", "must not be after at_ms")
    waiting = WaitReport(
        at_ms,
        since_ms,
        _text(obj["partition"], f"{where}.partition"),
        check_figure(obj["gpus"], f"{where}.gpus"),
        _every(obj, where),
    )
    job = parse_job(obj["job"], f"{where}.job") if "job" in obj else None
    return waiting, job


def parse_progress(body: object, at_ms: int, where: str = "body") -> Progress:
    """A progress report as API.md takes it: `{"units", "unit"?, "total"?}` (§5.1)."""
    obj = check_keys(body, where, ("units",), ("unit", "total"))
    units = check_figure(obj["units"], f"{where}.units")
    unit = _text(obj["unit"], f"{where}.unit") if "unit" in obj else "steps"
    total = check_figure(obj["total"], f"{where}.total") if "total" in obj else None
    return Progress(units, unit, total, at_ms)


def record_reading(
    live: ClaimLive, reading: Reading, job: Job | None, window_ms: int | None
) -> None:
    """Keep `reading` and only the samples the idle window still needs (DESIGN.md §7).

    Readings come in time order and never decrease (a counter reset is the sender's to
    handle, never negative energy): an older instant or a smaller figure is refused
    with a typed error; the same reading again is taken as a retry.
    """
    last = live.latest
    if last is not None:
        if reading.at_ms < last.at_ms:
            raise ClaimError(
                "reading_out_of_order",
                f"a reading at {reading.at_ms} ms is older than the last one, at {last.at_ms} ms",
            )
        if reading.energy.uj < last.energy.uj:
            raise ClaimError(
                "reading_decreased",
                f"energy since the start went down from {last.energy.uj} to "
                f"{reading.energy.uj} µJ; a reading counts from the start readings",
            )
        if reading.at_ms == last.at_ms:
            live.samples.pop()
    live.samples.append(reading)
    live.every_ms = reading.every_ms
    live.waiting = None  # a job that is read is running, not waiting
    if job is not None:
        live.job = job
    # The oldest sample kept is the newest one at least a window before the latest: the
    # window's mean spans it, and nothing older is ever read again.
    span = window_ms if window_ms is not None else 0
    while len(live.samples) > 2 and live.samples[1].at_ms <= reading.at_ms - span:
        live.samples.popleft()
    while len(live.samples) > MAX_SAMPLES:
        live.samples.popleft()


def record_progress(live: ClaimLive, progress: Progress) -> None:
    """Units are cumulative and never go down (API.md: 409 `progress_decreased`)."""
    if live.progress is not None and progress.units < live.progress.units:
        raise ClaimError(
            "progress_decreased",
            f"units went down from {live.progress.units} to {progress.units}; "
            "progress is cumulative",
        )
    before = live.progress.units if live.progress is not None else 0
    if progress.units > before:
        live.advanced_at_ms = progress.at_ms
    live.progress = progress


@dataclass(frozen=True, slots=True)
class Projection:
    """What a running claim's live state says now (DESIGN.md §7, API.md "Run time").

    Every figure is an integer or `None` for unknown, never a 0 standing in for it.
    """

    energy: Energy | None
    at_ms: int | None
    power_uw: int | None
    verdict: str
    reason: str | None
    realised_cost: Fraction | None
    units: int | None
    unit: str | None
    total: int | None
    reservation_used_pct: int | None
    exhausts_at_ms: int | None
    job: Job | None
    waiting: WaitReport | None = None

    def to_json(self) -> dict[str, object]:
        """API.md's `"live"` object: unknown figures are null."""
        cost = self.realised_cost
        return {
            "energy_uj": None if self.energy is None else self.energy.uj,
            "grade": None if self.energy is None else self.energy.grade.value,
            "at_ms": self.at_ms,
            "power_uw": self.power_uw,
            "idle": {"verdict": self.verdict, "reason": self.reason},
            "realised_cost": None if cost is None else f"{cost.numerator}/{cost.denominator}",
            "units": self.units,
            "unit": self.unit,
            "total": self.total,
            "reservation_used_pct": self.reservation_used_pct,
            "exhausts_at_ms": self.exhausts_at_ms,
            "job": None if self.job is None else self.job.to_json(),
            "waiting": None
            if self.waiting is None
            else {
                "since_ms": self.waiting.since_ms,
                "partition": self.waiting.partition,
                "gpus": self.waiting.gpus,
            },
        }


def window_ms(policy: IdlePolicy) -> int | None:
    """The §2.7 window in whole milliseconds, the unit readings are dated in: rounded up,
    since a span counts as the window only once it is at least `window_us` long."""
    return None if policy.window_us is None else -(-policy.window_us // 1000)


def _window_base(samples: deque[Reading], latest: Reading, window_ms: int | None) -> Reading:
    """The sample the window's mean starts from: the newest at least a window before the
    latest, else the oldest kept (a shorter span, which §2.7 then calls too short)."""
    if window_ms is None:
        return samples[-2] if len(samples) > 1 else latest
    base = samples[0]
    for sample in samples:
        if sample.at_ms > latest.at_ms - window_ms:
            break
        base = sample
    return base


def project(
    live: ClaimLive | None,
    *,
    key: str,
    policy: IdlePolicy,
    held_devices: int,
    reserved_uj: int,
    now_ms: int,
    sample_period_ms: int = DEFAULT_SAMPLE_PERIOD_MS,
) -> Projection:
    """A running claim's figures now (DESIGN.md §7): the reading if fresh, mean power over
    the idle window, the §2.7 verdict with its reason, the §5.1 realised cost, the share of
    the reservation used (integer percent, floored) and when it would be used up.

    With no reading, or one older than twice the sample period, every energy figure is
    `None` and the verdict is `no_verdict` (`no_reading`, `stale`): unknown is not idle."""
    check_figure(reserved_uj, "reserved_uj")
    check_figure(now_ms, "now_ms")
    progress = live.progress if live is not None else None
    job = live.job if live is not None else None
    units = progress.units if progress is not None else None
    waiting = live.waiting if live is not None else None
    if waiting is not None and not waiting.fresh(now_ms):
        waiting = None
    latest = live.latest if live is not None else None
    fresh = latest is not None and now_ms - latest.at_ms <= 2 * sample_period_ms
    if live is None or latest is None or not fresh:
        reason = STALE if latest is not None else NO_READING
        verdict = (
            IdleVerdictKind.nothing_held.value
            if held_devices == 0
            else IdleVerdictKind.no_verdict.value
        )
        return Projection(
            None,
            None,
            None,
            verdict,
            None if held_devices == 0 else reason,
            None,
            units,
            progress.unit if progress else None,
            progress.total if progress else None,
            None,
            None,
            job,
            waiting,
        )
    inputs = (
        policy,
        held_devices,
        reserved_uj,
        latest,
        progress,
        live.advanced_at_ms,
        job,
        waiting,
        key,
    )
    if live.cached is not None and live.cached[0] == inputs:
        return live.cached[1]
    found = _fresh(live, latest, policy, key, held_devices, reserved_uj, waiting)
    live.cached = (inputs, found)
    return found


def _fresh(
    live: ClaimLive,
    latest: Reading,
    policy: IdlePolicy,
    key: str,
    held_devices: int,
    reserved_uj: int,
    waiting: WaitReport | None,
) -> Projection:
    """`project` of a claim whose latest reading is fresh (see `project`)."""
    progress, job = live.progress, live.job
    units = progress.units if progress is not None else None
    base = _window_base(live.samples, latest, window_ms(policy))
    span_uj = latest.energy.uj - base.energy.uj
    observed_us = (latest.at_ms - base.at_ms) * 1000
    grade: Grade = latest.energy.grade.weaker(base.energy.grade)
    judged = idle_verdict(
        policy, IdleObservation(key, held_devices, observed_us, Energy(span_uj, grade))
    )
    verdict, why = judged.kind.value, None if judged.reason is None else judged.reason.value
    if judged.kind is IdleVerdictKind.idle and _advanced_within(live, latest, policy):
        verdict, why = IdleVerdictKind.working.value, PROGRESS
    power = mean_uw(span_uj, observed_us)
    used = latest.energy.uj
    cost = realised_cost(used, units) if units is not None else None
    pct = used * 100 // reserved_uj if reserved_uj > 0 else None
    exhausts: int | None = None
    if used >= reserved_uj:
        exhausts = latest.at_ms
    elif power is not None and power > 0:
        # µJ / µW is seconds; the ceiling, so "exhausted" is never claimed early.
        exhausts = latest.at_ms + -(-(reserved_uj - used) * 1000 // power)
    return Projection(
        latest.energy,
        latest.at_ms,
        power,
        verdict,
        why,
        cost,
        units,
        progress.unit if progress else None,
        progress.total if progress else None,
        pct,
        exhausts,
        job,
        waiting,
    )


def _advanced_within(live: ClaimLive, latest: Reading, policy: IdlePolicy) -> bool:
    """Whether reported units went up within the idle window that ends at `latest`."""
    span = window_ms(policy)
    advanced = live.advanced_at_ms
    return advanced is not None and span is not None and advanced > latest.at_ms - span


class LiveBook:
    """Every running claim's soft state, keyed by claim id (DESIGN.md §7).

    Not thread-safe by itself: `Pool` calls it under its own lock. At most `max_claims`
    claims are held; past that the oldest-touched is forgotten (it becomes unknown, which
    is always a safe answer).
    """

    def __init__(self, max_claims: int = 100_000) -> None:
        self._claims: dict[str, ClaimLive] = {}
        self._max = max_claims

    def get(self, claim: str) -> ClaimLive | None:
        """The claim's state, or `None`: unknown since this process started."""
        return self._claims.get(claim)

    def _keep(self, claim: str, live: ClaimLive) -> None:
        # Re-inserted at the end, so the first key is always the least recently touched.
        self._claims.pop(claim, None)
        self._claims[claim] = live
        while len(self._claims) > self._max:
            del self._claims[next(iter(self._claims))]

    def reading(self, claim: str, reading: Reading, job: Job | None, window_ms: int | None) -> None:
        """Keep a reading for `claim` (DESIGN.md §7); a refused reading changes nothing."""
        live = self._claims.get(claim) or ClaimLive()
        record_reading(live, reading, job, window_ms)
        self._keep(claim, live)

    def progress(self, claim: str, progress: Progress) -> None:
        """Keep a progress report for `claim` (§5.1); 409 `progress_decreased` if it went down."""
        live = self._claims.get(claim) or ClaimLive()
        record_progress(live, progress)
        self._keep(claim, live)

    def waiting(self, claim: str, waiting: WaitReport, job: Job | None) -> None:
        """Keep that `claim`'s job waits for resources (DESIGN.md §7); a newer report wins."""
        live = self._claims.get(claim) or ClaimLive()
        if live.waiting is None or waiting.at_ms >= live.waiting.at_ms:
            live.waiting = waiting
        if job is not None:
            live.job = job
        self._keep(claim, live)

    def forget(self, claim: str) -> None:
        """Drop a claim's state, once it is released."""
        self._claims.pop(claim, None)

    def __len__(self) -> int:
        return len(self._claims)
