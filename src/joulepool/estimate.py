"""Earning an observed estimate from the ledger's own history (standard §2.6).

A guess is not evidence; a derived estimate is a model, never a reading; one run is not a
sample; the absence of a class is not a class. The estimate is the largest evidence figure,
not the mean, since a mean under-reserves about half the time by construction (§2.6).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from joulepool.checks import check_figure
from joulepool.errors import InvalidInput
from joulepool.grade import Energy, Grade

DEFAULT_REQUIRED = 3
"""pool/1's stated default for the required count of evidence (§2.6): a policy value."""


@dataclass(frozen=True, slots=True)
class Observation:
    """One released claim as history: the class its Admitted entry declared, its actual (§6.2)."""

    class_: str | None
    entitlement: str
    actual: Energy


class DeclineReason(StrEnum):
    """Why no estimate was derived (§2.6, DESIGN.md §3)."""

    insufficient_evidence = "insufficient_evidence"
    empty_class = "empty_class"


@dataclass(frozen=True, slots=True)
class Derived:
    """An estimate earned from evidence, graded at most ModelBased, with its spread (§2.6)."""

    estimate: Energy
    min_uj: int
    max_uj: int
    observations: int
    evidence: int

    def to_json(self) -> dict[str, object]:
        """The CONFORMANCE.md `derive_estimate` result."""
        return {
            "estimate": self.estimate.to_json(),
            "min_uj": self.min_uj,
            "max_uj": self.max_uj,
            "observations": self.observations,
            "evidence": self.evidence,
        }


@dataclass(frozen=True, slots=True)
class Declined:
    """No estimate, with what there was: observations of the class and how many were evidence."""

    reason: DeclineReason
    observations: int
    evidence: int

    def to_json(self) -> dict[str, object]:
        """The CONFORMANCE.md `derive_estimate` refusal."""
        return {
            "declined": self.reason.value,
            "observations": self.observations,
            "evidence": self.evidence,
        }


@dataclass(slots=True)
class Tally:
    """What §2.6 derives from, for one class (and entitlement): observations, how many were
    evidence, and the evidence's extremes. Bounded in size however long the history grows.
    `low` and `high` are None while there is no evidence: no figure stands in for none."""

    observations: int = 0
    evidence: int = 0
    low: int | None = None
    high: int | None = None

    def add(self, actual: Energy) -> None:
        """Count one released claim's actual figure (§2.6): Estimator is counted, not evidence."""
        self.observations += 1
        if not actual.grade.observed:
            return
        self.evidence += 1
        uj = actual.uj
        if self.low is None or uj < self.low:
            self.low = uj
        if self.high is None or uj > self.high:
            self.high = uj

    def merge(self, other: Tally) -> None:
        """Add another tally of the same class: counts sum, extremes widen (§2.6)."""
        self.observations += other.observations
        self.evidence += other.evidence
        for uj in (other.low, other.high):
            if uj is not None:
                self.low = uj if self.low is None or uj < self.low else self.low
                self.high = uj if self.high is None or uj > self.high else self.high

    def copy(self) -> Tally:
        """An independent copy, for a batch that may be taken back."""
        return Tally(self.observations, self.evidence, self.low, self.high)


def tally(history: Iterable[Observation], class_: str, entitlement: str | None = None) -> Tally:
    """The tally of released claims of exactly `class_`, optionally of one entitlement (§2.6)."""
    out = Tally()
    for obs in history:
        if obs.class_ == class_ and (entitlement is None or obs.entitlement == entitlement):
            out.add(obs.actual)
    return out


def decide_estimate(
    counted: Tally, class_: str | None, required: int = DEFAULT_REQUIRED
) -> Derived | Declined:
    """Derive an estimate from a class's tally, or decline (§2.6).

    Below `required` evidence (0 counts as 1) nothing is derived; an empty or missing class
    is refused.
    """
    check_figure(required, "required")
    if class_ is not None and not isinstance(class_, str):
        raise InvalidInput("class", "must be a string")
    if not class_:
        return Declined(DeclineReason.empty_class, 0, 0)
    low, high = counted.low, counted.high
    if counted.evidence < max(1, required) or low is None or high is None:
        return Declined(DeclineReason.insufficient_evidence, counted.observations, counted.evidence)
    # A figure for the next run is a prediction: a model, however the inputs were read.
    return Derived(
        Energy(high, Grade.ModelBased), low, high, counted.observations, counted.evidence
    )


def derive_estimate(
    history: Iterable[Observation],
    class_: str | None,
    required: int = DEFAULT_REQUIRED,
    entitlement: str | None = None,
) -> Derived | Declined:
    """Derive a claim's estimate from released claims of exactly `class_` (§2.6).

    Estimator observations are counted but excluded from the evidence; below `required`
    evidence (0 counts as 1) nothing is derived; an empty or missing class is refused.
    Optionally scoped to one entitlement.
    """
    check_figure(required, "required")
    if class_ is not None and not isinstance(class_, str):
        raise InvalidInput("class", "must be a string")
    counted = tally(history, class_, entitlement) if class_ else Tally()
    return decide_estimate(counted, class_, required)
