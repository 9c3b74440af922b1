"""Property tests of attribution (§2.5), idleness (§2.7), preemption (§5) and derivation (§2.6)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from joulepool.attribution import attribute
from joulepool.estimate import Derived, Observation, derive_estimate
from joulepool.grade import Energy, Grade
from joulepool.idle import (
    IdleObservation,
    IdlePolicy,
    IdleVerdictKind,
    idle_verdict,
    reclamation_order,
)
from joulepool.preemption import Workload, preemption_order

grades = st.sampled_from(list(Grade))
occupant_maps = st.dictionaries(
    st.text(min_size=1, max_size=6), st.integers(0, 10**6), min_size=1, max_size=12
).filter(lambda m: sum(m.values()) > 0)


@settings(max_examples=500)
@given(st.integers(0, 10**15), grades, occupant_maps, st.randoms())
def test_attribution_conserves_is_deterministic_and_order_free(
    total: int, grade: Grade, occupants: dict[str, int], rnd: object
) -> None:
    shares = attribute(Energy(total, grade), occupants)
    assert sum(s.uj for s in shares.values()) == total
    assert set(shares) == set(occupants)
    items = list(occupants.items())
    rnd.shuffle(items)  # type: ignore[attr-defined]
    assert attribute(Energy(total, grade), dict(items)) == shares
    weight_sum = sum(occupants.values())
    for key, share in shares.items():
        # Each share is its exact quota rounded down, or up by the one remainder microjoule.
        assert share.uj - total * occupants[key] // weight_sum in (0, 1)
        assert share.grade.rank >= grade.rank
        if len(occupants) > 1:
            assert share.grade is not Grade.HwShunt


@settings(max_examples=500)
@given(
    st.integers(0, 10**12),
    st.integers(0, 10**12),
    st.integers(0, 2**64 - 1),  # every threshold a figure can state (DESIGN.md §3)
    st.integers(0, 10**12),
    st.integers(0, 64),
)
def test_no_threshold_makes_a_guess_idle(
    window: int, observed: int, threshold: int, uj: int, held: int
) -> None:
    obs = IdleObservation("w", held, observed, Energy(uj, Grade.Estimator))
    verdict = idle_verdict(IdlePolicy(window, threshold), obs)
    assert verdict.kind in (IdleVerdictKind.no_verdict, IdleVerdictKind.nothing_held)
    assert reclamation_order(IdlePolicy(window, threshold), [obs]) == []


workloads = st.lists(
    st.builds(
        Workload,
        st.text(min_size=1, max_size=4),
        st.integers(0, 10**18),
        st.integers(0, 5),
        st.integers(0, 9),
    ),
    max_size=20,
    unique_by=lambda w: w.key,
)


@settings(max_examples=500)
@given(workloads)
def test_an_undefined_cost_is_never_ranked_as_a_number(ws: list[Workload]) -> None:
    order = preemption_order(ws)
    by_key = {w.key: w for w in ws}
    assert sorted(order) == sorted(by_key)
    defined = [by_key[k].completed_units > 0 for k in order]
    # Every measured workload precedes every unmeasured one, whatever they spent.
    assert defined == sorted(defined, reverse=True)
    assert preemption_order(list(reversed(ws))) == order


observations = st.lists(
    st.builds(
        Observation,
        st.sampled_from([None, "a", "b"]),
        st.sampled_from(["t1", "t2"]),
        st.builds(Energy, st.integers(0, 10**9), grades),
    ),
    max_size=30,
)


@settings(max_examples=500)
@given(observations, st.sampled_from(["a", "b"]), st.integers(0, 5))
def test_a_derived_estimate_rests_on_observed_figures_of_its_class_only(
    history: list[Observation], class_: str, required: int
) -> None:
    result = derive_estimate(history, class_, required)
    evidence = [o for o in history if o.class_ == class_ and o.actual.grade.observed]
    assert result.evidence == len(evidence)
    assert result.observations == sum(1 for o in history if o.class_ == class_)
    if isinstance(result, Derived):
        assert result.estimate.grade is Grade.ModelBased
        assert result.estimate.uj == max(o.actual.uj for o in evidence)
        assert len(evidence) >= max(1, required)
    else:
        assert len(evidence) < max(1, required)
