"""Energy figures and their grade (standard §2.3).

A figure is a microjoule count and the provenance of whatever produced it. The grade is
part of the decision (§1.3), so it travels with the figure everywhere, and nothing here
can raise it: every operation returns the weaker of the grades it combines.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

import msgspec

from joulepool.checks import check_figure as check_figure
from joulepool.checks import check_keys
from joulepool.errors import InvalidInput


class Grade(StrEnum):
    """Provenance of an energy figure (§2.3), best first."""

    HwShunt = "HwShunt"
    ModelBased = "ModelBased"
    Estimator = "Estimator"

    @property
    def observed(self) -> bool:
        """HwShunt and ModelBased are observed; an Estimator figure is not (§2.3)."""
        return self is not Grade.Estimator

    @property
    def rank(self) -> int:
        """0 for the best provenance; a larger rank is a weaker grade."""
        return _RANK[self]

    def weaker(self, other: Grade) -> Grade:
        """The weaker of two grades: what a figure built from both can honestly claim (§2.3)."""
        return self if self.rank >= other.rank else other

    def divided(self) -> Grade:
        """The grade of a share of a divided figure: HwShunt becomes ModelBased (§2.5)."""
        return self.weaker(Grade.ModelBased)

    @classmethod
    def parse(cls, value: object, field: str = "grade") -> Grade:
        """Read a grade name exactly as the standard spells it (§2.3)."""
        if isinstance(value, Grade):
            return value
        if isinstance(value, str):
            try:
                return cls(value)
            except ValueError:
                pass
        names = ", ".join(g.value for g in cls)
        raise InvalidInput(field, f"unknown grade {value!r}; expected one of {names}")


_RANK = {Grade.HwShunt: 0, Grade.ModelBased: 1, Grade.Estimator: 2}


class Energy(msgspec.Struct, frozen=True, gc=False):
    """A microjoule count at the grade of whatever produced it (§2.3)."""

    uj: int
    grade: Grade

    def __post_init__(self) -> None:
        check_figure(self.uj, "uj")
        if not isinstance(self.grade, Grade):
            raise InvalidInput("grade", f"must be a Grade, got {self.grade!r}")

    def __add__(self, other: Energy) -> Energy:
        """The sum of two figures, at the weaker of their grades (§2.3)."""
        return Energy(self.uj + other.uj, self.grade.weaker(other.grade))

    def at_most(self, ceiling: Grade) -> Energy:
        """The same count with its grade capped at `ceiling`; never raised (§2.3, §2.6)."""
        return Energy(self.uj, self.grade.weaker(ceiling))

    def with_uj(self, uj: int) -> Energy:
        """Another count at this figure's grade, for a figure derived from this one (§2.3)."""
        return Energy(uj, self.grade)

    @classmethod
    def from_json(cls, obj: object, where: str = "energy") -> Energy:
        """Read the CONFORMANCE.md shape `{"uj": n, "grade": g}` strictly (§2.3)."""
        check_keys(obj, where, ("uj", "grade"))
        assert isinstance(obj, Mapping)
        return cls(
            check_figure(obj["uj"], f"{where}.uj"), Grade.parse(obj["grade"], f"{where}.grade")
        )

    def to_json(self) -> dict[str, object]:
        """The CONFORMANCE.md shape `{"uj": n, "grade": g}`."""
        return {"uj": self.uj, "grade": self.grade.value}
