"""Admission: may this claim start, and what is reserved against whom (standard §3, §4).

`decide()` is pure and evaluates in exactly the order of DESIGN.md §3, stopping at the
first verdict, because a different order yields a different verdict (§4). Impossibility is
refused before anything can queue (§4.2); a guess spends its own guarantee but never a
sibling's surplus (§4.3, §4.4); Queue and Deny are distinct verdicts with reasons (§4.5).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from joulepool.claim import Claim
from joulepool.grade import Energy
from joulepool.tree import Tree, Usage


class DenyReason(StrEnum):
    """Why a claim can never fit as written (§4.1, §4.2, DESIGN.md §3)."""

    unknown_entitlement = "unknown_entitlement"
    empty_gang = "empty_gang"
    devices_exceed_guarantee = "devices_exceed_guarantee"
    energy_exceeds_limit = "energy_exceeds_limit"
    unobserved_cannot_borrow = "unobserved_cannot_borrow"
    weight_zero_cannot_borrow = "weight_zero_cannot_borrow"
    exceeds_weighted_share = "exceeds_weighted_share"


class QueueReason(StrEnum):
    """Why a claim that could fit does not fit now (§4.5, DESIGN.md §3)."""

    devices_held = "devices_held"
    guarantee_exhausted_may_not_borrow = "guarantee_exhausted_may_not_borrow"
    limit_reached = "limit_reached"
    surplus_insufficient = "surplus_insufficient"


@dataclass(frozen=True, slots=True)
class Admit:
    """The claim may start: its whole estimate reserved, at the grade it rests on (§3, §4.6)."""

    reserved: Energy
    devices: int
    borrowed_uj: int
    verdict: Literal["admit"] = "admit"

    def to_json(self) -> dict[str, object]:
        """The CONFORMANCE.md `decide` result for an admission."""
        return {
            "verdict": "admit",
            "reserved": self.reserved.to_json(),
            "devices": self.devices,
            "borrowed_uj": self.borrowed_uj,
        }


@dataclass(frozen=True, slots=True)
class Queue:
    """The claim does not fit now and may later; nothing is reserved (§4.5)."""

    reason: QueueReason
    verdict: Literal["queue"] = "queue"

    def to_json(self) -> dict[str, object]:
        """The CONFORMANCE.md `decide` result for a pending claim."""
        return {"verdict": "queue", "reason": self.reason.value}


@dataclass(frozen=True, slots=True)
class Deny:
    """The claim can never fit as written; nothing is reserved (§4.5)."""

    reason: DenyReason
    verdict: Literal["deny"] = "deny"

    def to_json(self) -> dict[str, object]:
        """The CONFORMANCE.md `decide` result for a refused claim."""
        return {"verdict": "deny", "reason": self.reason.value}


Verdict = Admit | Queue | Deny


def decide(tree: Tree, usage: Usage, claim: Claim) -> Verdict:
    """Decide one claim against live usage, in the normative order of §4 (DESIGN.md §3).

    Pure: reads `tree` and `usage` and changes neither. `usage` must be grouped by `tree`.
    """
    # 1. Resolution and shape (§4.1).
    ent = tree.get(claim.entitlement)
    if ent is None:
        return Deny(DenyReason.unknown_entitlement)
    if claim.gang_size < 1 or claim.devices_per_member < 1:
        return Deny(DenyReason.empty_gang)
    est = claim.estimate.uj
    dev = claim.devices
    g = ent.guarantee_uj
    weight = ent.over_quota_weight
    # 2. Impossibility before pendency (§4.2): what could not fit even an empty entitlement.
    if dev > ent.guarantee_devices:
        return Deny(DenyReason.devices_exceed_guarantee)
    if ent.limit_uj is not None and est > ent.limit_uj:
        return Deny(DenyReason.energy_exceeds_limit)
    if est > g:
        if not claim.estimate.grade.observed:
            return Deny(DenyReason.unobserved_cannot_borrow)
        if weight == 0:
            return Deny(DenyReason.weight_zero_cannot_borrow)
        # The largest share the tree could ever grant: every sibling's whole guarantee unspent.
        if (est - g) * tree.group_weight(ent.id) > tree.siblings_guarantee_uj(ent.id) * weight:
            return Deny(DenyReason.exceeds_weighted_share)
    spent = usage.spent_uj(ent.id)
    held = usage.held_devices(ent.id)
    # 3. Inside the guarantee, at any grade (§4.3).
    if spent + est <= g and held + dev <= ent.guarantee_devices:
        return Admit(claim.estimate, dev, 0)
    # 4. Devices never borrow (DESIGN.md §3).
    if held + dev > ent.guarantee_devices:
        return Queue(QueueReason.devices_held)
    # 5. Borrowing, §4.4's rules in the standard's order.
    if not claim.estimate.grade.observed or weight == 0:
        return Queue(QueueReason.guarantee_exhausted_may_not_borrow)
    after = spent + est
    if ent.limit_uj is not None and after > ent.limit_uj:
        return Queue(QueueReason.limit_reached)
    borrowed_before = max(0, spent - g)
    borrowed_after = after - g
    lendable = usage.lendable_uj(ent.id)
    # share_b = floor(L_b * w_b / W); borrowed <= share_b  <=>  borrowed * W <= L_b * w_b.
    within_share = borrowed_after * tree.group_weight(ent.id) <= lendable * weight
    group_after = usage.group_borrowed_uj(ent.id) - borrowed_before + borrowed_after
    if not within_share or group_after > lendable:
        return Queue(QueueReason.surplus_insufficient)
    # 6. Admitted against borrowed surplus (§4.6).
    return Admit(claim.estimate, dev, borrowed_after - borrowed_before)
