"""The verdicts this service gave: counted by entitlement, kind and reason for `/metrics`,
and the most recent kept for the dashboard.

Queue and Deny are never ledger events (§6.2), so nothing but the service that answered
them knows of them: both views are this process's, since it started. Each verdict is
recorded once, here, so the counters and the list can never tell different stories.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from joulepool.claim_id import shown_id
from joulepool.tree import Tree

RECENT = 200
"""Verdicts kept for the dashboard, newest last; older ones are only counted."""


class VerdictBook:
    """Counts of verdicts by (entitlement, verdict, reason) and the last `keep` verdicts.

    The entitlement of a claim naming one the tree does not hold is recorded as "" (an
    absent label to Prometheus), so a hostile client cannot grow the label set.
    """

    def __init__(self, keep: int = RECENT) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str, str], int] = {}
        self._recent: deque[dict[str, Any]] = deque(maxlen=keep)

    def record(self, tree: Tree, entitlement: str, answer: dict[str, Any], at_ms: int) -> None:
        """Count one verdict (§4.5; the `POST /v1/claims` answer, full claim id) given at `at_ms`."""
        known = entitlement if entitlement in tree else ""
        key = (known, str(answer["verdict"]), str(answer.get("reason", "")))
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1
            self._recent.append({"at_ms": at_ms, "entitlement": known, **answer})

    def counts(self, visible: Callable[[str], bool]) -> dict[tuple[str, str, str], int]:
        """The counts of the entitlements `visible` accepts (API.md "Metrics": `pool_verdicts_total`)."""
        with self._lock:
            return {k: n for k, n in self._counts.items() if visible(k[0])}

    def recent(
        self, visible: Callable[[str], bool], tenant: str | None, limit: int
    ) -> list[dict[str, Any]]:
        """The newest `limit` verdicts `visible` accepts, newest first, each claim id as the
        principal rooted at `tenant` names it (API.md "Dashboard", `verdicts`; claim_id.py)."""
        with self._lock:
            kept = list(self._recent)
        out: list[dict[str, Any]] = []
        for item in reversed(kept):
            if len(out) >= limit:
                break
            if visible(item["entitlement"]):
                out.append({**item, "claim": shown_id(tenant, item["claim"])})
        return out
