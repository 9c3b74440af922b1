"""The reservation as a limit (runtime.py): a run past its reservation and margin is acted on
exactly at the crossing instant, through the service's own `acts.due_act`.

One job: 1 GPU, its user guesses 100 µJ, it draws 1,000 µJ over 10 s (100 µJ a second).
Margin 10%: past 110 µJ, first at 111 µJ, 1.11 s into the run (1,110 ms exactly).
"""

from __future__ import annotations

import pytest

from joulepool.acts import Evidence, RuntimePolicy, due_act
from joulepool.grade import Energy, Grade
from joulepool.tree import Entitlement, Tree
from joulepool_sim.engine import GUESS, PoolAdmission, replay_trace
from joulepool_sim.errors import SimulationConfigError
from joulepool_sim.estimates import time_bucket_hours, timed_class, with_timed_classes
from joulepool_sim.policy import ROOT, device_limits
from joulepool_sim.runtime import crossing_us, energy_at, plan
from joulepool_sim.summary import summarise
from tests.simulate.helpers import job

E = Grade.Estimator
S = 1_000_000
TREE = Tree([Entitlement(ROOT, 10_000, 2, 0), Entitlement("A", 10_000, 2, 1, parent=ROOT)])
JOB = job("A", 1, 0, 1, 100, E, 10 * S, actual_uj=1_000)


def _replay(act: str | None, checkpoint_us: int = S) -> tuple[int | None, int, str | None, int]:
    runtime = None if act is None else RuntimePolicy(act, 10)
    adm = PoolAdmission([JOB], TREE, GUESS, runtime=runtime, checkpoint_us=checkpoint_us)
    run = replay_trace([JOB], adm, device_limits(TREE), horizon_us=100 * S)
    s = summarise(run, "p", "p", {"A": 10_000}, {"A": 1}, 10_000, 2)
    out = run.outcomes[0]
    return out.end_us, s.spent_uj, out.act, s.wasted_uj


def test_the_crossing_is_exact() -> None:
    assert crossing_us(10, 100, 1_000, 10 * S) == 1_110_000
    assert energy_at(1_000, 10 * S, 1_110_000) == 111
    assert energy_at(1_000, 10 * S, 1_109_999) == 110
    assert crossing_us(10, 100, 110, 10 * S) is None  # never past 110


def test_due_act_agrees_at_the_instant_and_not_a_millisecond_before() -> None:
    policy = RuntimePolicy("cancel", 10)
    before = Evidence(
        100, Energy(energy_at(1_000, 10 * S, 1_109_000), Grade.ModelBased), 1109, 100, 1000
    )
    at = Evidence(
        100, Energy(energy_at(1_000, 10 * S, 1_110_000), Grade.ModelBased), 1110, 100, 1000
    )
    assert due_act(policy, before, 1109, frozenset({"notice"})).kind is None
    assert due_act(policy, at, 1110, frozenset({"notice"})).kind == "cancel"
    p = plan(policy, JOB, 100, 0)
    assert (p.act, p.act_us, p.charged_uj, p.wasted_uj, p.completed) == (
        "cancel",
        1_110_000,
        111,
        111,
        False,
    )


def test_cancel_ends_the_job_at_the_crossing_and_charges_what_it_drew() -> None:
    assert _replay("cancel") == (1_110_000, 111, "cancel", 111)


def test_report_never_acts() -> None:
    assert _replay("report") == (10 * S, 1_000, "report", 0)
    assert _replay(None) == (10 * S, 1_000, None, 0)


def test_requeue_restarts_from_the_last_checkpoint_and_counts_the_lost_work() -> None:
    # Stopped at 1.11 s, checkpointed at 1 s: 0.11 s (11 µJ) redone; both runs charged.
    assert _replay("requeue") == (10 * S + 110_000, 1_011, "requeue", 11)
    # Checkpoints every 2 s: none yet, the whole run is redone.
    assert _replay("requeue", 2 * S) == (10 * S + 1_110_000, 1_111, "requeue", 111)


def test_a_run_within_its_margin_is_never_acted_on() -> None:
    within = job("A", 1, 0, 1, 100, E, 10 * S, actual_uj=110)
    p = plan(RuntimePolicy("cancel", 10), within, 100, 0)
    assert (p.act, p.run_us, p.charged_uj) == (None, 10 * S, 110)


def test_signal_is_not_replayed() -> None:
    with pytest.raises(SimulationConfigError):
        plan(RuntimePolicy("signal", 10), JOB, 100, 0)


def test_timed_classes_bucket_the_request_in_powers_of_two() -> None:
    h = 3_600 * S
    assert [time_bucket_hours(x) for x in (1, h, h + 1, 3 * h, 4 * h, 5 * h)] == [1, 1, 2, 4, 4, 8]
    long = job("A", 2, 0, 1, 100, E, 3 * h)
    assert timed_class(long) == "T (batch size 1) x1 <=4h"
    assert [j.class_ for j in with_timed_classes([JOB, long])] == [
        "T (batch size 1) x1 <=1h",
        "T (batch size 1) x1 <=4h",
    ]
