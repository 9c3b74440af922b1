"""The simulator's bookkeeping checked against the ledger, on a slice of the real trace.

After a run the ledger replays (signatures, chain and all) to exactly the per-VC usage the
summary states, which is also what the simulator's own per-job records add up to; and,
walking the ledger entry by entry, no VC is ever past a guarantee without borrowing.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from joulepool.events import Admitted, Released
from joulepool.ledger.replay import Replayer
from joulepool.simulate.energy import ModelledJob
from joulepool.simulate.engine import Run, replay_trace
from joulepool.simulate.evaluation import Settings, evaluate
from joulepool.simulate.policy import device_only_policy, pool1_policy
from joulepool.simulate.report import evaluation_json, gj, render
from joulepool.simulate.summary import summarise
from tests.simulate.helpers import SHARED_TRACES

SLICE = 1_200
GPUS = 96
BUDGET_UJ = 15 * 10**15


@pytest.fixture(scope="module")
def sliced() -> tuple[list[ModelledJob], dict[str, int]]:
    evaluation = evaluate(Settings(data_dir=SHARED_TRACES, first_jobs=SLICE, gpus=GPUS))
    return evaluation.jobs, evaluation.sizes


@pytest.fixture(scope="module")
def runs(sliced: tuple[list[ModelledJob], dict[str, int]]) -> list[Run]:
    jobs, sizes = sliced
    demand = sum(j.energy.uj for j in jobs)
    return [
        replay_trace(jobs, pool1_policy(sizes, GPUS, BUDGET_UJ)),
        replay_trace(jobs, device_only_policy(sizes, GPUS, demand)),
    ]


def test_the_ledger_replays_to_the_usage_the_summary_states(runs: list[Run]) -> None:
    for run in runs:
        summary = summarise(run)
        replayer = Replayer(run.pool.key.kid, run.pool.key.public_key, run.policy.tree)
        for raw in run.pool.entries():
            replayer.feed(raw)
        usage = replayer.state.usage
        for vc in run.policy.vcs():
            ent = run.policy.tree[vc]
            stated = summary.tenant(vc)
            assert stated.spent_uj == usage.spent_uj(vc)
            assert stated.borrowed_uj == usage.of(vc).borrowed_uj(ent.guarantee_uj)
            # The simulator's own records: every started job charged its figure once.
            charged = sum(
                o.job.energy.uj for o in run.outcomes if o.started and o.job.job.tenant == vc
            )
            assert charged == usage.spent_uj(vc)
            assert usage.held_devices(vc) == 0
        assert replayer.state.open_claims() == []
        assert summary.ledger_head == replayer.head.hex()


def test_no_vc_is_ever_past_a_guarantee_without_borrowing(runs: list[Run]) -> None:
    pool1 = runs[0]
    tree = pool1.policy.tree
    spent: dict[str, int] = defaultdict(int)
    held: dict[str, int] = defaultdict(int)
    open_claims: dict[str, Admitted] = {}
    borrowed_any = False
    replayer = Replayer(pool1.pool.key.kid, pool1.pool.key.public_key, tree)
    for raw in pool1.pool.entries():
        event = replayer.feed(raw)
        if isinstance(event, Admitted):
            vc = event.entitlement
            g = tree[vc].guarantee_uj
            before = spent[vc]
            spent[vc] += event.reserved.uj
            held[vc] += event.devices
            open_claims[event.claim] = event
            assert held[vc] <= tree[vc].guarantee_devices
            assert event.borrowed_uj == max(0, spent[vc] - g) - max(0, before - g)
            if event.borrowed_uj:
                borrowed_any = True
                assert event.reserved.grade.observed
        else:
            assert isinstance(event, Released)
            adm = open_claims.pop(event.claim)
            spent[adm.entitlement] += event.actual.uj - adm.reserved.uj
            held[adm.entitlement] -= adm.devices
    # The slice is cut so that energy binds and someone borrows: the check has teeth.
    assert borrowed_any
    assert any(spent[vc] > tree[vc].guarantee_uj for vc in pool1.policy.vcs())


def test_retrying_only_what_can_change_gives_the_eager_replay(
    sliced: tuple[list[ModelledJob], dict[str, int]], runs: list[Run]
) -> None:
    jobs, sizes = sliced
    eager = replay_trace(jobs, pool1_policy(sizes, GPUS, BUDGET_UJ), eager_retry=True)
    lazy = runs[0]
    assert [o.start_us for o in eager.outcomes] == [o.start_us for o in lazy.outcomes]
    assert [o.last_queue_reason for o in eager.outcomes if not o.started] == [
        o.last_queue_reason for o in lazy.outcomes if not o.started
    ]
    assert summarise(eager).ledger_head == summarise(lazy).ledger_head
    assert eager.submissions > lazy.submissions


def test_the_report_states_the_ledger_figures(runs: list[Run]) -> None:
    evaluation = evaluate(
        Settings(data_dir=SHARED_TRACES, first_jobs=SLICE, gpus=GPUS, budget_uj=BUDGET_UJ)
    )
    pool1 = evaluation.policy("pool1")
    # The same jobs and tree give the same ledger, byte for byte: the same head.
    run = runs[0]
    replayer = Replayer(run.pool.key.kid, run.pool.key.public_key, run.policy.tree)
    for raw in run.pool.entries():
        replayer.feed(raw)
    assert pool1.ledger_head == replayer.head.hex()
    usage = replayer.state.usage
    figures = evaluation_json(evaluation)["policies"]
    assert isinstance(figures, dict)
    assert [t["spent_uj"] for t in figures["pool1"]["tenants"]] == [
        usage.spent_uj(vc) for vc in run.policy.vcs()
    ]
    text = render(evaluation, evaluation.settings.data_dir)
    for vc in run.policy.vcs():
        g = run.policy.tree[vc].guarantee_uj
        assert f"| `{vc}` | {gj(g)} | {gj(usage.spent_uj(vc))} |" in text
    assert "`ModelBased`" in text and "`Estimator`" in text
