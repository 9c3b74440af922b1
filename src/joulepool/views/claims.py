"""What an operator asks of claims: which are running per team, where one stands, and
whether one would admit now (`pool claims`, `pool claim`, `pool admit --dry-run`).

Everything here reads; nothing is written. A claim's shape is API.md's `GET /v1/claims/{id}`
answer, built by `claim_json` for the CLI and the HTTP service alike.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from joulepool.errors import InvalidInput
from joulepool.events import Admitted
from joulepool.ledger.cose import open_envelope
from joulepool.ledger.entry import event_of

if TYPE_CHECKING:
    from joulepool.claim import Claim
    from joulepool.pool import ClaimState, Decision, Pool
    from joulepool.tree import Tree


def closest_ids(tree: Tree, name: str, count: int = 3) -> list[str]:
    """The entitlement ids nearest `name` in spelling, nearest first."""
    return difflib.get_close_matches(name, [e.id for e in tree], n=count, cutoff=0.6)


def did_you_mean(tree: Tree, name: str) -> str:
    """`" (did you mean 'vision'?)"` for a mistyped id, or "" when nothing is close."""
    near = closest_ids(tree, name)
    if not near:
        return ""
    return " (did you mean " + " or ".join(repr(n) for n in near) + "?)"


def require_entitlement(tree: Tree, name: str, where: str) -> None:
    """Refuse an id the tree does not hold, naming the closest ones."""
    if name not in tree:
        raise InvalidInput(where, f"no entitlement {name!r} in the tree{did_you_mean(tree, name)}")


def claim_json(state: ClaimState, shown_id: str | None = None) -> dict[str, Any]:
    """API.md's `GET /v1/claims/{id}` answer for `state` (§6.2), the id as `shown_id`."""
    adm = state.admitted
    out: dict[str, Any] = {
        "claim": state.claim if shown_id is None else shown_id,
        "state": "running" if state.running else "released",
        "entitlement": adm.entitlement,
        "reserved": adm.reserved.to_json(),
        "devices": adm.devices,
        "borrowed_uj": adm.borrowed_uj,
        "admitted_seq": state.admitted_seq,
    }
    if state.released is not None:
        out["actual"] = state.released.actual.to_json()
        out["released_seq"] = state.released_seq
    return out


def admitted_ids(pool: Pool) -> Iterator[str]:
    """Every claim the ledger admitted, in ledger order (a read of the entries, §6.2)."""
    for raw in pool.entries(0):
        event = event_of(open_envelope(raw).core, pool.steward)
        if isinstance(event, Admitted):
            yield event.claim


def claims(
    pool: Pool, entitlement: str | None = None, state: str | None = None
) -> list[tuple[ClaimState, int]]:
    """Claims admitted to `entitlement` or its descendants (all by default), running or
    released or both, in ledger order, each with its admission instant (ms since the epoch):
    what `pool claims` lists, squeue's job for pool/1."""
    if entitlement is not None:
        require_entitlement(pool.tree, entitlement, "--entitlement")
    out = []
    for claim_id in admitted_ids(pool):
        found = pool.claim_state(claim_id)
        if found is None:
            continue
        if state is not None and (state == "running") != found.running:
            continue
        ent = found.admitted.entitlement
        if entitlement is not None and not (
            ent in pool.tree and pool.tree.is_within(ent, entitlement)
        ):
            continue
        out.append((found, found.admitted.at_ms))
    return out


def dry_run(pool: Pool, claim: Claim) -> Decision:
    """The verdict `claim` would get now against live usage (§4), nothing written: the same
    `decide` a submission runs, on the same figures, in the same period."""
    from joulepool.admission import Queue, decide
    from joulepool.claim_id import check_admitted_id
    from joulepool.errors import ClaimError
    from joulepool.pool import BUDGET_REASONS, Decision

    check_admitted_id(claim.id, claim.entitlement, pool.tree)
    if pool.claim_state(claim.id) is not None:
        raise ClaimError("claim_exists", f"claim {claim.id!r} was admitted before")
    at_ms = pool.now_ms()
    verdict = decide(pool.tree, pool.state.current(at_ms), claim)
    renews = None
    if isinstance(verdict, Queue) and verdict.reason in BUDGET_REASONS:
        renews = pool.schedule.period_at(at_ms).end_ms
    return Decision(claim.id, verdict, None, at_ms, renews)
