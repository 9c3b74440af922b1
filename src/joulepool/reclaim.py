"""Acting on evidence: idle reclamation (standard §2.7) and preemption for a waiting claim
(§5.2), as acts made due (DESIGN.md §7).

Pure decisions of (policy, live evidence, the action log's state for a claim and rule,
now): no clock, no I/O, integers only, so `GET /v1/actions/due`, `pool actions --due` and
the Slurm agent read one answer, and `pool exec` holds each to its vectors (operations
`idle_act` and `victims`).

- `idle_due`: a running claim the §2.7 verdict calls idle is told (`notice`), then, after
  `notice_s`, requeued or cancelled; the default `report` never acts. An unconfigured
  §2.7 policy reclaims nothing, whatever `[idle] action` says (§2.7: the failure of an
  unconfigured destructive action is a missed optimisation, not destroyed work).
- `victims`: the running claims to requeue so that a pool-admitted claim waiting for
  GPUs can run, in the §5.2 order (`preemption.preemption_order`, evidence before
  declaration); `preemption_due` then makes the act due per victim.

Each act is due at most once per claim and rule: `RuleState.done` names the kinds the
action log recorded since the claim's last requeue.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from joulepool.acts import MAX_NOTICE_S, Due
from joulepool.checks import check_figure, check_text
from joulepool.errors import InvalidInput
from joulepool.preemption import order_of

IDLE_ACTIONS = ("report", "requeue", "cancel")
"""What `[idle] action` may say: `report` never acts."""
IDLE_WHEN = ("always", "contended")
"""When `[idle]` acts: always, or only while a pool-admitted claim waits for GPUs."""
PREEMPTION_ACTIONS = ("report", "requeue")
"""What `[preemption] action` may say: `report` never acts."""
VERDICTS = ("idle", "working", "nothing_held", "no_verdict")
"""The §2.7 verdicts a live projection gives."""
MAX_S = MAX_NOTICE_S
"""Every duration of these tables is at most 7 days."""


@dataclass(frozen=True, slots=True)
class IdleActs:
    """What `[idle]` does with an idle verdict (DESIGN.md §7); the defaults report."""

    action: str = "report"
    notice_s: int = 300
    when: str = "always"

    def to_json(self) -> dict[str, object]:
        """As the action log and `GET /v1/actions/due` record it."""
        return {"action": self.action, "notice_s": self.notice_s, "when": self.when}


@dataclass(frozen=True, slots=True)
class PreemptionPolicy:
    """pool.toml's `[preemption]` table (DESIGN.md §7, §5.2); the defaults report."""

    action: str = "report"
    after_s: int = 600
    notice_s: int = 300
    cooldown_s: int = 3600

    def to_json(self) -> dict[str, object]:
        """As the action log and `GET /v1/actions/due` record it."""
        return {
            "action": self.action,
            "after_s": self.after_s,
            "notice_s": self.notice_s,
            "cooldown_s": self.cooldown_s,
        }


@dataclass(frozen=True, slots=True)
class RuleState:
    """What the action log says of one claim under one rule: the kinds recorded done since
    its last requeue, when the outstanding notice was given (None: none, or cleared by a
    later `withheld`), and the last requeue done under any rule."""

    done: frozenset[str] = frozenset()
    notice_at_ms: int | None = None
    requeued_at_ms: int | None = None


def _choice(table: Mapping[str, object], name: str, choices: tuple[str, ...], where: str) -> str:
    value = table.get(name, choices[0])
    if type(value) is not str or value not in choices:
        raise InvalidInput(where, f"must be one of {', '.join(choices)}, got {value!r}")
    return value


def _seconds(table: Mapping[str, object], name: str, default: int, where: str) -> int:
    value = check_figure(table.get(name, default), where)
    if value > MAX_S:
        raise InvalidInput(where, f"must be at most {MAX_S} s")
    return value


def _table(table: object, where: str, name: str, keys: set[str]) -> Mapping[str, object]:
    if not isinstance(table, Mapping):
        raise InvalidInput(f"{where}: {name}", "must be a table")
    extra = sorted(str(k) for k in set(table) - keys)
    if extra:
        raise InvalidInput(f"{where}: {name}.{extra[0]}", "unknown key")
    return table


def parse_idle_acts(table: object, where: str) -> IdleActs:
    """`action`, `notice_s` and `when` of pool.toml's `[idle]` (DESIGN.md §7). The caller
    strips §2.7's `window_us` and `threshold_uw`; any other key is refused, naming
    `where` and the field."""
    t = _table(table, where, "idle", {"action", "notice_s", "when"})
    return IdleActs(
        _choice(t, "action", IDLE_ACTIONS, f"{where}: idle.action"),
        _seconds(t, "notice_s", 300, f"{where}: idle.notice_s"),
        _choice(t, "when", IDLE_WHEN, f"{where}: idle.when"),
    )


def parse_preemption(table: object, where: str) -> PreemptionPolicy:
    """pool.toml's `[preemption]` (DESIGN.md §7): strict keys, integer seconds of at most
    7 days, refusals naming `where` and the field."""
    t = _table(table, where, "preemption", {"action", "after_s", "notice_s", "cooldown_s"})
    return PreemptionPolicy(
        _choice(t, "action", PREEMPTION_ACTIONS, f"{where}: preemption.action"),
        _seconds(t, "after_s", 600, f"{where}: preemption.after_s"),
        _seconds(t, "notice_s", 300, f"{where}: preemption.notice_s"),
        _seconds(t, "cooldown_s", 3600, f"{where}: preemption.cooldown_s"),
    )


def _after_notice(notice_s: int, state: RuleState, now_ms: int) -> bool:
    """Whether the outstanding notice was given at least `notice_s` ago, exactly."""
    return state.notice_at_ms is not None and now_ms - state.notice_at_ms >= notice_s * 1000


def idle_due(
    policy: IdleActs,
    configured: bool,
    verdict: str,
    reason: str | None,
    contended: bool,
    state: RuleState,
    now_ms: int,
) -> Due:
    """The act `[idle]` makes due now for one running claim (DESIGN.md §7, standard §2.7).

    `configured`: whether the §2.7 policy states a window and a threshold; `verdict` and
    `reason`: the live projection's §2.7 verdict. In order: unconfigured, nothing (§2.7);
    after the final act, nothing; not idle, the outstanding notice is `withheld` (which
    clears it, so a job idling again is told afresh); idle but `when = contended` and no
    claim waits, `withheld` `not_contended`; `report` once; else `notice`, then the
    action once `notice_s` has passed since the notice."""
    check_figure(now_ms, "now_ms")
    if verdict not in VERDICTS:
        raise InvalidInput("verdict", f"must be one of {', '.join(VERDICTS)}")
    if not configured or policy.action in state.done:
        return Due(None, None)
    if verdict != "idle":
        if state.notice_at_ms is not None:
            return Due("withheld", reason or verdict)
        return Due(None, None)
    if policy.when == "contended" and not contended:
        return Due("withheld", "not_contended")
    if policy.action == "report":
        return Due("report", "idle")
    if state.notice_at_ms is None:
        return Due("notice", "idle")
    if _after_notice(policy.notice_s, state, now_ms):
        return Due(policy.action, "idle_after_notice")
    return Due(None, None)


class Waiting(NamedTuple):
    """A pool-admitted claim pending in Slurm for resources, from a fresh report.

    Named tuples, not dataclasses: a pass builds one per claim, thousands of them."""

    claim: str
    entitlement: str
    priority: int
    partition: str | None
    gpus: int
    since_ms: int
    requeued_at_ms: int | None = None


class Running(NamedTuple):
    """A running claim as preemption sees it: `spent_uj` is a fresh measured figure or
    None, `units` its completed units or None (§5.1)."""

    claim: str
    entitlement: str
    priority: int
    partition: str | None
    gpus: int
    spent_uj: int | None = None
    units: int | None = None
    requeueable: bool = True
    requeued_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Victim:
    """A running claim to requeue, and the waiting claim it makes room for."""

    claim: str
    for_claim: str


def _check_claims(waiting: Sequence[Waiting], running: Sequence[Running]) -> None:
    """Refuse a claim key given twice, in either list or across both: a claim is one job,
    waiting or running, and a duplicate would be counted (or taken) twice."""
    seen: set[str] = set()
    for claim in [w.claim for w in waiting] + [r.claim for r in running]:
        check_text(claim, "claim")
        if claim in seen:
            raise InvalidInput("claim", f"claim {claim!r} appears twice")
        seen.add(claim)


def _cooling(requeued_at_ms: int | None, policy: PreemptionPolicy, now_ms: int) -> bool:
    """Whether a claim was requeued (by any rule) less than `cooldown_s` ago."""
    return requeued_at_ms is not None and now_ms - requeued_at_ms < policy.cooldown_s * 1000


def _waiters(policy: PreemptionPolicy, waiting: Sequence[Waiting], now_ms: int) -> list[Waiting]:
    """The waiters that may preempt, highest priority first, then longest waiting, then
    claim. A waiter below `after_s` is not yet owed anything (it may start by itself); one
    requeued within `cooldown_s` does not preempt, or two jobs could requeue each other in
    turn (the flap guard)."""
    due = [
        w
        for w in waiting
        if now_ms - w.since_ms >= policy.after_s * 1000
        and not _cooling(w.requeued_at_ms, policy, now_ms)
    ]
    due.sort(key=lambda w: (-w.priority, w.since_ms, w.claim))
    return due


def _candidates(policy: PreemptionPolicy, running: Sequence[Running], now_ms: int) -> list[Running]:
    """The running claims that may be requeued at all, in the §5.2 order. Not: one with no
    partition (it cannot be shown to free a waiter's GPUs), one holding no GPUs (requeuing
    it frees nothing), one Slurm would not requeue (the act would kill it), one requeued
    within `cooldown_s` (it would be requeued again on every pass)."""
    eligible = {
        r.claim: r
        for r in running
        if r.partition is not None
        and r.gpus > 0
        and r.requeueable
        and not _cooling(r.requeued_at_ms, policy, now_ms)
    }
    # §5.1: no fresh measured figure or no completed unit is an undefined cost, ranked by
    # priority after every defined one (§5.2), never as though it were known.
    order = order_of(
        (r.claim, r.spent_uj or 0, 0 if r.spent_uj is None else r.units or 0, r.priority)
        for r in eligible.values()
    )
    return [eligible[key] for key in order]


class _Partition:
    """One partition's candidates in §5.2 order, as a linked list a waiter takes from.

    Waiters come highest priority first, so a candidate too high for one waiter is too
    high for every later one and leaves the list for good; every candidate a walk touches
    is taken. Each candidate is so visited once: O(n log n) in all, with the sorts."""

    def __init__(self, order: list[Running]) -> None:
        self.order = order
        self.next = list(range(1, len(order) + 1))
        self.prev = list(range(-1, len(order) - 1))
        self.head = 0 if order else len(order)
        self.by_priority = sorted(range(len(order)), key=lambda i: -order[i].priority)
        self.dropped = 0
        self.free = sum(r.gpus for r in order)

    def _remove(self, i: int) -> None:
        n, p = self.next[i], self.prev[i]
        if p >= 0:
            self.next[p] = n
        else:
            self.head = n
        if n < len(self.order):
            self.prev[n] = p
        self.next[i] = -1  # gone
        self.free -= self.order[i].gpus

    def take(self, priority: int, need: int) -> list[str] | None:
        """The claims taken for a waiter of `priority` needing `need` GPUs, in order;
        None where all candidates of lower priority together fall short: nobody is
        requeued for a waiter who still could not start."""
        while self.dropped < len(self.by_priority):
            i = self.by_priority[self.dropped]
            if self.order[i].priority < priority:
                break
            self.dropped += 1
            if self.next[i] != -1:
                self._remove(i)
        if self.free < need:
            return None
        taken: list[str] = []
        got = 0
        while got < need:
            i = self.head
            got += self.order[i].gpus
            taken.append(self.order[i].claim)
            self._remove(i)
        return taken


def victims(
    policy: PreemptionPolicy,
    waiting: Sequence[Waiting],
    running: Sequence[Running],
    now_ms: int,
) -> tuple[list[Victim], list[str]]:
    """The running claims to requeue for the waiting ones, and the waiters left uncovered
    (DESIGN.md §7, standard §5.2).

    For each waiter (`_waiters`' order), candidates in its partition (a None partition
    matches none, not even another None: an unknown partition is no evidence the GPUs
    are interchangeable) of strictly lower priority (equal priority is a peer, not a
    victim), not taken for an earlier waiter (one job frees its GPUs once), taken in the
    §5.2 order until their GPUs cover the waiter's; if they cannot, nobody is taken for
    it and it is `uncovered`."""
    check_figure(now_ms, "now_ms")
    _check_claims(waiting, running)
    partitions: dict[str, list[Running]] = {}
    for r in _candidates(policy, running, now_ms):
        assert r.partition is not None
        partitions.setdefault(r.partition, []).append(r)
    lists = {name: _Partition(order) for name, order in partitions.items()}
    out: list[Victim] = []
    uncovered: list[str] = []
    for w in _waiters(policy, waiting, now_ms):
        if w.gpus == 0:
            continue
        part = lists.get(w.partition) if w.partition is not None else None
        taken = None if part is None else part.take(w.priority, w.gpus)
        if taken is None:
            uncovered.append(w.claim)
        else:
            out.extend(Victim(claim, w.claim) for claim in taken)
    return out, uncovered


def preemption_due(
    policy: PreemptionPolicy,
    is_victim: bool,
    for_claim: str | None,
    state: RuleState,
    now_ms: int,
) -> Due:
    """The act `[preemption]` makes due now for one running claim (DESIGN.md §7, §5.2).

    A victim (`for_claim` the waiter it makes room for) under `report` is reported once,
    with no notice; under `requeue` it is told (`notice`), then requeued once `notice_s`
    has passed and it is still a victim. A claim with an outstanding notice that is no
    longer a victim gets `withheld` `no_longer_needed`, which clears the notice."""
    check_figure(now_ms, "now_ms")
    if is_victim != (for_claim is not None):
        raise InvalidInput("for", "a victim names the claim it is preempted for, and only a victim")
    if policy.action in state.done:
        return Due(None, None)
    if not is_victim:
        if state.notice_at_ms is not None:
            return Due("withheld", "no_longer_needed")
        return Due(None, None)
    if policy.action == "report":
        return Due("report", "preempted_for")
    if state.notice_at_ms is None:
        return Due("notice", "preempted_for")
    if _after_notice(policy.notice_s, state, now_ms):
        return Due("requeue", "preempted_for")
    return Due(None, None)


IDLE_ACT_KEYS = frozenset({"action", "notice_s", "when"})
"""The keys of `[idle]` that say what an idle verdict does (the rest are §2.7's)."""
DEFAULT_IDLE_ACTS = IdleActs()
DEFAULT_PREEMPTION = PreemptionPolicy()
