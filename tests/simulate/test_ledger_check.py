"""The simulator's bookkeeping checked against the ledger, on a slice of the real trace.

After a run the ledger replays (signatures, chain and all) to exactly the per-team, per-week
energy the summary states; walking it entry by entry, no guess ever borrows under pool/1
(§4.4) while the grade-blind quota lends on guesses; classes earn estimates from measured
releases and claims borrow on them (§2.6); and the lazy retry gives the eager replay.
"""

from __future__ import annotations

import pytest

from joulepool.events import Admitted, Released
from joulepool.grade import Grade
from joulepool.ledger.replay import Replayer
from joulepool_sim.engine import (
    EARNED,
    GUESS,
    GpuTimeAdmission,
    PoolAdmission,
    Run,
    replay_trace,
)
from joulepool_sim.evaluation import Settings, Trace, load_trace
from joulepool_sim.gpu_hours import GpuTimeQuota
from joulepool_sim.policy import device_limits, gpu_time_budgets, pool1_policy
from joulepool_sim.summary import summarise
from tests.simulate.helpers import SHARED_TRACES

SETTINGS = Settings(data_dir=SHARED_TRACES, seeds=(0,), first_jobs=500, sample=4)
BUDGET_UJ = 4 * 10**15


@pytest.fixture(scope="module")
def trace() -> Trace:
    return load_trace(SETTINGS, 0)


def _run(trace: Trace, mode: str, *, eager: bool = False) -> Run:
    tree = pool1_policy(trace.sizes, SETTINGS.gpus, BUDGET_UJ).tree
    limits = device_limits(tree)
    if mode == "gpu":
        budgets = gpu_time_budgets(trace.sizes, BUDGET_UJ * trace.gpu_us // trace.demand_uj)
        adm: PoolAdmission | GpuTimeAdmission = GpuTimeAdmission(
            trace.jobs, GpuTimeQuota(limits, budgets), SETTINGS.schedule
        )
    else:
        adm = PoolAdmission(trace.jobs, tree, mode, SETTINGS.schedule)
    return replay_trace(trace.jobs, adm, limits, horizon_us=trace.horizon_us, eager_retry=eager)


@pytest.fixture(scope="module")
def pool1(trace: Trace) -> Run:
    return _run(trace, EARNED)


def _entries(run: Run) -> tuple[Replayer, list[Admitted | Released]]:
    adm = run.admission
    assert isinstance(adm, PoolAdmission)
    replayer = Replayer(adm.pool.key.kid, adm.pool.key.public_key, adm.pool.tree, adm.schedule)
    events = []
    for raw in adm.pool.entries():
        event = replayer.feed(raw)
        assert isinstance(event, Admitted | Released)
        events.append(event)
    return replayer, events


def test_the_summary_states_the_ledgers_weekly_usage(trace: Trace, pool1: Run) -> None:
    shares = pool1_policy(trace.sizes, SETTINGS.gpus, BUDGET_UJ).tree
    guarantees = {vc: shares[vc].guarantee_uj for vc in trace.sizes}
    summary = summarise(pool1, "pool1", "pool/1", guarantees, trace.sizes, BUDGET_UJ, 176)
    replayer, _ = _entries(pool1)
    by_week = {
        p.index: sum(
            f.committed_uj
            for vc in trace.sizes
            for f in replayer.state.periods_of(vc)
            if f.period.index == p.index
        )
        for p in summary.periods
    }
    assert [p.spent_uj for p in summary.periods] == list(by_week.values())
    assert sum(by_week.values()) == summary.spent_uj
    # Every started job ran to its end and was charged its measured actual.
    charged = sum(o.job.actual.uj for o in pool1.outcomes if o.started)
    assert charged == summary.spent_uj
    assert replayer.state.open_claims() == []
    assert summary.ledger_head == replayer.head.hex()
    assert len(summary.periods) > 6  # weeks renew: more than one period is replayed


def test_pool1_never_lends_on_a_guess_and_borrows_on_earned_estimates(pool1: Run) -> None:
    _, events = _entries(pool1)
    borrowed_on_model = 0
    for event in events:
        if isinstance(event, Admitted) and event.borrowed_uj:
            assert event.reserved.grade is Grade.ModelBased
            borrowed_on_model += event.borrowed_uj
        if isinstance(event, Released):
            assert event.actual.grade in (Grade.HwShunt, Grade.ModelBased)
    # The slice is cut so that guesses are refused and earned estimates do borrow.
    assert borrowed_on_model > 0
    assert any(o.guess_refused_borrowing for o in pool1.outcomes)
    assert any(o.source == EARNED and o.borrowed_uj for o in pool1.outcomes)


def test_the_grade_blind_quota_lends_on_guesses(trace: Trace) -> None:
    run = _run(trace, "blind")
    lent_on_guesses = sum(o.borrowed_uj for o in run.outcomes if o.source == GUESS)
    assert lent_on_guesses > 0


@pytest.mark.parametrize("mode", ["gpu", GUESS, "blind", EARNED])
def test_retrying_only_what_can_change_gives_the_eager_replay(trace: Trace, mode: str) -> None:
    lazy = _run(trace, mode)
    eager = _run(trace, mode, eager=True)
    assert [o.start_us for o in lazy.outcomes] == [o.start_us for o in eager.outcomes]
    assert [o.deny_reason for o in lazy.outcomes] == [o.deny_reason for o in eager.outcomes]
    assert eager.submissions > lazy.submissions
    if mode != "gpu":
        assert isinstance(lazy.admission, PoolAdmission)
        assert isinstance(eager.admission, PoolAdmission)
        assert lazy.admission.pool.head == eager.admission.pool.head
