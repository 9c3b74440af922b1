"""Acting on evidence (DESIGN.md §7): `[idle]` acts on a §2.7 idle verdict, `[preemption]`
requeues running claims for a waiting one in the §5.2 order; pure and integer-only."""

from __future__ import annotations

import random
import tomllib
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from joulepool.acts import Due
from joulepool.errors import InvalidInput
from joulepool.preemption import Workload, preemption_order
from joulepool.reclaim import (
    IdleActs,
    PreemptionPolicy,
    RuleState,
    Running,
    Victim,
    Waiting,
    idle_due,
    parse_idle_acts,
    parse_preemption,
    preemption_due,
    victims,
)

NOW = 10_000_000
REQUEUE = IdleActs("requeue", 60, "always")
NOTICED = RuleState(frozenset({"notice"}), 1_000_000, None)
NOTHING = Due(None, None)
FRESH = RuleState()


# ------------------------------------------------------------------ policies


def test_reclaim_idle_acts_defaults_report_always() -> None:
    assert parse_idle_acts({}, "pool.toml") == IdleActs("report", 300, "always")


def test_reclaim_idle_acts_read_from_toml() -> None:
    table = tomllib.loads('action = "cancel"\nnotice_s = 600\nwhen = "contended"\n')
    assert parse_idle_acts(table, "pool.toml") == IdleActs("cancel", 600, "contended")


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({"action": "signal"}, "pool.toml: idle.action"),
        ({"action": 1}, "pool.toml: idle.action"),
        ({"when": "never"}, "pool.toml: idle.when"),
        ({"notice_s": 604_801}, "pool.toml: idle.notice_s"),
        ({"notice_s": True}, "pool.toml: idle.notice_s"),
        ({"notice_s": 1.0}, "pool.toml: idle.notice_s"),
        ({"notice_s": -1}, "pool.toml: idle.notice_s"),
        ({"window_us": 1}, "pool.toml: idle.window_us"),
        ({"grace_s": 1}, "pool.toml: idle.grace_s"),
    ],
)
def test_reclaim_idle_acts_refused_naming_the_field(table: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        parse_idle_acts(table, "pool.toml")
    assert exc.value.field == field


def test_reclaim_idle_acts_not_a_table() -> None:
    with pytest.raises(InvalidInput, match="idle"):
        parse_idle_acts([], "pool.toml")


def test_reclaim_preemption_defaults_and_limits() -> None:
    assert parse_preemption({}, "p") == PreemptionPolicy("report", 600, 300, 3600)
    week = 7 * 86_400
    table = {"action": "requeue", "after_s": week, "notice_s": 0, "cooldown_s": week}
    assert parse_preemption(table, "p") == PreemptionPolicy("requeue", week, 0, week)


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({"action": "cancel"}, "p: preemption.action"),
        ({"after_s": 604_801}, "p: preemption.after_s"),
        ({"notice_s": False}, "p: preemption.notice_s"),
        ({"cooldown_s": 0.5}, "p: preemption.cooldown_s"),
        ({"cooldown": 1}, "p: preemption.cooldown"),
    ],
)
def test_reclaim_preemption_refused_naming_the_field(table: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        parse_preemption(table, "p")
    assert exc.value.field == field


# ------------------------------------------------------------------ idle_due


def idle(
    policy: IdleActs = REQUEUE,
    verdict: str = "idle",
    reason: str | None = None,
    contended: bool = True,
    state: RuleState = FRESH,
    now_ms: int = NOW,
    configured: bool = True,
) -> Due:
    return idle_due(policy, configured, verdict, reason, contended, state, now_ms)


def test_reclaim_idle_unconfigured_does_nothing_whatever_the_action() -> None:
    for action in ("report", "requeue", "cancel"):
        policy = IdleActs(action, 0, "always")
        assert idle(policy, configured=False) == NOTHING
        assert idle(policy, "working", configured=False, state=NOTICED) == NOTHING


def test_reclaim_idle_not_idle_withholds_an_outstanding_notice_with_its_reason() -> None:
    assert idle(verdict="working", state=NOTICED) == Due("withheld", "working")
    assert idle(verdict="working", reason="progress", state=NOTICED) == Due("withheld", "progress")
    assert idle(verdict="no_verdict", reason="stale", state=NOTICED) == Due("withheld", "stale")
    assert idle(verdict="nothing_held", state=NOTICED) == Due("withheld", "nothing_held")
    assert idle(verdict="working") == NOTHING
    assert idle(verdict="no_verdict", reason="no_reading") == NOTHING


def test_reclaim_idle_contended_only_when_asked() -> None:
    contended = IdleActs("requeue", 60, "contended")
    assert idle(contended, contended=False) == Due("withheld", "not_contended")
    assert idle(contended, contended=True) == Due("notice", "idle")
    assert idle(REQUEUE, contended=False) == Due("notice", "idle")


def test_reclaim_idle_report_once_and_never_a_notice() -> None:
    report = IdleActs()
    assert idle(report) == Due("report", "idle")
    assert idle(report, state=RuleState(frozenset({"report"}))) == NOTHING


def test_reclaim_idle_notice_then_act_at_the_exact_millisecond() -> None:
    assert idle() == Due("notice", "idle")
    assert idle(state=NOTICED, now_ms=1_059_999) == NOTHING
    assert idle(state=NOTICED, now_ms=1_060_000) == Due("requeue", "idle_after_notice")
    cancel = IdleActs("cancel", 60, "always")
    assert idle(cancel, state=NOTICED, now_ms=1_060_001) == Due("cancel", "idle_after_notice")
    assert idle(state=NOTICED, now_ms=999_999) == NOTHING  # a clock behind the notice


def test_reclaim_idle_after_the_final_act_nothing() -> None:
    done = RuleState(frozenset({"notice", "requeue"}), 0, None)
    assert idle(state=done, now_ms=10**12) == NOTHING
    assert idle(verdict="working", state=done) == NOTHING


def test_reclaim_idle_a_cleared_notice_is_given_afresh() -> None:
    cleared = RuleState(frozenset({"notice", "withheld"}), None, None)
    assert idle(state=cleared) == Due("notice", "idle")


def test_reclaim_idle_refuses_unknown_verdicts_and_bad_now() -> None:
    with pytest.raises(InvalidInput):
        idle(verdict="busy")
    with pytest.raises(InvalidInput):
        idle(now_ms=-1)


# ------------------------------------------------------------------ preemption_due

PREEMPT = PreemptionPolicy("requeue", 600, 60, 3600)


def test_reclaim_preemption_due_notice_then_requeue() -> None:
    assert preemption_due(PREEMPT, True, "w", RuleState(), NOW) == Due("notice", "preempted_for")
    assert preemption_due(PREEMPT, True, "w", NOTICED, 1_059_999) == NOTHING
    assert preemption_due(PREEMPT, True, "w", NOTICED, 1_060_000) == Due("requeue", "preempted_for")
    requeued = RuleState(frozenset({"notice", "requeue"}), 0, None)
    assert preemption_due(PREEMPT, True, "w", requeued, NOW) == NOTHING


def test_reclaim_preemption_due_no_longer_needed_clears_the_notice() -> None:
    assert preemption_due(PREEMPT, False, None, NOTICED, NOW) == Due("withheld", "no_longer_needed")
    assert preemption_due(PREEMPT, False, None, RuleState(), NOW) == NOTHING


def test_reclaim_preemption_due_report_once_without_notice() -> None:
    report = PreemptionPolicy()
    assert preemption_due(report, True, "w", RuleState(), NOW) == Due("report", "preempted_for")
    once = RuleState(frozenset({"report"}))
    assert preemption_due(report, True, "w", once, NOW) == NOTHING
    assert preemption_due(report, False, None, RuleState(), NOW) == NOTHING


def test_reclaim_preemption_due_a_victim_names_its_waiter() -> None:
    with pytest.raises(InvalidInput):
        preemption_due(PREEMPT, True, None, RuleState(), NOW)
    with pytest.raises(InvalidInput):
        preemption_due(PREEMPT, False, "w", RuleState(), NOW)


# ------------------------------------------------------------------ victims

POLICY = PreemptionPolicy()


def wait(claim: str, priority: int, gpus: int = 1, partition: str | None = "a") -> Waiting:
    return Waiting(claim, "lab", priority, partition, gpus, 0)


def run(
    claim: str,
    priority: int,
    gpus: int = 1,
    spent: int | None = None,
    units: int | None = None,
    partition: str | None = "a",
    **kw: object,
) -> Running:
    return Running(claim, "lab", priority, partition, gpus, spent, units, **kw)  # type: ignore[arg-type]


def test_reclaim_victims_in_the_s5_2_order() -> None:
    running = [run("u", 0), run("cheap", 1, spent=10, units=10), run("dear", 1, spent=90, units=1)]
    assert victims(POLICY, [wait("w", 5, 3)], running, NOW) == (
        [Victim("dear", "w"), Victim("cheap", "w"), Victim("u", "w")],
        [],
    )


def test_reclaim_victims_take_nobody_for_an_uncovered_waiter() -> None:
    assert victims(POLICY, [wait("w", 5, 3)], [run("a", 1), run("b", 1)], NOW) == ([], ["w"])


def test_reclaim_victims_guards() -> None:
    running = [
        run("peer", 5),
        run("other", 1, partition="b"),
        run("unknown", 1, partition=None),
        run("pinned", 1, requeueable=False),
        run("cooling", 1, requeued_at_ms=NOW - 1),
        run("empty", 1, gpus=0),
    ]
    assert victims(POLICY, [wait("w", 5)], running, NOW) == ([], ["w"])


def test_reclaim_victims_waiters_that_may_not_preempt() -> None:
    early = Waiting("early", "lab", 5, "a", 1, NOW - 599_999)
    cooling = Waiting("cooling", "lab", 5, "a", 1, 0, NOW - 3_599_999)
    assert victims(POLICY, [early, cooling], [run("r", 1)], NOW) == ([], [])


def test_reclaim_victims_refuse_a_claim_named_twice() -> None:
    with pytest.raises(InvalidInput):
        victims(POLICY, [wait("x", 5)], [run("x", 1)], NOW)
    with pytest.raises(InvalidInput):
        victims(POLICY, [], [run("x", 1), run("x", 2)], NOW)


# ------------------------------------------------------------------ properties

claims = st.text("abcdef", min_size=1, max_size=4)
partitions = st.sampled_from(["a", "b", None])
figures = st.none() | st.integers(0, 1000)


@st.composite
def scenes(draw: st.DrawFn) -> tuple[list[Waiting], list[Running]]:
    keys = draw(st.lists(claims, unique=True, min_size=0, max_size=14))
    cut = draw(st.integers(0, len(keys)))
    waiting = [
        Waiting(
            k,
            "lab",
            draw(st.integers(0, 4)),
            draw(partitions),
            draw(st.integers(0, 4)),
            draw(st.integers(0, NOW)),
            draw(st.none() | st.integers(0, NOW)),
        )
        for k in keys[:cut]
    ]
    running = [
        Running(
            k,
            "lab",
            draw(st.integers(0, 4)),
            draw(partitions),
            draw(st.integers(0, 4)),
            draw(figures),
            draw(figures),
            draw(st.booleans()),
            draw(st.none() | st.integers(0, NOW)),
        )
        for k in keys[cut:]
    ]
    return waiting, running


@given(scenes(), st.integers(0, 3))
def test_reclaim_victims_properties(scene: tuple[list[Waiting], list[Running]], seed: int) -> None:
    waiting, running = scene
    taken, uncovered = victims(POLICY, waiting, running, NOW)
    by_claim = {r.claim: r for r in running}
    waiter = {w.claim: w for w in waiting}
    assert len({v.claim for v in taken}) == len(taken)  # a victim frees its GPUs once
    for v in taken:
        r, w = by_claim[v.claim], waiter[v.for_claim]
        assert r.priority < w.priority
        assert r.partition is not None and r.partition == w.partition
        assert r.requeueable
    for claim in uncovered:
        assert claim not in {v.for_claim for v in taken}
    for w in waiting:
        got = sum(by_claim[v.claim].gpus for v in taken if v.for_claim == w.claim)
        assert got == 0 or got >= w.gpus  # either the need is covered or nobody is taken
    # Deterministic whatever order the inputs come in.
    shuffle = random.Random(seed)
    w2, r2 = list(waiting), list(running)
    shuffle.shuffle(w2)
    shuffle.shuffle(r2)
    assert victims(POLICY, w2, r2, NOW) == (taken, uncovered)


@given(
    st.lists(
        st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.integers(0, 9)),
        max_size=20,
    )
)
def test_reclaim_preemption_order_integer_key_is_the_exact_order(
    given_: list[tuple[int, int, int]],
) -> None:
    """preemption_order sorts defined costs on an integer key; it is Fraction's order."""
    workloads = [Workload(f"k{i:02d}", s, u, p) for i, (s, u, p) in enumerate(given_)]
    measured = sorted(
        (w for w in workloads if w.completed_units),
        key=lambda w: (-Fraction(w.spent_uj, w.completed_units), w.key),
    )
    unmeasured = sorted(
        (w for w in workloads if not w.completed_units), key=lambda w: (w.priority, w.key)
    )
    assert preemption_order(workloads) == [w.key for w in measured + unmeasured]
