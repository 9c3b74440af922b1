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

The history before the service started is folded by a thread of its own (`build`), in
chunks with a pause between them, never by a request: a request folds at most
`REQUEST_FOLD_MAX` new entries and is otherwise told the timeline is still being built
(`TimelineBuilding`, which the dashboard answers 503 with Retry-After). Read in a request,
the whole history stalled the service: 2.85 s at 200,000 entries, every thread of the
request pool waiting on it (docs/reliability.md §16).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from itertools import islice

from joulepool.events import Admitted, Released
from joulepool.ledger.cose import open_envelope
from joulepool.ledger.entry import event_of
from joulepool.periods import Schedule
from joulepool.pool import Pool

MAX_POINTS = 1000
"""Points kept per entitlement and period."""

REQUEST_FOLD_MAX = 4096
"""The most entries a request folds itself (about 60 ms of decoding); more is the build's."""

CHUNK = 512
"""Entries the build folds under the timeline's lock before it lets a request in."""

PAUSE_S = 0.002
"""The build's pause between chunks: the interpreter is the requests' for that long."""

log = logging.getLogger("joulepool.serve")


class TimelineBuilding(Exception):
    """The timeline has folded `folded` of the ledger's `length` entries: too many are left
    for a request to fold (docs/reliability.md §16)."""

    def __init__(self, folded: int, length: int) -> None:
        super().__init__(
            f"the dashboard's timeline is being built from the ledger's history: {folded} of "
            f"{length} entries read; ask again shortly"
        )
        self.folded, self.length = folded, length


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
        self._builder: threading.Thread | None = None
        self._builder_lock = threading.Lock()

    def behind(self, pool: Pool) -> int:
        """How many of the pool's entries are not folded yet (all of them after a schedule
        change), read without waiting on a fold in progress (docs/reliability.md §16)."""
        fold = self._fold
        if fold is None or fold.schedule != pool.schedule:
            return pool.length
        return max(0, pool.length - fold.length)

    def catch_up(self, pool: Pool, most: int | None = None) -> int:
        """Fold the entries appended since the last look (all of them after a schedule
        change); the length folded (§6.1: the ledger's own entries, already verified).

        With `most`, fold nothing and raise `TimelineBuilding` when more than `most` are
        left: a request's share, so the history is never read on the request path."""
        if most is not None and (left := self.behind(pool)) > most:
            raise TimelineBuilding(pool.length - left, pool.length)
        with self._lock:
            fold = self._current(pool)
            length = pool.length
            if most is not None and length - fold.length > most:
                raise TimelineBuilding(fold.length, length)
            self._fold_to(fold, pool, length)
            return fold.length

    def build(self, pool: Pool) -> int:
        """Fold every entry the pool holds, `CHUNK` at a time with a pause between, so
        requests and probes keep the interpreter while it runs (docs/reliability.md §16);
        the length folded."""
        while True:
            with self._lock:
                fold = self._current(pool)
                length = min(pool.length, fold.length + CHUNK)
                if fold.length >= length:
                    return fold.length
                self._fold_to(fold, pool, length)
            time.sleep(PAUSE_S)

    def build_in_background(self, pool: Pool) -> threading.Thread:
        """Start `build` in a thread of its own unless one runs (docs/reliability.md §16).
        A failure (the store unreachable) is logged and ends it; the next request that
        finds the timeline behind starts another."""
        with self._builder_lock:
            running = self._builder
            if running is not None and running.is_alive():
                return running

            def run() -> None:
                started = time.monotonic()
                try:
                    length = self.build(pool)
                except Exception as exc:
                    log.warning("the dashboard's timeline was not built: %s", exc)
                    return
                log.info(
                    "dashboard timeline built: %d entries in %.2f s",
                    length,
                    time.monotonic() - started,
                )

            thread = threading.Thread(target=run, name="timeline", daemon=True)
            self._builder = thread
            thread.start()
            return thread

    def _current(self, pool: Pool) -> _Fold:
        fold = self._fold
        if fold is None or fold.schedule != pool.schedule:
            fold = self._fold = _Fold(pool.schedule)
        return fold

    def _fold_to(self, fold: _Fold, pool: Pool, length: int) -> None:
        if length <= fold.length:
            return
        for raw in islice(pool.entries(fold.length), length - fold.length):
            self._feed(fold, event_of(open_envelope(raw).core, pool.steward))
            fold.length += 1

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
