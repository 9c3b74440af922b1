"""What over-reservation makes due now for every running claim, with its evidence
(DESIGN.md §7; API.md `GET /v1/actions/due`, `pool actions --due`).

One brain: the live projection `Pool` keeps (`Pool.projection`) and the pure decision
(`acts.due_act`) under the `[runtime]` policy; every surface and the Slurm agent read this.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from joulepool.acts import Due, Evidence, RuntimePolicy, due_act
from joulepool.live import NO_READING, STALE

if TYPE_CHECKING:
    from joulepool.pool import ClaimState, Pool


@dataclass(frozen=True, slots=True)
class DueItem:
    """One running claim's due act (or withheld one) and what it rests on."""

    claim: str
    entitlement: str
    job: str | None
    due: Due
    evidence: Evidence
    policy: RuntimePolicy

    def to_json(self, shown: str | None = None) -> dict[str, Any]:
        """API.md's item of `GET /v1/actions/due`; `shown` the claim id as the caller names it."""
        return {
            "claim": self.claim if shown is None else shown,
            "entitlement": self.entitlement,
            "job": self.job,
            "kind": self.due.kind,
            "reason": self.due.reason,
            "evidence": self.evidence.to_json(),
            "policy": self.policy.to_json(),
        }


def evidence_of(pool: Pool, state: ClaimState, now_ms: int) -> tuple[Evidence, str | None]:
    """A running claim's evidence now (DESIGN.md §7) and its job id, as `Pool` projects it."""
    proj = pool.projection(state, now_ms)
    reserved = state.admitted.reserved.uj
    if proj is None or proj.energy is None:
        found = pool.live.get(state.claim)
        unknown = STALE if found is not None and found.latest is not None else NO_READING
        job = proj.job.id if proj is not None and proj.job is not None else None
        return Evidence(reserved, None, None, None, None, unknown), job
    job = proj.job.id if proj.job is not None else None
    return Evidence(reserved, proj.energy, proj.at_ms, proj.power_uw, proj.exhausts_at_ms), job


def due_items(
    pool: Pool,
    policy: RuntimePolicy,
    done: Callable[[str], frozenset[str]],
    now_ms: int,
    visible: Callable[[str], bool] = lambda _e: True,
) -> list[DueItem]:
    """Every running claim whose entitlement `visible` admits, in admission order, with
    what is due for it now (`acts.due_act`); claims with nothing due are left out."""
    out: list[DueItem] = []
    for state in pool.running_claims():
        ent = state.admitted.entitlement
        if not visible(ent):
            continue
        evidence, job = evidence_of(pool, state, now_ms)
        due = due_act(policy, evidence, now_ms, done(state.claim))
        if due.kind is not None:
            out.append(DueItem(state.claim, ent, job, due, evidence, policy))
    return out
