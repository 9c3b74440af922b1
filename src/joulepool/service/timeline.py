"""Each entitlement's committed energy over time in a budget period, read from the
ledger's own history (DESIGN.md §3, §6.1), for the dashboard's line chart.

The ledger holds only `Admitted` and `Released`, each with its `at_ms`. A claim belongs to
the period of its `Admitted` entry for good: its reservation moves that period's committed
figure up when it is admitted, and its release moves the same period's figure by
`actual - reserved`, at the release's time, even when that falls in a later period. The
last point of each series is therefore the period's `committed_uj` as `usage` reports it.

Entries are folded once, as they arrive (the service reads only what is new since its
last look), and each series keeps at most `MAX_POINTS` points: past that, every other
older point is dropped, the last always kept, so memory stays bounded however long the
ledger grows. A changed period schedule (SIGHUP) regroups everything from entry 0.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from itertools import islice

from joulepool.events import Admitted, Released
from joulepool.ledger.cose import open_envelope
from joulepool.ledger.entry import event_of
from joulepool.periods import Schedule
from joulepool.pool import Pool

MAX_POINTS = 1000
"""Points kept per entitlement and period."""


@dataclass
class _Fold:
    """What has been folded so far, under one schedule."""

    schedule: Schedule
    length: int = 0
    # Running claims: claim id -> (entitlement, period index, reserved µJ).
    open: dict[str, tuple[str, int, int]] = field(default_factory=dict)
    # (period index, entitlement) -> [[at_ms, committed µJ], ...], oldest first.
    series: dict[tuple[int, str], list[list[int]]] = field(default_factory=dict)
    # Declared class -> entitlements that admitted claims of it.
    classes: dict[str, set[str]] = field(default_factory=dict)


class Timeline:
    """The ledger's committed energy over time, per period and entitlement (DESIGN.md §3)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fold: _Fold | None = None

    def catch_up(self, pool: Pool) -> int:
        """Fold the entries appended since the last look (all of them after a schedule
        change); the length folded (§6.1: the ledger's own entries, already verified)."""
        with self._lock:
            fold = self._fold
            if fold is None or fold.schedule != pool.schedule:
                fold = self._fold = _Fold(pool.schedule)
            length = pool.length
            if length <= fold.length:
                return fold.length
            for raw in islice(pool.entries(fold.length), length - fold.length):
                self._feed(fold, event_of(open_envelope(raw).core, pool.steward))
                fold.length += 1
            return fold.length

    @staticmethod
    def _feed(fold: _Fold, event: object) -> None:
        if isinstance(event, Admitted):
            index = fold.schedule.index_at(event.at_ms)
            fold.open[event.claim] = (event.entitlement, index, event.reserved.uj)
            _move(fold, index, event.entitlement, event.at_ms, event.reserved.uj)
            if event.class_:
                fold.classes.setdefault(event.class_, set()).add(event.entitlement)
        elif isinstance(event, Released):
            running = fold.open.pop(event.claim, None)
            if running is not None:
                entitlement, index, reserved = running
                _move(fold, index, entitlement, event.at_ms, event.actual.uj - reserved)

    def series(self, index: int, ids: list[str]) -> dict[str, list[list[int]]]:
        """`[[at_ms, committed_uj], ...]` for each of `ids` with claims in period `index`
        (DESIGN.md §3: a claim counts in the period of its `Admitted` entry)."""
        with self._lock:
            fold = self._fold
            if fold is None:
                return {}
            return {
                i: [list(p) for p in fold.series[index, i]]
                for i in ids
                if (index, i) in fold.series
            }

    def periods(self, ids: list[str]) -> list[int]:
        """The indexes of the periods in which any of `ids` had claims admitted, oldest first
        (DESIGN.md §3)."""
        wanted = set(ids)
        with self._lock:
            fold = self._fold
            if fold is None:
                return []
            return sorted({index for index, i in fold.series if i in wanted})

    def classes(self) -> dict[str, set[str]]:
        """Each declared class and the entitlements that admitted claims of it (§2.6)."""
        with self._lock:
            fold = self._fold
            return {} if fold is None else {c: set(e) for c, e in fold.classes.items()}


def _move(fold: _Fold, index: int, entitlement: str, at_ms: int, delta_uj: int) -> None:
    points = fold.series.setdefault((index, entitlement), [])
    committed = (points[-1][1] if points else 0) + delta_uj
    if points and points[-1][0] == at_ms:
        points[-1][1] = committed
        return
    points.append([at_ms, committed])
    if len(points) > MAX_POINTS:
        points[:] = [*points[:-1:2], points[-1]]
