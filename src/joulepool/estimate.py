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
    if not class_:
        return Declined(DeclineReason.empty_class, 0, 0)
    need = max(1, required)
    observations = 0
    evidence = 0
    low: int | None = None
    high = 0
    for obs in history:
        if obs.class_ != class_ or (entitlement is not None and obs.entitlement != entitlement):
            continue
        observations += 1
        if not obs.actual.grade.observed:
            continue
        evidence += 1
        uj = obs.actual.uj
        low = uj if low is None or uj < low else low
        high = max(high, uj)
    if evidence < need or low is None:
        return Declined(DeclineReason.insufficient_evidence, observations, evidence)
    # A figure for the next run is a prediction: a model, however the inputs were read.
    return Derived(Energy(high, Grade.ModelBased), low, high, observations, evidence)
