"""The reservation as a limit: which act over-reservation makes due now (DESIGN.md §7).

A pure decision of (policy, a running claim's reservation and live evidence, the acts
already carried out, now), no clock and no I/O, so `GET /v1/actions/due`, `pool actions
--due` and the Slurm agent read one answer:

- `notice` (the job is told: SIGUSR1 and a note in its admin comment) once measured energy
  has reached the reservation or, at its current power, will within `notice_s`;
- then the configured act (`signal`: SIGUSR2, `requeue`, `cancel`) once measured energy is
  past reservation × (100 + margin_pct) / 100; under the default policy, `report`, nothing
  is done to the job and the passing is recorded as a `report`;
- `withheld`, with its reason, where the evidence cannot carry an act: no reading since
  this process started, a stale one, or a figure graded Estimator (unknown is not over).

Only a fresh figure graded HwShunt or ModelBased can make an act due. Each act is due at
most once per claim: `done` names those the action log says were carried out.
Integers only: the margin is compared by cross-multiplication.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from joulepool.checks import check_figure
from joulepool.errors import InvalidInput
from joulepool.grade import Energy, Grade

OVER_RESERVATION = ("report", "signal", "requeue", "cancel")
"""What `[runtime] over_reservation` may say (DESIGN.md §7): `report` never acts."""
ACTS = ("notice", "signal", "requeue", "cancel")
"""The acts a bridge carries out."""
KINDS = (*ACTS, "report", "withheld")
"""Every kind of record in the action log."""
DEFAULT_MARGIN_PCT = 10
DEFAULT_NOTICE_S = 300
MAX_MARGIN_PCT = 1000
MAX_NOTICE_S = 7 * 86_400

ESTIMATOR = "estimator"
"""Why an act is withheld when the only figure is an estimate (§2.3)."""
MEASURED = frozenset({Grade.HwShunt, Grade.ModelBased})


@dataclass(frozen=True, slots=True)
class RuntimePolicy:
    """pool.toml's `[runtime]` table (DESIGN.md §7); the defaults report and never act."""

    over_reservation: str = "report"
    margin_pct: int = DEFAULT_MARGIN_PCT
    notice_s: int = DEFAULT_NOTICE_S

    @property
    def acts(self) -> bool:
        """Whether this policy ever does anything to a job."""
        return self.over_reservation != "report"

    def to_json(self) -> dict[str, object]:
        """As the action log and `GET /v1/actions/due` record it."""
        return {
            "over_reservation": self.over_reservation,
            "margin_pct": self.margin_pct,
            "notice_s": self.notice_s,
        }


DEFAULT_POLICY = RuntimePolicy()


def parse_runtime(table: object, where: str) -> RuntimePolicy:
    """`[runtime]` of pool.toml (DESIGN.md §7): strict keys, integers, refusals naming
    `where` and the field."""
    if not isinstance(table, Mapping):
        raise InvalidInput(f"{where}: runtime", "must be a table")
    extra = sorted(set(table) - {"over_reservation", "margin_pct", "notice_s"})
    if extra:
        raise InvalidInput(f"{where}: runtime.{extra[0]}", "unknown key")
    act = table.get("over_reservation", "report")
    if act not in OVER_RESERVATION:
        raise InvalidInput(
            f"{where}: runtime.over_reservation",
            f"must be one of {', '.join(OVER_RESERVATION)}, got {act!r}",
        )
    margin = check_figure(
        table.get("margin_pct", DEFAULT_MARGIN_PCT), f"{where}: runtime.margin_pct"
    )
    if margin > MAX_MARGIN_PCT:
        raise InvalidInput(f"{where}: runtime.margin_pct", f"must be at most {MAX_MARGIN_PCT}")
    notice = check_figure(table.get("notice_s", DEFAULT_NOTICE_S), f"{where}: runtime.notice_s")
    if notice > MAX_NOTICE_S:
        raise InvalidInput(f"{where}: runtime.notice_s", f"must be at most {MAX_NOTICE_S} s")
    return RuntimePolicy(str(act), margin, notice)


class Evidence(NamedTuple):
    """What an act rests on (DESIGN.md §7): the claim's reservation and its live figures,
    `energy` None where there is no fresh reading (`unknown` says why)."""

    reserved_uj: int
    energy: Energy | None
    at_ms: int | None
    power_uw: int | None
    exhausts_at_ms: int | None
    unknown: str | None = None

    def to_json(self) -> dict[str, object]:
        """As the action log and `GET /v1/actions/due` record it; unknown figures null."""
        return {
            "reserved_uj": self.reserved_uj,
            "energy_uj": None if self.energy is None else self.energy.uj,
            "grade": None if self.energy is None else self.energy.grade.value,
            "at_ms": self.at_ms,
            "power_uw": self.power_uw,
            "exhausts_at_ms": self.exhausts_at_ms,
            "unknown": self.unknown,
        }


@dataclass(frozen=True, slots=True)
class Due:
    """What is due for one claim: `kind` one of `KINDS`, or None when nothing is;
    `reason` says why an act is withheld or what made it due."""

    kind: str | None
    reason: str | None


def over_limit(policy: RuntimePolicy, used_uj: int, reserved_uj: int) -> bool:
    """Whether `used_uj` is past the reservation and its margin (DESIGN.md §7), exactly."""
    return used_uj * 100 > reserved_uj * (100 + policy.margin_pct)


def due_act(policy: RuntimePolicy, evidence: Evidence, now_ms: int, done: frozenset[str]) -> Due:
    """The act over-reservation makes due now (module docstring; DESIGN.md §7).

    At most one act a call, the notice first: a job that jumps past the margin is told
    before it is acted on, on the next pass. `done` holds the kinds already recorded for
    the claim; an act in it is never due again, and nothing is due after the final act."""
    check_figure(now_ms, "now_ms")
    final = policy.over_reservation
    if final in done:
        return Due(None, None)
    energy = evidence.energy
    measured = energy is not None and energy.grade in MEASURED
    if not measured:
        # Under `report` nothing would act, so nothing is withheld either.
        if not policy.acts:
            return Due(None, None)
        return Due(
            "withheld", ESTIMATOR if energy is not None else evidence.unknown or "no_reading"
        )
    assert energy is not None
    reserved = evidence.reserved_uj
    over = over_limit(policy, energy.uj, reserved)
    if not policy.acts:
        return Due("report", "past_margin") if over else Due(None, None)
    soon = energy.uj >= reserved or (
        evidence.exhausts_at_ms is not None
        and evidence.exhausts_at_ms - now_ms <= policy.notice_s * 1000
    )
    if (soon or over) and "notice" not in done:
        return Due("notice", "reached" if energy.uj >= reserved else "exhausts_within_notice")
    if over:
        return Due(final, "past_margin")
    return Due(None, None)
