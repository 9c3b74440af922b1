"""Who yields under contention: realised cost and the preemption order (standard §5).

Evidence before declaration: workloads with a defined cost per completed unit come first,
most expensive first; unmeasured ones after, lowest priority first; every tie breaks on the
workload key so a replay reproduces the order (§5.2). An undefined cost is `None`, never a
number standing in for it (§1.4, §5.1).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

from joulepool.checks import check_figure
from joulepool.errors import InvalidInput


@dataclass(frozen=True, slots=True)
class Workload:
    """A running workload as preemption sees it: what it spent and what it completed (§5.1)."""

    key: str
    spent_uj: int
    completed_units: int
    priority: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise InvalidInput("key", "must be a non-empty string")
        check_figure(self.spent_uj, "spent_uj")
        check_figure(self.completed_units, "completed_units")
        check_figure(self.priority, "priority")


def realised_cost(spent_uj: int, completed_units: int) -> Fraction | None:
    """Spent microjoules per completed unit, exactly; `None` when nothing completed (§5.1)."""
    check_figure(spent_uj, "spent_uj")
    check_figure(completed_units, "completed_units")
    if completed_units == 0:
        return None
    return Fraction(spent_uj, completed_units)


def preemption_order(workloads: Iterable[Workload]) -> list[str]:
    """The order capacity is reclaimed in (§5.2): evidence first, then declaration."""
    return order_of((w.key, w.spent_uj, w.completed_units, w.priority) for w in workloads)


def order_of(rows: Iterable[tuple[str, int, int, int]]) -> list[str]:
    """`preemption_order` of `(key, spent_uj, completed_units, priority)` rows whose figures
    are already checked (§5.2): for callers that hold thousands of them in another shape.

    Defined costs are sorted on an exact integer key, not on `Fraction`s (which make a
    10,000-claim order several times slower): spent × S // units with S the square of
    the largest denominator. Two distinct costs with denominators of at most B differ by
    at least 1/B², so their keys differ and keep their order; equal costs get equal keys
    and tie on the workload key."""
    measured: list[tuple[int, int, str]] = []
    unmeasured: list[tuple[int, str]] = []
    seen: set[str] = set()
    for key, spent, units, priority in rows:
        if key in seen:
            raise InvalidInput("workloads", f"workload key {key!r} appears twice")
        seen.add(key)
        if units == 0:  # §5.1: undefined, never a number standing in for it
            unmeasured.append((priority, key))
        else:
            measured.append((spent, units, key))
    scale = max((units for _, units, _ in measured), default=1) ** 2
    ranked = sorted((-(spent * scale // units), key) for spent, units, key in measured)
    unmeasured.sort()
    return [key for _, key in ranked] + [key for _, key in unmeasured]
