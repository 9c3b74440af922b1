"""The action log beside the ledger (DESIGN.md §7): durable JSON lines, newest first,
size-capped with one previous file kept, what was done remembered across restarts, and a
hostile or torn file read without failing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from joulepool.deployment.actions import ACTIONS, MAX_LINE, ActionLog
from joulepool.errors import InvalidInput


def record(
    at_ms: int, claim: str = "c1", kind: str = "notice", outcome: str = "done"
) -> dict[str, Any]:
    return {
        "at_ms": at_ms,
        "claim": claim,
        "entitlement": "vision",
        "job": "7",
        "kind": kind,
        "outcome": outcome,
        "reason": None,
        "detail": None,
        "evidence": {"energy_uj": 5},
        "policy": {"over_reservation": "cancel"},
    }


def test_action_log_reads_newest_first_and_remembers_what_was_done(tmp_path: Path) -> None:
    log = ActionLog(tmp_path / ACTIONS)
    log.append(record(1))
    log.append(record(2, kind="withheld", outcome="withheld"))
    log.append(record(3, claim="c2", kind="cancel", outcome="failed"))
    assert [r["at_ms"] for r in log.read()] == [3, 2, 1]
    assert [r["at_ms"] for r in log.read(lambda r: r["claim"] == "c1", 1)] == [2]
    assert log.counts[("over_reservation", "notice", "done")] == 1
    again = ActionLog(tmp_path / ACTIONS)
    assert again.done("c1") == frozenset({"notice"})
    # A failed act is not done: it stays due.
    assert again.done("c2") == frozenset()
    # The last state is remembered too: the same withheld state again is not recorded, a
    # new one is.
    withheld = record(4, kind="withheld", outcome="withheld")
    assert again.append(withheld, if_changed=True) is None
    assert again.append({**withheld, "reason": "x"}, if_changed=True) is not None


def test_action_log_is_capped_keeping_the_previous_file(tmp_path: Path) -> None:
    log = ActionLog(tmp_path / ACTIONS, max_bytes=2000)
    for i in range(40):
        log.append(record(i, claim=f"c{i}"))
    assert (tmp_path / ACTIONS).stat().st_size <= 2000
    assert (tmp_path / (ACTIONS + ".1")).stat().st_size <= 2000
    found = log.read(limit=1000)
    assert found[0]["at_ms"] == 39 and len(found) < 40
    assert [r["at_ms"] for r in found] == sorted((r["at_ms"] for r in found), reverse=True)


def test_action_log_refuses_a_record_it_could_not_read_back(tmp_path: Path) -> None:
    log = ActionLog(tmp_path / ACTIONS)
    with pytest.raises(InvalidInput):
        log.append({**record(1), "kind": "shoot"})
    big = record(1)
    big["detail"] = "x" * MAX_LINE
    with pytest.raises(InvalidInput):
        log.append(big)
    assert not (tmp_path / ACTIONS).exists() or log.read() == []


def test_action_log_skips_what_is_not_a_record_in_a_hostile_file(tmp_path: Path) -> None:
    path = tmp_path / ACTIONS
    good = json.dumps(record(5))
    path.write_bytes(
        b"\xff\xfe garbage\n"
        + b"[1, 2]\n"
        + b'{"at_ms": -1, "claim": "c", "entitlement": "e", "kind": "notice", "outcome": "done"}\n'
        + b"[" * 100_000
        + b"\n"
        + b'{"a": "'
        + b"y" * (MAX_LINE + 10)
        + b'"}\n'
        + good.encode()
        + b"\n"
        + b'{"at_ms": 6, "claim": "c1", "kin'  # torn by a crash mid-append
    )
    log = ActionLog(path)
    assert [r["at_ms"] for r in log.read()] == [5]
    assert log.skipped == 6
    assert log.done("c1") == frozenset({"notice"})


def test_action_log_an_append_after_a_torn_line_is_kept_whole(tmp_path: Path) -> None:
    path = tmp_path / ACTIONS
    path.write_bytes(json.dumps(record(1)).encode() + b'\n{"at_ms": 2, "cla')
    ActionLog(path).append(record(3, claim="c3", kind="cancel"))
    again = ActionLog(path)
    assert [r["at_ms"] for r in again.read()] == [3, 1]
    assert again.done("c3") == frozenset({"cancel"}) and again.skipped == 1


def test_action_log_keeps_each_rules_state_per_claim_and_run(tmp_path: Path) -> None:
    """DESIGN.md §7: what the rules decide on. A notice is outstanding until a `withheld`
    of its rule; a requeue done starts idle and preemption over (a new run), not the
    reservation limit; a record without a rule is the limit's; all of it survives a restart."""
    path = tmp_path / ACTIONS
    log = ActionLog(path)
    log.append(record(1))  # written before rules existed: the limit's
    log.append({**record(2), "rule": "idle"})
    assert log.done("c1") == {"notice"} and log.done("c1", "idle") == {"notice"}
    assert log.notice_at("c1", "idle") == 2 and log.notice_at("c1", "preemption") is None
    log.append({**record(3, kind="withheld", outcome="withheld"), "rule": "idle"})
    assert log.notice_at("c1", "idle") is None
    assert log.notice_at("c1", "over_reservation") == 1
    log.append({**record(4), "rule": "preemption"})
    log.append({**record(5, kind="requeue"), "rule": "preemption"})
    for again in (log, ActionLog(path)):
        assert again.requeued_at("c1") == 5
        assert again.done("c1", "preemption") == frozenset()
        assert again.notice_at("c1", "preemption") is None
        assert again.done("c1") == {"notice"}  # the limit counts the whole claim
        latest = again.latest("c1")
        assert latest is not None
        assert (latest["rule"], latest["kind"], latest["at_ms"]) == ("preemption", "requeue", 5)
        assert again.latest("c2") is None
    with pytest.raises(InvalidInput):
        log.append({**record(6), "rule": "vibes"})


def test_action_log_appends_a_conditional_record_once_under_concurrency(tmp_path: Path) -> None:
    """Two requests that both saw an act due, or a withheld state as new, record it once:
    the check and the append are one step under the log's lock."""
    from concurrent.futures import ThreadPoolExecutor

    log = ActionLog(tmp_path / ACTIONS)
    withheld = {**record(1, kind="withheld", outcome="withheld"), "reason": "stale"}
    with ThreadPoolExecutor(8) as pool:
        made = list(pool.map(lambda _: log.append(withheld, if_changed=True), range(32)))
        done = list(pool.map(lambda _: log.append(record(2), if_not_done=True), range(32)))
    assert sum(r is not None for r in made) == 1
    assert sum(r is not None for r in done) == 1
    assert [r["kind"] for r in log.read()] == ["notice", "withheld"]
