"""Verdicts and refusals in plain words, for people reading a terminal (standard §4.5).

The reason codes are the contract; these sentences are for the person who submitted the
claim, saying what was wrong and what would change the answer.
"""

from __future__ import annotations

from joulepool.admission import Admit, DenyReason, QueueReason, Verdict
from joulepool.units import energy_text

_DENY = {
    DenyReason.unknown_entitlement: ("the pool holds no entitlement of that name"),
    DenyReason.empty_gang: ("a gang of no members, or of members with no devices, claims nothing"),
    DenyReason.devices_exceed_guarantee: (
        "it asks for more devices than the entitlement is ever guaranteed; devices never borrow"
    ),
    DenyReason.energy_exceeds_limit: ("its estimate exceeds the entitlement's hard limit"),
    DenyReason.unobserved_cannot_borrow: (
        "its estimate is a guess (Estimator) larger than the whole guarantee, and a "
        "guess may never borrow; measure the work to earn an observed estimate"
    ),
    DenyReason.weight_zero_cannot_borrow: (
        "its estimate is larger than the whole guarantee and the entitlement has no "
        "over-quota weight to borrow with"
    ),
    DenyReason.exceeds_weighted_share: (
        "even with every sibling's guarantee unspent, the part it must borrow exceeds "
        "its weighted share"
    ),
}

_QUEUE = {
    QueueReason.devices_held: (
        "the entitlement's devices are held by running claims; it fits once some are released"
    ),
    QueueReason.guarantee_exhausted_may_not_borrow: (
        "the guarantee is spent and this estimate may not borrow (a guess, or no "
        "over-quota weight); it fits after a release"
    ),
    QueueReason.limit_reached: ("admitting it now would pass the entitlement's hard limit"),
    QueueReason.surplus_insufficient: (
        "the siblings' unspent surplus, or this entitlement's weighted share of it, is "
        "too small right now"
    ),
}


def explain(verdict: Verdict) -> str:
    """One sentence saying what a verdict means for the claim (§4.5, §4.6)."""
    if isinstance(verdict, Admit):
        borrowed = (
            f", {energy_text(verdict.borrowed_uj)} of it borrowed from siblings' surplus"
            if verdict.borrowed_uj
            else ", all inside its own guarantee"
        )
        return (
            f"admitted: {energy_text(verdict.reserved.uj)} reserved at grade "
            f"{verdict.reserved.grade.value}"
            f"{borrowed}, {verdict.devices} device(s) held"
        )
    if verdict.verdict == "queue":
        return f"queued ({verdict.reason.value}): {reason_text(verdict.reason)}"
    return f"denied ({verdict.reason.value}): {reason_text(verdict.reason)}"


def reason_text(reason: DenyReason | QueueReason) -> str:
    """What a Deny or Queue reason code means, in words (§4.5)."""
    if isinstance(reason, DenyReason):
        return _DENY[reason]
    return _QUEUE[reason]


def renewal(period_end_ms: int, noun: str) -> str:
    """When a Queue the period's budget caused ends without any release (DESIGN.md §3)."""
    from joulepool.periods import utc_text

    return f"fits from {utc_text(period_end_ms)}, when the {noun}'s guarantee renews"
