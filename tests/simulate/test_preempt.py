"""Preemption (preempt.py): a high-priority job pending for GPUs takes them after `after_s`,
from the victim `reclaim.victims` names (§5.2 realised cost) or Slurm's youngest run.

4 GPUs; teams H (priority 1) and L (priority 0), each guaranteed all 4 by Pool.
    t=0     L:1  2 GPUs, 10,000 s, 2 J a second (its steps cost twice L:2's)
    t=10 s  L:2  2 GPUs, 10,000 s, 1 J a second, the same steps
    t=20 s  H:1  2 GPUs: admitted by Pool, no GPU free: pending; after_s = 600 s
At t=620 s: L:1 has spent 1,240 J on 62 steps (20 J a step), L:2 610 J on 61 (10 J a step).
"""

from __future__ import annotations

import pytest

from joulepool.grade import Energy, Grade
from joulepool.reclaim import PreemptionPolicy, Running, Waiting, victims
from joulepool.tree import Entitlement, Tree
from joulepool_sim.energy import ModelledJob
from joulepool_sim.engine import GUESS, PoolAdmission, replay_trace
from joulepool_sim.estimates import SimJob, job_class
from joulepool_sim.preempt import Preemption, tiers
from joulepool_sim.summary import summarise
from joulepool_sim.trace import TraceJob

S = 1_000_000
M = Grade.ModelBased
TREE = Tree(
    [
        Entitlement("cluster", 10**13, 8, 0),
        Entitlement("H", 10**12, 4, 1, parent="cluster"),
        Entitlement("L", 10**12, 4, 1, parent="cluster"),
    ]
)


def _job(tenant: str, line: int, at_s: int, uj: int) -> SimJob:
    t = TraceJob(tenant, line, "T (batch size 1)", 1_000, at_s * S, 2)
    m = ModelledJob(t, 10_000 * S, Energy(uj, M), "hand", False)
    return SimJob(m, Energy(uj, M), Energy(uj, M), 10_000 * S, job_class(t))


JOBS = [_job("L", 1, 0, 20_000 * S), _job("L", 2, 10, 10_000 * S), _job("H", 1, 20, 10_000 * S)]


def _replay(order: str) -> dict[str, object]:
    adm = PoolAdmission(JOBS, TREE, GUESS)
    setup = Preemption(4, {"H": 1, "L": 0}, order)
    run = replay_trace(JOBS, adm, {"H": 4, "L": 4}, horizon_us=100_000 * S, preemption=setup)
    s = summarise(run, "p", "p", {"H": 10**12, "L": 10**12}, {"H": 1, "L": 1}, 10**12, 4)
    by_id = {o.job.job.id: o for o in run.outcomes}
    assert run.slurm is not None
    return {
        "H wait": by_id["H:1"].wait_us,
        "ends": {i: o.end_us for i, o in by_id.items()},
        "preempted": {JOBS[i].job.id: n for i, n in run.slurm.preempted.items()},
        "wasted": s.wasted_uj,
        "spent": s.spent_uj,
    }


def test_without_preemption_the_high_tier_waits_for_a_run_to_end() -> None:
    r = _replay("none")
    assert r["H wait"] == 9_980 * S
    assert r["preempted"] == {}
    assert r["wasted"] == 0


def test_realised_cost_takes_the_run_whose_steps_cost_most() -> None:
    r = _replay("realised_cost")
    assert r["H wait"] == 600 * S
    assert r["preempted"] == {"L:1": 1}
    # No checkpoint yet (hourly): L:1's 620 s are redone, 1,240 J drawn again and charged.
    assert r["wasted"] == 1_240 * S
    assert r["spent"] == 40_000 * S + 1_240 * S
    ends = r["ends"]
    assert isinstance(ends, dict)
    # L:1 waits for a GPU pair: L:2 ends at 10,010 s; L:1 reruns all 10,000 s.
    assert ends["L:1"] == 20_010 * S


def test_slurm_takes_the_youngest_run() -> None:
    r = _replay("youngest")
    assert r["H wait"] == 600 * S
    assert r["preempted"] == {"L:2": 1}
    assert r["wasted"] == 610 * S


def test_the_order_is_reclaims() -> None:
    """The victim the replay took is the one `reclaim.victims` names on the same figures."""
    policy = PreemptionPolicy("requeue", 600, 0, 3600)
    waiting = [Waiting("H:1", "H", 1, "gpu", 2, 20_000)]
    running = [
        Running("L:1", "L", 0, "gpu", 2, 1_240 * S, 62),
        Running("L:2", "L", 0, "gpu", 2, 610 * S, 61),
    ]
    picked, uncovered = victims(policy, waiting, running, 620_000)
    assert [v.claim for v in picked] == ["L:1"] and uncovered == []


@pytest.mark.parametrize(
    ("sizes", "high"),
    [({"a": 1, "b": 1, "c": 2, "d": 4}, {"a", "b"}), ({"a": 5, "b": 5}, set())],
)
def test_tiers_give_the_smallest_vcs_the_high_tier(sizes: dict[str, int], high: set[str]) -> None:
    assert {vc for vc, p in tiers(sizes).items() if p} == high


def test_the_tiered_tree_lets_every_vc_fill_the_partition() -> None:
    from joulepool_sim.policy import tiered_device_policy

    sizes = {"a": 1, "b": 1, "c": 2, "d": 4}
    tree = tiered_device_policy(sizes, 8, dict.fromkeys(sizes, 100), tiers(sizes)).tree
    assert {vc: tree[vc].guarantee_devices for vc in sizes} == dict.fromkeys(sizes, 8)
    assert {vc: tree[vc].priority for vc in sizes} == {"a": 1, "b": 1, "c": 0, "d": 0}
