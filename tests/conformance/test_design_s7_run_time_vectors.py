"""DESIGN.md §7: decisions about running work are exposed through `pool exec` with
vectors, like every other decision; every operation and every answer is held by one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from joulepool.acts import KINDS
from joulepool.conformance.execute import OPERATIONS
from joulepool.conformance.runner import load_vectors

VECTORS = Path(__file__).resolve().parents[2] / "conformance" / "vectors"


def expectations(op: str) -> list[dict[str, Any]]:
    return [v.expect for v in load_vectors(VECTORS) if v.case.get("op") == op]


def test_design_s7_every_pool_exec_operation_is_held_by_vectors() -> None:
    ops = {v.case.get("op") for v in load_vectors(VECTORS)}
    assert sorted(set(OPERATIONS) - ops) == []


def test_design_s7_every_answer_over_reservation_can_give_has_a_vector() -> None:
    answers = expectations("over_reservation")
    assert {e.get("kind", "error") for e in answers} == {*KINDS, None, "error"}
    assert {e.get("reason") for e in answers} == {
        None,
        "reached",
        "exhausts_within_notice",
        "past_margin",
        "estimator",
        "stale",
        "no_reading",
    }


def test_design_s7_every_live_verdict_and_reason_has_a_vector() -> None:
    answers = [e for e in expectations("live_projection") if "idle" in e]
    assert {(e["idle"]["verdict"], e["idle"]["reason"]) for e in answers} == {
        ("nothing_held", None),
        ("idle", None),
        ("working", None),
        ("working", "progress"),
        ("no_verdict", "no_reading"),
        ("no_verdict", "stale"),
        ("no_verdict", "unconfigured"),
        ("no_verdict", "window_too_short"),
        ("no_verdict", "unobserved"),
        ("no_verdict", "empty_window"),
    }
    # §5.1: a claim with a reading but no completed unit has no realised cost, never 0.
    assert any(e["units"] == 0 and e["energy_uj"] is not None for e in answers)
    assert all(e["realised_cost"] is None for e in answers if e["units"] in (0, None))


def test_design_s7_every_answer_idle_act_can_give_has_a_vector() -> None:
    answers = {(e.get("kind", "error"), e.get("reason")) for e in expectations("idle_act")}
    assert answers == {
        (None, None),
        ("error", None),
        ("report", "idle"),
        ("notice", "idle"),
        ("requeue", "idle_after_notice"),
        ("cancel", "idle_after_notice"),
        ("withheld", "not_contended"),
        # A notice outstanding is cleared by each verdict other than idle, with its reason
        # (a verdict that has none names itself).
        ("withheld", "working"),
        ("withheld", "nothing_held"),
        ("withheld", "progress"),
        ("withheld", "no_reading"),
        ("withheld", "stale"),
        ("withheld", "unobserved"),
        ("withheld", "window_too_short"),
    }


def test_design_s7_every_victims_outcome_has_a_vector() -> None:
    answers = expectations("victims")
    assert any("error" in e for e in answers)
    results = [e for e in answers if "error" not in e]
    assert all(set(e) == {"victims", "uncovered"} for e in results)
    # Victims taken, a waiter left uncovered, both at once, and neither.
    assert {(bool(e["victims"]), bool(e["uncovered"])) for e in results} == {
        (True, False),
        (False, True),
        (True, True),
        (False, False),
    }
    # Two waiters served by different victims, and one waiter served by two.
    assert any(len({v["for"] for v in e["victims"]}) == 2 for e in results)
    assert any(
        len(e["victims"]) == 2 and len({v["for"] for v in e["victims"]}) == 1 for e in results
    )


MUST = {
    "over_reservation": "acts",
    "idle_act": "acts",
    "victims": "acts",
    "live_projection": "live",
}


def test_design_s7_run_time_vectors_say_their_section() -> None:
    for vector in load_vectors(VECTORS):
        if vector.case.get("op") in MUST:
            assert vector.section == "design-7", vector.path
            assert vector.must == MUST[vector.case["op"]], vector.path
