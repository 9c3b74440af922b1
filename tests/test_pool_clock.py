"""Time faults are reported, never absorbed (DESIGN.md §3): the rule on an injected wall
clock and monotonic clock (`Pool(clock=, monotonic=)`). tests/reliability/test_clock_faults.py
runs the same rules on real processes under a wrong clock."""

from __future__ import annotations

from typing import Any

import pytest

from joulepool.claim import Claim
from joulepool.deployment.config import config_digest, parse_config
from joulepool.errors import ClockFault, InvalidInput
from joulepool.grade import Energy, Grade
from joulepool.pool import ClockAcceptance, Pool
from joulepool.stores.memory import MemoryStore
from joulepool.views.plausibility import check_release
from tests.support.builders import team_tree
from tests.support.ledgers import STEWARD

DAY_MS = 86_400_000


class Clocks:
    """A wall clock and a monotonic clock a test moves by hand."""

    def __init__(self, wall: int) -> None:
        self.wall, self.mono = wall, 1_000

    def advance(self, ms: int) -> None:
        self.wall += ms
        self.mono += ms


def claim(name: str, devices: int = 1) -> Claim:
    return Claim(name, "a", 1, devices, Energy(1_000, Grade.HwShunt))


def test_a_step_back_of_five_seconds_is_absorbed_and_one_more_millisecond_is_not() -> None:
    t = Clocks(10 * DAY_MS)
    pool = Pool(team_tree(g=10**9, gd=10), STEWARD, MemoryStore(), clock=lambda: t.wall)
    first = pool.submit(claim("x"))
    t.wall -= 5_000
    assert pool.submit(claim("y")).at_ms == first.at_ms
    assert pool.clock_fault() is None
    t.wall -= 1
    fault = pool.clock_fault()
    assert fault is not None and fault.code == "clock_behind_ledger"
    assert (fault.clock_ms, fault.ledger_ms) == (t.wall, first.at_ms)
    with pytest.raises(ClockFault, match="behind the last entry"):
        pool.release("x", Energy(1, Grade.HwShunt))
    assert pool.length == 2


def test_a_clock_past_max_clock_gap_at_start_waits_for_an_acceptance_of_that_ledger() -> None:
    t = Clocks(10 * DAY_MS)
    store = MemoryStore()
    Pool(team_tree(g=10**9, gd=10), STEWARD, store, clock=lambda: t.wall).submit(claim("x"))
    t.advance(31 * DAY_MS + 1)
    kept: list[ClockAcceptance] = []

    def reopen() -> Pool:
        return Pool(
            team_tree(g=10**9, gd=10),
            STEWARD,
            store,
            clock=lambda: t.wall,
            monotonic=lambda: t.mono,
            max_clock_gap_ms=31 * DAY_MS,
            watch_clock_steps=True,
            accepted_clock=lambda: kept[-1] if kept else None,
        )

    pool = reopen()
    with pytest.raises(ClockFault) as refused:
        pool.submit(claim("y"))
    assert refused.value.code == "clock_jump"
    # An acceptance made before the jump was seen, or naming entries the ledger does not
    # hold, covers nothing.
    kept.append(ClockAcceptance(t.wall, 0, b"\0" * 32))
    assert pool.clock_fault() is not None
    kept.append(ClockAcceptance(t.wall, 5, b"\0" * 32))
    assert pool.clock_fault() is not None
    length, head = pool.snapshot()
    kept.append(ClockAcceptance(t.wall, length, head))
    assert pool.clock_fault() is None
    assert pool.submit(claim("y")).at_ms == t.wall
    # Exactly at the gap is no jump.
    t.advance(31 * DAY_MS)
    assert reopen().clock_fault() is None


def test_a_step_against_the_monotonic_clock_while_running_is_a_jump_until_accepted() -> None:
    t = Clocks(10 * DAY_MS)
    kept: list[ClockAcceptance] = []
    pool = Pool(
        team_tree(g=10**9, gd=10),
        STEWARD,
        MemoryStore(),
        clock=lambda: t.wall,
        monotonic=lambda: t.mono,
        watch_clock_steps=True,
        accepted_clock=lambda: kept[-1] if kept else None,
    )
    pool.submit(claim("x"))
    # Hours of running with a clock slewing 4 s between readings: never a step.
    for _ in range(3):
        t.advance(3_600_000)
        t.wall += 4_000
        assert pool.clock_fault() is None
    # A day with nothing read: 500 ppm of slew (43.2 s) on top of the step is still no step.
    t.advance(86_400_000)
    t.wall += 5_000 + 43_200
    assert pool.clock_fault() is None
    t.wall += 5_001
    fault = pool.clock_fault()
    assert fault is not None and fault.code == "clock_jump" and "monotonic" in str(fault)
    t.advance(1_000)
    assert pool.clock_fault() is not None  # it stands once seen, whatever comes after
    length, head = pool.snapshot()
    kept.append(ClockAcceptance(t.wall - 60_000, length, head))  # made before the step
    assert pool.clock_fault() is not None
    kept.append(ClockAcceptance(t.wall, length, head))
    assert pool.clock_fault() is None
    assert pool.submit(claim("y")).at_ms == t.wall


def test_the_release_bound_runs_on_monotonic_time_for_claims_this_process_admitted() -> None:
    t = Clocks(10 * DAY_MS)
    store = MemoryStore()
    pool = Pool(
        team_tree(g=10**12, gd=10),
        STEWARD,
        store,
        clock=lambda: t.wall,
        monotonic=lambda: t.mono,
    )
    pool.submit(claim("x"))
    t.wall -= 4_000  # clamped: x's at_ms is 4 s ahead of the clock
    pool.submit(claim("y"))
    t.mono += 2_000
    t.wall += 2_000
    # 2 s on one device under 1 W: 2 J is the bound, whatever at_ms says.
    assert check_release(pool, "y", 2_000_000, 1) is None
    finding = check_release(pool, "y", 2_000_001, 1)
    assert finding is not None and "2,000 ms since admission" in finding.words
    # Another process, started later, never saw them admitted: the wall clock's distance
    # from at_ms counts, never below 0, and the process's own age bounds it from below.
    t.advance(3_000)
    later = Pool(
        team_tree(g=10**12, gd=10),
        STEWARD,
        store,
        clock=lambda: t.wall,
        monotonic=lambda: t.mono,
        read_only=True,
    )
    state = later.claim_state("y")
    assert state is not None
    assert later.elapsed_since_admission_ms("y", state.admitted) == 1_000
    t.wall -= 60_000  # far behind the admission's at_ms now
    t.mono += 500
    assert later.elapsed_since_admission_ms("y", state.admitted) == 500


def test_max_clock_gap_is_a_validated_pool_key_in_the_digest_only_when_set() -> None:
    base: dict[str, Any] = {"pool": {"steward": "s"}, "entitlement": []}
    unset = parse_config(base, "pool.toml")
    assert unset.max_clock_gap is None and unset.clock_gap_ms == 31 * DAY_MS
    gap = parse_config({**base, "pool": {"steward": "s", "max_clock_gap": 3600}}, "pool.toml")
    assert gap.clock_gap_ms == 3_600_000
    assert config_digest(gap) != config_digest(unset)
    for bad in (0, -1, "31d", 1.5, True):
        with pytest.raises(InvalidInput, match=r"pool\.max_clock_gap"):
            parse_config({**base, "pool": {"steward": "s", "max_clock_gap": bad}}, "pool.toml")
