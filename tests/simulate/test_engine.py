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
from joulepool.simulate.engine import replay_trace
from joulepool.simulate.errors import SimulationConfigError
from joulepool.simulate.policy import ROOT, Policy
from joulepool.simulate.summary import summarise
from joulepool.tree import Entitlement, Tree
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


@pytest.mark.parametrize("eager", [False, True])
def test_releases_then_queued_claims_then_arrivals(eager: bool) -> None:
    run = replay_trace(JOBS, POLICY, eager_retry=eager)
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
    assert by_id["A:3"].queue_reasons == {QueueReason.devices_held}
    assert by_id["A:4"].last_queue_reason is QueueReason.guarantee_exhausted_may_not_borrow
    assert by_id["A:4"].guess_refused_borrowing
    assert by_id["A:5"].borrowed_uj == 20
    assert by_id["A:6"].deny_reason is DenyReason.unobserved_cannot_borrow
    assert by_id["A:6"].guess_refused_borrowing
    assert by_id["A:2"].wait_us == 10
    assert by_id["A:4"].wait_us is None
    # GPUs busy after each instant's events: b1 holds 1 throughout.
    assert run.busy == [(0, 3), (10, 2), (15, 3), (20, 2), (25, 1), (100, 0)]


def test_the_summary_states_what_the_ledger_replays_to() -> None:
    run = replay_trace(JOBS, POLICY)
    summary = summarise(run)
    a, b = summary.tenant("A"), summary.tenant("B")
    assert (a.spent_uj, a.borrowed_uj, b.spent_uj, b.borrowed_uj) == (120, 20, 10, 0)
    assert (a.admitted_at_once, a.admitted_after_queue) == (2, 2)
    assert a.still_queued == {"guarantee_exhausted_may_not_borrow": 1}
    assert a.denied == {"unobserved_cannot_borrow": 1}
    assert a.guesses_refused_borrowing == 2
    # Waits 0, 10, 5, 0: nearest-rank median the 2nd of 4, p95 the 4th.
    assert (a.wait_median_us, a.wait_p95_us) == (0, 10)
    # 5 admissions and 5 releases, at simulated milliseconds (µs // 1000 = 0 here).
    assert summary.ledger_entries == 10
    replayed = replay(run.pool.entries(), run.pool.key.kid, run.pool.key.public_key, POLICY.tree)
    assert replayed.state.usage.spent_uj("A") == 120
    assert replayed.head.hex() == summary.ledger_head


def test_the_same_replay_writes_the_same_ledger() -> None:
    first = summarise(replay_trace(JOBS, POLICY)).ledger_head
    assert summarise(replay_trace(JOBS, POLICY)).ledger_head == first


def test_jobs_out_of_arrival_order_are_refused() -> None:
    with pytest.raises(SimulationConfigError, match="arrival order"):
        replay_trace([JOBS[3], JOBS[0]], POLICY)
