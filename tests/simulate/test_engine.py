"""The event loop on a tiny hand-written trace whose outcome is worked out by hand.

VCs A and B, each 2 GPUs and 100 µJ, weight 1 (W = 2), under one root.

    t=0   a1 A 2 GPU 40 Est  → admit (A: 40 µJ, 2 GPUs)
    t=0   a2 A 1 GPU 30 Est  → queue devices_held
    t=0   b1 B 1 GPU 10 Est  → admit
    t=10  a1 ends; a2 retried before the arrival at t=10 → admit (A: 70 µJ, 1 GPU)
    t=10  a3 A 2 GPU 20 Est  arrives → queue devices_held (1 GPU free)
    t=15  a2 ends; a3 retried → admit (A: 90 µJ, 2 GPUs)
    t=20  a3 ends; then arrivals:
          a4 A 1 GPU 20 Est   → 110 > 100, a guess may not borrow → queue, forever
          a5 A 1 GPU 30 Model → borrows 20 of B's 90 unspent (share 45) → admit
          a6 A 1 GPU 150 Est  → more than A's whole guarantee, a guess → deny
"""

from __future__ import annotations

import pytest

from joulepool.admission import DenyReason, QueueReason
from joulepool.grade import Grade
from joulepool.ledger.replay import replay
from joulepool.tree import Entitlement, Tree
from joulepool_sim.engine import GUESS, PoolAdmission, Run, replay_trace
from joulepool_sim.errors import SimulationConfigError
from joulepool_sim.estimates import SimJob
from joulepool_sim.policy import ROOT, Policy, device_limits
from joulepool_sim.summary import Percentile, summarise
from tests.simulate.helpers import job

E, M = Grade.Estimator, Grade.ModelBased
JOBS = [
    job("A", 1, 0, 2, 40, E, 10),
    job("A", 2, 0, 1, 30, E, 5),
    job("B", 1, 0, 1, 10, E, 100),
    job("A", 3, 10, 2, 20, E, 5),
    job("A", 4, 20, 1, 20, E, 5),
    job("A", 5, 20, 1, 30, M, 5),
    job("A", 6, 20, 1, 150, E, 5),
]
POLICY = Policy(
    "hand",
    "hand-written",
    Tree(
        [
            Entitlement(ROOT, 200, 4, 0),
            Entitlement("A", 100, 2, 1, parent=ROOT),
            Entitlement("B", 100, 2, 1, parent=ROOT),
        ]
    ),
)


LIMITS = device_limits(POLICY.tree)


def _run(jobs: list[SimJob] = JOBS, *, eager: bool = False) -> Run:
    return replay_trace(
        jobs, PoolAdmission(jobs, POLICY.tree, GUESS), LIMITS, horizon_us=1_000, eager_retry=eager
    )


@pytest.mark.parametrize("eager", [False, True])
def test_releases_then_queued_claims_then_arrivals(eager: bool) -> None:
    run = _run(eager=eager)
    by_id = {o.job.job.id: o for o in run.outcomes}
    assert {i: o.start_us for i, o in by_id.items()} == {
        "A:1": 0,
        "A:2": 10,
        "B:1": 0,
        "A:3": 15,
        "A:4": None,
        "A:5": 20,
        "A:6": None,
    }
    assert by_id["A:2"].first == "queue"
    assert by_id["A:3"].queue_reasons == {QueueReason.devices_held.value}
    assert by_id["A:4"].last_queue_reason == QueueReason.guarantee_exhausted_may_not_borrow
    assert by_id["A:4"].guess_refused_borrowing
    assert by_id["A:5"].borrowed_uj == 20
    assert by_id["A:6"].deny_reason == DenyReason.unobserved_cannot_borrow
    assert by_id["A:6"].guess_refused_borrowing
    assert by_id["A:2"].wait_us == 10
    assert by_id["A:4"].wait_us is None
    # GPUs busy after each instant's events: b1 holds 1 throughout.
    assert run.busy == [(0, 3), (10, 2), (15, 3), (20, 2), (25, 1), (100, 0)]


def test_the_summary_states_what_the_ledger_replays_to() -> None:
    run = _run()
    guarantees = {"A": 100, "B": 100}
    summary = summarise(run, "hand", "hand-written", guarantees, {"A": 1, "B": 1}, 200, 4)
    assert summary.spent_by_team == {"A": 120, "B": 10}
    assert (summary.borrowed_uj, summary.borrowed_on_guess_uj) == (20, 20)
    assert (summary.started, summary.denied, summary.censored) == (5, 1, 1)
    # A spent 20 past its guarantee; B's 90 unspent give A a weighted share of 45.
    assert (summary.beyond_guarantee_uj, summary.overrun_uj) == (20, 0)
    # Waits 0, 0, 0, 5, 10 and two censored at the horizon (1,000 - 20): the median, the
    # 4th of 7, is 5, exact; the p95 is a censored wait, so a lower bound.
    assert summary.wait_all_median == Percentile(5, False)
    assert summary.wait_all_p95 is not None and summary.wait_all_p95.at_least
    assert summary.ledger_entries == 10
    adm = run.admission
    assert isinstance(adm, PoolAdmission)
    replayed = replay(adm.pool.entries(), adm.pool.key.kid, adm.pool.key.public_key, POLICY.tree)
    assert replayed.state.usage.spent_uj("A") == 120
    assert replayed.head.hex() == summary.ledger_head


def test_the_same_replay_writes_the_same_ledger() -> None:
    def head() -> bytes:
        adm = _run().admission
        assert isinstance(adm, PoolAdmission)
        return adm.pool.head

    assert head() == head()


def test_jobs_out_of_arrival_order_are_refused() -> None:
    with pytest.raises(SimulationConfigError, match="arrival order"):
        _run([JOBS[3], JOBS[0]])


def test_the_overrun_per_team_sums_to_the_clusters() -> None:
    run = _run([*JOBS[:4], job("A", 7, 20, 1, 10, M, 5, actual_uj=190)])
    guarantees = {"A": 100, "B": 100}
    summary = summarise(run, "hand", "hand-written", guarantees, {"A": 1, "B": 1}, 200, 4)
    # A: 40 + 30 + 20 + 190 (it reserved 10, drew 190) = 280; B spent 10, so A's share of
    # B's 90 unspent is 45: 280 - 100 - 45 = 135 past guarantee plus share.
    assert summary.spent_by_team == {"A": 280, "B": 10}
    assert summary.overrun_by_team == {"A": 135, "B": 0}
    assert summary.overrun_uj == 135
