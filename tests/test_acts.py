"""The reservation as a limit (DESIGN.md §7): which act over-reservation makes due, from
measured, fresh evidence only, each act at most once, and pool.toml's `[runtime]` table."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib

import pytest

from joulepool.acts import (
    DEFAULT_POLICY,
    Due,
    Evidence,
    RuntimePolicy,
    due_act,
    over_limit,
    parse_runtime,
)
from joulepool.deployment.config import config_digest, parse_config
from joulepool.errors import InvalidInput
from joulepool.grade import Energy, Grade

RESERVED = 100_000_000
NOW = 1_000_000
CANCEL = RuntimePolicy("cancel", 10, 60)


def seen(uj: int, grade: Grade = Grade.HwShunt, exhausts: int | None = None) -> Evidence:
    return Evidence(RESERVED, Energy(uj, grade), NOW, 1_000_000, exhausts)


def test_acts_nothing_is_due_well_inside_the_reservation() -> None:
    assert due_act(CANCEL, seen(10_000_000, exhausts=NOW + 61_000), NOW, frozenset()) == Due(
        None, None
    )


def test_acts_notice_when_the_reservation_runs_out_within_notice_s() -> None:
    due = due_act(CANCEL, seen(50_000_000, exhausts=NOW + 60_000), NOW, frozenset())
    assert due == Due("notice", "exhausts_within_notice")
    reached = due_act(CANCEL, seen(RESERVED), NOW, frozenset())
    assert reached == Due("notice", "reached")


def test_acts_the_configured_act_only_past_the_margin_after_the_notice() -> None:
    notified = frozenset({"notice"})
    # Exactly reservation × 110 %: not past it.
    assert due_act(CANCEL, seen(110_000_000), NOW, notified) == Due(None, None)
    assert due_act(CANCEL, seen(110_000_001), NOW, notified) == Due("cancel", "past_margin")
    # A job that jumps past the margin is told first.
    assert due_act(CANCEL, seen(500_000_000), NOW, frozenset()).kind == "notice"
    for act in ("signal", "requeue"):
        policy = RuntimePolicy(act, 10, 60)
        assert due_act(policy, seen(200_000_000), NOW, notified) == Due(act, "past_margin")


def test_acts_each_act_is_due_at_most_once_per_claim() -> None:
    done = frozenset({"notice", "cancel"})
    assert due_act(CANCEL, seen(900_000_000), NOW, done) == Due(None, None)


@pytest.mark.parametrize("grade", [Grade.HwShunt, Grade.ModelBased])
def test_acts_a_measured_grade_may_carry_an_act(grade: Grade) -> None:
    assert due_act(CANCEL, seen(RESERVED * 2, grade), NOW, frozenset({"notice"})).kind == "cancel"


def test_acts_an_estimate_never_stops_a_job() -> None:
    due = due_act(CANCEL, seen(RESERVED * 9, Grade.Estimator), NOW, frozenset({"notice"}))
    assert due == Due("withheld", "estimator")


@pytest.mark.parametrize("unknown", ["stale", "no_reading"])
def test_acts_unknown_is_not_over(unknown: str) -> None:
    evidence = Evidence(RESERVED, None, None, None, None, unknown)
    assert due_act(CANCEL, evidence, NOW, frozenset({"notice"})) == Due("withheld", unknown)


def test_acts_the_default_policy_reports_and_never_acts() -> None:
    assert RuntimePolicy("report", 10, 300) == DEFAULT_POLICY and not DEFAULT_POLICY.acts
    assert due_act(DEFAULT_POLICY, seen(RESERVED), NOW, frozenset()) == Due(None, None)
    assert due_act(DEFAULT_POLICY, seen(RESERVED * 2), NOW, frozenset()) == Due(
        "report", "past_margin"
    )
    assert due_act(DEFAULT_POLICY, seen(RESERVED * 2), NOW, frozenset({"report"})).kind is None
    # Nothing would act, so nothing is withheld.
    unknown = Evidence(RESERVED, None, None, None, None, "stale")
    assert due_act(DEFAULT_POLICY, unknown, NOW, frozenset()) == Due(None, None)


def test_acts_the_margin_is_compared_exactly_in_integers() -> None:
    policy = RuntimePolicy("cancel", 0, 0)
    assert not over_limit(policy, 3, 3) and over_limit(policy, 4, 3)
    big = 10**30
    assert over_limit(RuntimePolicy("cancel", 1, 0), big * 101 + 1, big * 100)
    assert not over_limit(RuntimePolicy("cancel", 1, 0), big * 101, big * 100)


BASE = """
[pool]
steward = "s"

"""


def test_acts_runtime_table_is_read_strictly_and_digested_only_when_set() -> None:
    plain = parse_config(tomllib.loads(BASE), "pool.toml")
    assert plain.runtime is None and plain.runtime_policy == DEFAULT_POLICY
    doc = tomllib.loads(BASE + '\n[runtime]\nover_reservation = "requeue"\nnotice_s = 60\n')
    set_ = parse_config(doc, "pool.toml")
    assert set_.runtime == RuntimePolicy("requeue", 10, 60)
    assert config_digest(set_) != config_digest(plain)
    # The default written out is still a choice made: it is digested.
    spelled = parse_config(tomllib.loads(BASE + "\n[runtime]\n"), "pool.toml")
    assert spelled.runtime == DEFAULT_POLICY and config_digest(spelled) != config_digest(plain)


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({"over_reservation": "kill"}, "runtime.over_reservation"),
        ({"margin_pct": 10.5}, "runtime.margin_pct"),
        ({"margin_pct": -1}, "runtime.margin_pct"),
        ({"notice_s": True}, "runtime.notice_s"),
        ({"notice_s": 10**9}, "runtime.notice_s"),
        ({"grace": 1}, "runtime.grace"),
    ],
)
def test_acts_a_bad_runtime_table_is_refused_by_name(table: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        parse_runtime(table, "pool.toml")
    assert field in str(exc.value)
    with pytest.raises(InvalidInput):
        parse_runtime("cancel", "pool.toml")


def pool_exec(case: dict[str, object]) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "joulepool", "exec"],
        input=json.dumps(case).encode(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_acts_pool_exec_gives_the_same_answer_and_refuses_by_name() -> None:
    case: dict[str, object] = {
        "op": "over_reservation",
        "policy": {"over_reservation": "requeue", "margin_pct": 10},
        "evidence": {"reserved_uj": RESERVED, "energy": {"uj": 110_000_001, "grade": "ModelBased"}},
        "now_ms": NOW,
        "done": ["notice"],
    }
    assert pool_exec(case) == {"kind": "requeue", "reason": "past_margin"}
    unknown = {**case, "evidence": {"reserved_uj": RESERVED, "unknown": "stale"}}
    assert pool_exec(unknown) == {"kind": "withheld", "reason": "stale"}
    bad = pool_exec({**case, "done": ["shoot"]})
    assert bad["error"] == "invalid_input" and "done" in str(bad["detail"])
    bad = pool_exec({**case, "evidence": {"reserved_uj": -1}})
    assert bad["error"] == "invalid_input" and "evidence.reserved_uj" in str(bad["detail"])
