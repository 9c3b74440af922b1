"""Claims with their live figures, a page at a time (API.md "Run time"; DESIGN.md §7):
what `GET /v1/claims`, `GET /v1/claims/{id}`, `pool claims` and `pool claim` show.

A page is bounded twice: by the number of claims it holds and by the number of ledger
entries read to fill it, so a filter that matches little never turns one request into a
read of the whole ledger. The cursor is the ledger index to go on from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from joulepool.checks import check_figure
from joulepool.errors import InvalidInput
from joulepool.events import Admitted
from joulepool.ledger.cose import open_envelope
from joulepool.ledger.entry import event_of
from joulepool.views.claims import claim_json

if TYPE_CHECKING:
    from joulepool.pool import ClaimState, Pool

MAX_PAGE = 1000
"""The most claims one page holds."""

DEFAULT_PAGE = 100

MAX_SCAN = 20_000
"""The most ledger entries one page reads to find released claims."""

STATES = ("running", "released")


@dataclass(frozen=True, slots=True)
class ClaimFilter:
    """Which claims a page holds: within `scope` (a tenant's root, None for all), within
    `entitlement`'s subtree, in `state`, admitted at least `min_age_ms` ago."""

    scope: str | None = None
    entitlement: str | None = None
    state: str | None = None
    min_age_ms: int | None = None

    def admits(self, pool: Pool, state: ClaimState, now_ms: int) -> bool:
        """Whether `state` passes the filter."""
        ent = state.admitted.entitlement
        for root in (self.scope, self.entitlement):
            if root is not None and not (ent in pool.tree and pool.tree.is_within(ent, root)):
                return False
        if self.state is not None and (self.state == "running") != state.running:
            return False
        age = now_ms - state.admitted.at_ms
        return self.min_age_ms is None or age >= self.min_age_ms


def check_filter(
    pool: Pool,
    scope: str | None,
    entitlement: object,
    state: object,
    min_age_s: object,
) -> ClaimFilter:
    """A filter from hostile input: an entitlement in the tree, a known state, an integer age."""
    ent = None
    if entitlement is not None:
        if not isinstance(entitlement, str) or entitlement not in pool.tree:
            raise InvalidInput("entitlement", f"no entitlement {entitlement!r} in the tree")
        ent = entitlement
    if state is not None and state not in STATES:
        raise InvalidInput("state", "must be 'running' or 'released'")
    age = None if min_age_s is None else check_figure(min_age_s, "min_age_s") * 1000
    return ClaimFilter(scope, ent, state if isinstance(state, str) else None, age)


def live_claim_json(
    pool: Pool,
    state: ClaimState,
    shown: str,
    now_ms: int,
    last_act: Callable[[str], dict[str, Any] | None] | None = None,
) -> dict[str, Any]:
    """API.md's claim object, with `"live"` for a running claim (DESIGN.md §7); where the
    service keeps an action log (`last_act`), `"live"` names the claim's newest act, null
    for none."""
    out = claim_json(state, shown)
    projection = pool.projection(state, now_ms)
    if projection is not None:
        out["live"] = projection.to_json()
        if last_act is not None:
            out["live"]["last_act"] = last_act(state.claim)
    return out


def page(
    pool: Pool, where: ClaimFilter, cursor: int = 0, limit: int = DEFAULT_PAGE
) -> tuple[list[ClaimState], int | None]:
    """Claims passing `where`, in ledger order from index `cursor`, at most `limit` of them,
    and the cursor of the next page (None at the end of the ledger)."""
    check_figure(cursor, "cursor")
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInput("limit", f"must be between 1 and {MAX_PAGE}")
    now_ms = pool.now_ms()
    found: list[ClaimState] = []
    if where.state == "running":
        # Running claims are in memory: no entry needs reading.
        running = sorted(
            (s for s in pool.running_claims() if s.admitted_seq >= cursor),
            key=lambda s: s.admitted_seq,
        )
        for state in running:
            if where.admits(pool, state, now_ms):
                if len(found) == limit:
                    return found, state.admitted_seq
                found.append(state)
        return found, None
    seq = cursor
    for raw in pool.entries(cursor):
        if seq - cursor >= MAX_SCAN or len(found) == limit:
            return found, seq
        event = event_of(open_envelope(raw).core, pool.steward)
        if isinstance(event, Admitted):
            known = pool.claim_state(event.claim)
            if known is not None and where.admits(pool, known, now_ms):
                found.append(known)
        seq += 1
    return found, None


@dataclass(slots=True)
class EntitlementLive:
    """One entitlement's running claims as their live figures add up (DESIGN.md §7):
    energy so far over the claims with a fresh reading, how many have none, and how many
    stand at each §2.7 verdict and reason."""

    energy_uj: int = 0
    read: int = 0
    unread: int = 0
    verdicts: dict[tuple[str, str], int] | None = None


def live_by_entitlement(pool: Pool, now_ms: int | None = None) -> dict[str, EntitlementLive]:
    """Every entitlement with running claims, its live sums (the `/metrics` gauges): the
    same projections `GET /v1/claims` shows, added up per entitlement."""
    at = pool.now_ms() if now_ms is None else now_ms
    out: dict[str, EntitlementLive] = {}
    for state in pool.running_claims():
        projection = pool.projection(state, at)
        if projection is None:
            continue
        sums = out.setdefault(state.admitted.entitlement, EntitlementLive(verdicts={}))
        if projection.energy is None:
            sums.unread += 1
        else:
            sums.read += 1
            sums.energy_uj += projection.energy.uj
        key = (projection.verdict, projection.reason or "")
        assert sums.verdicts is not None
        sums.verdicts[key] = sums.verdicts.get(key, 0) + 1
    return out
