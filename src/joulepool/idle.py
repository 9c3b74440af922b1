"""Reclaiming capacity from work that is not working (standard §2.7).

"Meter unavailable → 0 µJ → idle → reclaim" is the chain this module exists to break. The
checks run in the standard's normative order, first failure wins: nothing held, then the
policy and its window, then the grade, then the rate. The grade is tested before any value
meets a threshold, so no threshold can let a guess through, and an unconfigured policy
reclaims nothing (DESIGN.md §3).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction

from joulepool.checks import check_figure
from joulepool.errors import InvalidInput
from joulepool.grade import Energy


class IdleVerdictKind(StrEnum):
    """The four distinct answers of §2.7; only `idle` permits reclamation."""

    idle = "idle"
    working = "working"
    nothing_held = "nothing_held"
    no_verdict = "no_verdict"


class NoVerdictReason(StrEnum):
    """Why no verdict was reached (DESIGN.md §3, §2.7)."""

    unconfigured = "unconfigured"
    window_too_short = "window_too_short"
    unobserved = "unobserved"
    empty_window = "empty_window"


@dataclass(frozen=True, slots=True)
class IdlePolicy:
    """A window and a power threshold; both unset by default, which reclaims nothing (§2.7).

    There is no default threshold: it must sit between a device's idle and working draw,
    which are properties of the hardware, not of the standard.
    """

    window_us: int | None = None
    threshold_uw: int | None = None

    def __post_init__(self) -> None:
        if self.window_us is not None:
            check_figure(self.window_us, "policy.window_us")
        if self.threshold_uw is not None:
            check_figure(self.threshold_uw, "policy.threshold_uw")

    @property
    def configured(self) -> bool:
        """A policy decides only with both a window and a threshold stated (§2.7)."""
        return self.window_us is not None and self.threshold_uw is not None


@dataclass(frozen=True, slots=True)
class IdleObservation:
    """What a sampler saw of one workload: devices held, the span observed, its energy (§2.7)."""

    key: str
    held_devices: int
    observed_us: int
    energy: Energy

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise InvalidInput("key", "must be a non-empty string")
        check_figure(self.held_devices, "held_devices")
        check_figure(self.observed_us, "observed_us")


@dataclass(frozen=True, slots=True)
class IdleVerdict:
    """One workload's answer, with the reason where there is none and its mean power (§2.7)."""

    kind: IdleVerdictKind
    reason: NoVerdictReason | None
    mean_uw: int | None

    def to_json(self) -> dict[str, object]:
        """The CONFORMANCE.md shape of one verdict."""
        out: dict[str, object] = {"verdict": self.kind.value, "mean_uw": self.mean_uw}
        if self.reason is not None:
            out["reason"] = self.reason.value
        return out


def mean_uw(energy_uj: int, observed_us: int) -> int | None:
    """Mean power over a span in µW, floored; `None` for an empty span, never 0 (§2.7)."""
    check_figure(energy_uj, "uj")
    check_figure(observed_us, "observed_us")
    if observed_us == 0:
        return None
    return energy_uj * 1_000_000 // observed_us


def idle_verdict(policy: IdlePolicy, observation: IdleObservation) -> IdleVerdict:
    """Judge one workload in the normative order of §2.7: held, window, grade, rate."""
    obs = observation
    if obs.held_devices == 0:
        return IdleVerdict(IdleVerdictKind.nothing_held, None, None)
    mean = mean_uw(obs.energy.uj, obs.observed_us)
    if policy.window_us is None or policy.threshold_uw is None:
        return IdleVerdict(IdleVerdictKind.no_verdict, NoVerdictReason.unconfigured, mean)
    if obs.observed_us < policy.window_us:
        return IdleVerdict(IdleVerdictKind.no_verdict, NoVerdictReason.window_too_short, mean)
    # The grade before the value: no threshold, however high, may judge a guess.
    if not obs.energy.grade.observed:
        return IdleVerdict(IdleVerdictKind.no_verdict, NoVerdictReason.unobserved, mean)
    if obs.observed_us == 0:
        return IdleVerdict(IdleVerdictKind.no_verdict, NoVerdictReason.empty_window, None)
    # Exact comparison of uj/observed_us against threshold_uw/1e6, by cross-multiplication.
    if obs.energy.uj * 1_000_000 <= policy.threshold_uw * obs.observed_us:
        return IdleVerdict(IdleVerdictKind.idle, None, mean)
    return IdleVerdict(IdleVerdictKind.working, None, mean)


def idle_verdicts(
    policy: IdlePolicy, observations: Iterable[IdleObservation]
) -> dict[str, IdleVerdict]:
    """Every workload's verdict, keyed by workload; duplicate keys are refused (§2.7)."""
    out: dict[str, IdleVerdict] = {}
    for obs in observations:
        if obs.key in out:
            raise InvalidInput("workloads", f"workload key {obs.key!r} appears twice")
        out[obs.key] = idle_verdict(policy, obs)
    return out


def reclamation_order(policy: IdlePolicy, observations: Iterable[IdleObservation]) -> list[str]:
    """The idle workloads only, lowest mean power first, ties by key (§2.7).

    A workload with no verdict is absent, not ranked last: it is not a candidate at all.
    """
    observed = list(observations)
    verdicts = idle_verdicts(policy, observed)
    idle = [o for o in observed if verdicts[o.key].kind is IdleVerdictKind.idle]
    idle.sort(key=lambda o: (Fraction(o.energy.uj, o.observed_us), o.key))
    return [o.key for o in idle]
