"""What the run-time rules make due now for every running claim, with its evidence
(DESIGN.md §7; API.md `GET /v1/actions/due`, `pool actions --due`).

One brain: the live projection `Pool` keeps (`Pool.projection`), what the action log says
was done, and the pure decisions: the reservation as a limit (`acts.due_act`), §2.7 idle
reclamation (`reclaim.idle_due`) and §5.2 preemption (`reclaim.victims`,
`reclaim.preemption_due`). Every surface and the Slurm agent read this; a future
Kubernetes bridge would carry out the same list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from joulepool.acts import MEASURED, Due, Evidence, RuntimePolicy, due_act
from joulepool.live import NO_READING, STALE, Projection
from joulepool.reclaim import (
    IdleActs,
    PreemptionPolicy,
    RuleState,
    Running,
    Waiting,
    idle_due,
    preemption_due,
    victims,
)

if TYPE_CHECKING:
    from joulepool.pool import ClaimState, Pool

OVER_RESERVATION, IDLE, PREEMPTION = "over_reservation", "idle", "preemption"
NOT_REQUEUEABLE = "not_requeueable"
"""Why an idle requeue is withheld: the workload manager may not requeue the job."""


class RuleBook(Protocol):
    """What the action log says of a claim, per rule (`deployment.actions.ActionLog`)."""

    def done(self, claim: str, rule: str = OVER_RESERVATION) -> frozenset[str]: ...

    def notice_at(self, claim: str, rule: str) -> int | None: ...

    def requeued_at(self, claim: str) -> int | None: ...

    def requeued_for(self, waiter: str) -> list[tuple[str, int]]: ...

    def touched(self, claim: str) -> bool: ...


class NoBook:
    """A service that keeps no action log: nothing was ever done."""

    def done(self, _claim: str, _rule: str = OVER_RESERVATION) -> frozenset[str]:
        """Nothing is recorded done."""
        return frozenset()

    def notice_at(self, _claim: str, _rule: str) -> int | None:
        """No notice was given."""
        return None

    def requeued_at(self, _claim: str) -> int | None:
        """No job was requeued."""
        return None

    def requeued_for(self, _waiter: str) -> list[tuple[str, int]]:
        """No job was requeued for anyone."""
        return []

    def touched(self, _claim: str) -> bool:
        """No claim has a record."""
        return False


NOTHING_DONE = RuleState()


def rule_state(book: RuleBook, claim: str, rule: str) -> RuleState:
    """`claim`'s state under `rule` as the log tells it (DESIGN.md §7)."""
    if not book.touched(claim):
        return NOTHING_DONE
    return RuleState(book.done(claim, rule), book.notice_at(claim, rule), book.requeued_at(claim))


@dataclass(frozen=True, slots=True)
class Policies:
    """The run-time policies in force: `[runtime]`, `[idle]`'s acts, `[preemption]`."""

    runtime: RuntimePolicy
    idle: IdleActs
    preemption: PreemptionPolicy

    def of(self, rule: str) -> RuntimePolicy | IdleActs | PreemptionPolicy:
        """The policy of one rule."""
        if rule == IDLE:
            return self.idle
        return self.preemption if rule == PREEMPTION else self.runtime


@dataclass(frozen=True, slots=True)
class DueItem:
    """One running claim's due act (or withheld one) under one rule, and what it rests on;
    `for_claim` is the waiting claim a preemption serves."""

    claim: str
    entitlement: str
    job: str | None
    due: Due
    evidence: Evidence
    policy: RuntimePolicy | IdleActs | PreemptionPolicy
    rule: str = OVER_RESERVATION
    for_claim: str | None = None
    idle: dict[str, Any] | None = None

    def to_json(self, shown: str | None = None) -> dict[str, Any]:
        """API.md's item of `GET /v1/actions/due`; `shown` the claim id as the caller names it."""
        evidence: dict[str, object] = self.evidence.to_json()
        if self.idle is not None:
            evidence["idle"] = self.idle
        out: dict[str, Any] = {
            "claim": self.claim if shown is None else shown,
            "entitlement": self.entitlement,
            "job": self.job,
            "rule": self.rule,
            "kind": self.due.kind,
            "reason": self.due.reason,
            "evidence": evidence,
            "policy": self.policy.to_json(),
        }
        if self.rule == PREEMPTION:
            out["for"] = self.for_claim
        return out


def evidence_from(
    pool: Pool, state: ClaimState, proj: Projection | None
) -> tuple[Evidence, str | None]:
    """A running claim's evidence (DESIGN.md §7) and its job id, from its projection."""
    reserved = state.admitted.reserved.uj
    job = proj.job.id if proj is not None and proj.job is not None else None
    if proj is None or proj.energy is None:
        found = pool.live.get(state.claim)
        unknown = STALE if found is not None and found.latest is not None else NO_READING
        return Evidence(reserved, None, None, None, None, unknown), job
    return Evidence(reserved, proj.energy, proj.at_ms, proj.power_uw, proj.exhausts_at_ms), job


def evidence_of(pool: Pool, state: ClaimState, now_ms: int) -> tuple[Evidence, str | None]:
    """A running claim's evidence now (DESIGN.md §7) and its job id, as `Pool` projects it."""
    return evidence_from(pool, state, pool.projection(state, now_ms))


def _freed_for(
    pool: Pool, book: RuleBook, waiter: str, since_ms: int, cooldown_s: int, now_ms: int
) -> int:
    """The GPUs preemption already freed for `waiter` in its present wait: the devices of
    the claims requeued for it since it began waiting, within `cooldown_s`. Slurm starts
    the waiter only once their runs have ended, so until then it still waits; without
    this it would take a further victim on every pass meanwhile."""
    freed = 0
    for victim, at_ms in book.requeued_for(waiter):
        if at_ms < since_ms or now_ms - at_ms >= cooldown_s * 1000:
            continue
        found = pool.claim_state(victim)
        freed += found.admitted.devices if found is not None else 0
    return freed


def _running_and_waiting(
    pool: Pool,
    claims: list[tuple[ClaimState, Projection | None]],
    book: RuleBook,
    cooldown_s: int,
    now_ms: int,
) -> tuple[list[Running], list[Waiting]]:
    """What preemption decides over (§5.2): claims whose jobs wait for resources, each
    asking for the GPUs not yet freed for it (`_freed_for`), and claims whose jobs run
    where a fresh reading says so (a partition is known). Running claims only in
    partitions where some claim waits: no other could be a victim."""
    tree = pool.tree
    priorities: dict[str, int] = {}

    def priority(ent: str) -> int:
        if ent not in priorities:
            found = tree.get(ent)
            priorities[ent] = found.priority if found is not None else 0
        return priorities[ent]

    waiting: list[Waiting] = []
    for state, proj in claims:
        if proj is not None and proj.waiting is not None:
            w, ent = proj.waiting, state.admitted.entitlement
            requeued = book.requeued_at(state.claim)
            freed = _freed_for(pool, book, state.claim, w.since_ms, cooldown_s, now_ms)
            owed = max(0, w.gpus - freed)
            waiting.append(
                Waiting(state.claim, ent, priority(ent), w.partition, owed, w.since_ms, requeued)
            )
    partitions = {w.partition for w in waiting}
    running: list[Running] = []
    for state, proj in claims:
        if proj is None or proj.waiting is not None or proj.energy is None:
            continue
        job = proj.job
        if job is None or job.partition not in partitions:
            continue
        ent = state.admitted.entitlement
        measured = proj.energy.grade in MEASURED
        running.append(
            Running(
                state.claim,
                ent,
                priority(ent),
                job.partition,
                state.admitted.devices,
                proj.energy.uj if measured else None,
                proj.units,
                job.requeue,
                book.requeued_at(state.claim),
            )
        )
    return running, waiting


def due_items(
    pool: Pool,
    policies: Policies,
    book: RuleBook,
    now_ms: int,
    visible: Callable[[str], bool] = lambda _e: True,
) -> list[DueItem]:
    """Every running claim whose entitlement `visible` admits, in admission order, with what
    each rule makes due for it now; claims with nothing due are left out. Victims are chosen
    over every claim, whoever asks: what one bridge sees must not change who yields."""
    states = pool.running_claims()
    claims = list(zip(states, pool.projections(states, now_ms), strict=True))
    running, waiting = _running_and_waiting(
        pool, claims, book, policies.preemption.cooldown_s, now_ms
    )
    chosen, _uncovered = victims(policies.preemption, waiting, running, now_ms)
    serves = {v.claim: v.for_claim for v in chosen}
    contended = {w.partition for w in waiting if w.partition is not None}
    configured = pool.idle_policy.configured
    out: list[DueItem] = []
    for state, proj in claims:
        ent = state.admitted.entitlement
        if not visible(ent):
            continue
        claim = state.claim
        # A claim the log has never named has nothing done, noticed or requeued: its state
        # is known without asking, and a rule with nothing to act on and no notice to
        # withdraw (not idle; not a victim) has nothing due.
        touched = book.touched(claim)
        evidence, job = evidence_from(pool, state, proj)
        found: list[tuple[Due, str, str | None]] = []
        done = book.done(claim) if touched else NOTHING_DONE.done
        found.append((due_act(policies.runtime, evidence, now_ms, done), OVER_RESERVATION, None))
        if proj is not None and proj.waiting is None:
            if touched or proj.verdict == "idle":
                idle = _idle(policies.idle, configured, proj, contended, book, claim, now_ms)
                found.append((idle, IDLE, None))
            for_claim = serves.get(claim)
            if touched or for_claim is not None:
                state_now = rule_state(book, claim, PREEMPTION)
                due = preemption_due(
                    policies.preemption, for_claim is not None, for_claim, state_now, now_ms
                )
                found.append((due, PREEMPTION, for_claim))
        for due, rule, for_claim in found:
            if due.kind is None:
                continue
            shown = None
            if rule == IDLE and proj is not None:
                shown = {"verdict": proj.verdict, "reason": proj.reason}
            out.append(
                DueItem(claim, ent, job, due, evidence, policies.of(rule), rule, for_claim, shown)
            )
    return out


def _idle(
    policy: IdleActs,
    configured: bool,
    proj: Projection,
    contended: set[str],
    book: RuleBook,
    claim: str,
    now_ms: int,
) -> Due:
    """The §2.7 act due for one running claim; a requeue Slurm may not carry out is
    withheld once rather than noticed and refused on every pass."""
    job = proj.job
    partition = job.partition if job is not None else None
    due = idle_due(
        policy,
        configured,
        proj.verdict,
        proj.reason,
        partition is not None and partition in contended,
        rule_state(book, claim, IDLE),
        now_ms,
    )
    refused = job is not None and not job.requeue
    if policy.action == "requeue" and due.kind in ("notice", "requeue") and refused:
        return Due("withheld", NOT_REQUEUEABLE)
    return due
