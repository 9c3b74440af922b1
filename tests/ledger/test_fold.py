"""The one fold from events to usage (§6.2, §6.4): release replaces the reservation, an
inconsistent stream is refused at its index, and a rolled-back batch leaves no trace."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joulepool.errors import LedgerRefused
from joulepool.estimate import Observation, Tally, decide_estimate, derive_estimate
from joulepool.events import Admitted, Event, Released
from joulepool.grade import Energy, Grade
from joulepool.ledger.fold import LedgerState
from tests.support.builders import team_tree


def adm(claim: str, ent: str = "a", uj: int = 100, class_: str | None = "x") -> Admitted:
    return Admitted(claim, ent, 1, 2, Energy(uj, Grade.Estimator), 0, 1, class_)


def rel(claim: str, uj: int = 60, grade: Grade = Grade.HwShunt) -> Released:
    return Released(claim, Energy(uj, grade), 2)


def test_release_charges_the_actual_in_place_of_the_reservation() -> None:
    state = LedgerState(team_tree())
    state.apply(adm("c1", uj=100))
    assert (state.usage.spent_uj("a"), state.usage.held_devices("a")) == (100, 2)
    state.apply(rel("c1", 60))
    fig = state.usage.of("a")
    assert (fig.spent_uj, fig.reserved_uj, fig.held_devices, fig.running_claims) == (60, 0, 0, 0)
    assert state.evidence("x") == Tally(observations=1, evidence=1, low=60, high=60)


def test_an_overrun_is_charged_what_it_cost() -> None:
    state = LedgerState(team_tree())
    state.apply(adm("c1", uj=100))
    state.apply(rel("c1", 250))
    assert state.usage.spent_uj("a") == 250


@pytest.mark.parametrize(
    ("events", "index"),
    [
        ([rel("ghost")], 0),
        ([adm("c1"), adm("c1")], 1),
        ([adm("c1"), rel("c1"), rel("c1")], 2),
        ([adm("c1"), rel("c1"), adm("c1")], 2),
    ],
)
def test_an_inconsistent_stream_is_refused_at_its_index(events: list[Event], index: int) -> None:
    state = LedgerState(team_tree())
    with pytest.raises(LedgerRefused) as info:
        for e in events:
            state.apply(e)
    assert (info.value.index, info.value.error) == (index, "inconsistent_stream")


events_strategy = st.lists(
    st.tuples(st.sampled_from(["admit", "release"]), st.integers(0, 5), st.integers(0, 1000)),
    max_size=30,
)


def fold(ops: list[tuple[str, int, int]], state: LedgerState) -> None:
    for kind, n, uj in ops:
        claim = f"c{n}"
        event: Event = adm(claim, "abc"[n % 3], uj) if kind == "admit" else rel(claim, uj)
        if state.refusal(event) is None:
            state.apply(event)


def fingerprint(state: LedgerState) -> object:
    return (
        state.length,
        {i: state.usage.of(i) for i in "abc"},
        state.open_claims(),
        [(c, state.closed_claim(c)) for c in (f"c{n}" for n in range(6))],
        state.classes(),
        [state.usage.lendable_uj(i) for i in "abc"],
        [state.usage.group_borrowed_uj(i) for i in "abc"],
    )


@settings(max_examples=200, deadline=None)
@given(events_strategy, events_strategy)
def test_a_rolled_back_batch_leaves_the_state_exactly_as_it_was(
    first: list[tuple[str, int, int]], batch: list[tuple[str, int, int]]
) -> None:
    state = LedgerState(team_tree())
    fold(first, state)
    before = fingerprint(state)
    state.begin()
    fold(batch, state)
    state.rollback()
    assert fingerprint(state) == before
    # And the state goes on exactly as a fresh fold of the first part would.
    fresh = LedgerState(team_tree())
    fold(first, fresh)
    fold(batch, state)
    fold(batch, fresh)
    assert fingerprint(state) == fingerprint(fresh)


releases_strategy = st.lists(
    st.tuples(
        st.sampled_from(["x", "y"]),
        st.sampled_from("abc"),
        st.integers(0, 10**12),
        st.sampled_from(list(Grade)),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(releases_strategy, st.integers(0, 4))
def test_s2_6_counts_and_extremes_derive_what_the_whole_history_derives(
    rows: list[tuple[str, str, int, Grade]], required: int
) -> None:
    """The fold keeps per class and entitlement only counts and extremes, not every
    released claim; every estimate derived from them equals §2.6 over the full history."""
    state = LedgerState(team_tree())
    history = []
    for n, (cls, ent, uj, grade) in enumerate(rows):
        state.apply(adm(f"c{n}", ent, 5, cls))
        state.apply(Released(f"c{n}", Energy(uj, grade), 2))
        history.append(Observation(cls, ent, Energy(uj, grade)))
    for cls in ("x", "y", "z"):
        for scope in (None, "a", "b", "c"):
            whole = derive_estimate(history, cls, required, scope)
            assert decide_estimate(state.evidence(cls, scope), cls, required) == whole
