"""The GPU-hour quota (Slurm GrpTRESMins style), decided on hand-written cases.

Team `a` may hold 4 GPUs and run 100 GPU-µs a period; team `b` 2 GPUs and 50 GPU-µs.
"""

from __future__ import annotations

import pytest

from joulepool_sim.errors import SimulationConfigError
from joulepool_sim.gpu_hours import (
    DEVICES_EXCEED,
    DEVICES_HELD,
    EXHAUSTED,
    REQUEST_EXCEEDS,
    Decision,
    GpuTimeQuota,
)


def quota() -> GpuTimeQuota:
    return GpuTimeQuota({"a": 4, "b": 2}, {"a": 100, "b": 50})


def test_what_can_never_start_is_refused_before_anything_queues() -> None:
    q = quota()
    assert q.decide("a", 5, 1, 0) == Decision("deny", DEVICES_EXCEED)
    # 2 GPUs × 51 µs asked is more than a's whole period of 100 GPU-µs.
    assert q.decide("a", 2, 51, 0) == Decision("deny", REQUEST_EXCEEDS)
    assert q.decide("nobody", 1, 1, 0) == Decision("deny", "unknown_entitlement")


def test_a_job_starts_only_if_its_requested_time_fits_what_is_left() -> None:
    q = quota()
    assert q.start("j1", "a", 2, 30, 0) == Decision("admit")  # holds 60 of 100
    assert q.used_gpu_us("a", 0) == 60
    # 2 × 25 = 50 more would be 110: waits, though 2 GPUs are free.
    assert q.start("j2", "a", 2, 25, 0) == Decision("queue", EXHAUSTED)
    assert q.start("j3", "a", 2, 20, 0) == Decision("admit")  # exactly 100
    assert q.start("j4", "a", 1, 1, 0) == Decision("queue", DEVICES_HELD)
    # Team b is untouched: no budget is shared, none borrowed.
    assert q.start("k1", "b", 2, 25, 0) == Decision("admit")


def test_the_time_run_replaces_the_request_and_the_budget_renews_per_period() -> None:
    q = quota()
    q.start("j1", "a", 2, 40, 0)  # requested 80
    assert q.finish("j1", 10) == 20  # ran 10 µs: charged 20 GPU-µs
    assert q.used_gpu_us("a", 0) == 20
    assert q.start("j2", "a", 4, 20, 0) == Decision("admit")  # 20 + 80 = 100
    assert q.start("j3", "a", 0, 1, 0) == Decision("admit")  # zero GPUs cost nothing
    q.finish("j2", 20)
    assert q.start("j4", "a", 1, 1, 0) == Decision("queue", EXHAUSTED)
    # A new period starts from nothing: nothing carries over.
    assert q.start("j4", "a", 1, 1, 1) == Decision("admit")
    assert q.used_gpu_us("a", 1) == 1


def test_a_job_overrunning_its_request_is_charged_what_it_ran() -> None:
    q = quota()
    q.start("j1", "b", 1, 10, 0)
    assert q.finish("j1", 60) == 60
    assert q.used_gpu_us("b", 0) == 60  # past the 50 budget: Slurm charges elapsed time
    assert q.start("j2", "b", 1, 1, 0) == Decision("queue", EXHAUSTED)


def test_bad_bookkeeping_is_refused() -> None:
    q = quota()
    with pytest.raises(SimulationConfigError, match="not running"):
        q.finish("ghost", 1)
    q.start("j1", "a", 1, 1, 0)
    with pytest.raises(SimulationConfigError, match="already running"):
        q.start("j1", "a", 1, 1, 0)
    with pytest.raises(SimulationConfigError, match="both a GPU limit"):
        GpuTimeQuota({"a": 1}, {"b": 1})
