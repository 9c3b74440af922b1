"""`GET /v1/dashboard` without a browser: scope decided on the server, a bad
period refused, and the ledger-history line (`service/timeline.py`) ending at the period's
committed figure, bounded in memory, with a release moving the period its claim was
admitted in (DESIGN.md §3)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from joulepool.claim import Claim
from joulepool.grade import Energy, Grade
from joulepool.periods import Schedule
from joulepool.pool import Pool
from joulepool.service.dashboard import RUNNING_SHOWN, running
from joulepool.service.models import DashboardOut
from joulepool.service.timeline import CHUNK, MAX_POINTS, Timeline, TimelineBuilding
from joulepool.service.tokens import Principal
from joulepool.stores.memory import MemoryStore
from tests.support.builders import team_tree
from tests.support.ledgers import STEWARD
from tests.support.servers import Deployment, Serve, serving, sighup

MJ = 10**12
DAY_MS = 86_400_000


def body(cid: str, ent: str, uj: int) -> dict[str, Any]:
    return {
        "id": cid,
        "entitlement": ent,
        "gang_size": 1,
        "devices_per_member": 1,
        "estimate": {"uj": uj, "grade": "HwShunt"},
        "class": "train",
    }


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Deployment, Serve]]:
    run = serving(tmp_path_factory.mktemp("dash") / "d")
    deployment, serve = next(run)
    try:
        with serve.client(deployment.operator) as ops:
            assert (
                ops.post("/v1/claims", json=body("v", "vision", 5 * MJ)).json()["verdict"]
                == "admit"
            )
            assert (
                ops.post("/v1/claims", json=body("l", "language", 35 * MJ)).json()["verdict"]
                == "admit"
            )
            assert (
                ops.post("/v1/claims", json=body("l2", "language", 40 * MJ)).json()["verdict"]
                == "queue"
            )
        with serve.client(deployment.tenants["robotics"]) as robotics:
            assert (
                robotics.post("/v1/claims", json=body("mine", "robotics", MJ)).json()["verdict"]
                == "admit"
            )
        yield deployment, serve
    finally:
        run.close()


def test_an_operator_reads_the_whole_tree_and_the_ledger(
    served: tuple[Deployment, Serve],
) -> None:
    deployment, serve = served
    with serve.client(deployment.operator) as ops:
        out = ops.get("/v1/dashboard").json()
        assert out["entitlements"] == ops.get("/v1/entitlements").json()["entitlements"]
        ledger = ops.get("/v1/ledger").json()
    assert {k: out["ledger"][k] for k in ledger} == ledger
    assert out["ledger"]["last_at_ms"] <= out["now_ms"]
    assert out["period"]["current"] and out["periods"][0] == out["period"]
    # language borrowed 5 MJ: its shown siblings with unspent guarantee are the lenders.
    assert {x["id"] for x in out["lenders"]["language"]} == {"vision", "robotics"}
    assert [(v["claim"], v["verdict"]) for v in out["verdicts"]] == [
        ("robotics/mine", "admit"),
        ("l2", "queue"),
        ("l", "admit"),
        ("v", "admit"),
    ]
    for row in out["entitlements"]:
        line = out["timeline"].get(row["id"])
        if row["usage"]["committed_uj"]:
            assert line is not None and line[-1][1] == row["usage"]["committed_uj"]
    assert [e["class"] for e in out["estimates"]] == ["train"]
    assert out["estimates"][0]["observations"] == 0  # nothing released yet
    assert len(ops_get(serve, deployment.operator, "/v1/dashboard?verdicts=2")["verdicts"]) == 2


def ops_get(serve: Serve, token: str, path: str) -> Any:
    with serve.client(token) as http:
        r = http.get(path)
        assert r.status_code == 200, r.text
        return r.json()


def test_a_tenant_reads_its_subtree_only_and_no_ledger(
    served: tuple[Deployment, Serve],
) -> None:
    deployment, serve = served
    out = ops_get(serve, deployment.tenants["robotics"], "/v1/dashboard")
    assert [e["id"] for e in out["entitlements"]] == ["robotics"]
    assert set(out["timeline"]) == {"robotics"}
    assert [(v["claim"], v["entitlement"]) for v in out["verdicts"]] == [("mine", "robotics")]
    assert out["lenders"] == {}
    assert [(e["class"], e["entitlement"]) for e in out["estimates"]] == [("train", "robotics")]
    assert "ledger" not in out


def test_the_dashboard_data_needs_a_reading_token_and_a_real_period(
    served: tuple[Deployment, Serve],
) -> None:
    deployment, serve = served
    scraper = deployment.add_token("scraper", "metrics")
    assert "configuration reloaded" in sighup(serve)
    with serve.client(None) as anyone:
        assert anyone.get("/v1/dashboard").status_code == 401
        page = anyone.get("/ui")  # the page holds no figure: public, like /docs
        assert page.status_code == 200 and "content-security-policy" in page.headers
        assert anyone.get("/ui/app.js").headers["content-type"].startswith("text/javascript")
        assert anyone.get("/ui/../v1/ledger").status_code in {401, 404}
    with serve.client(deployment.operator) as ops:
        assert ops.get("/ui/nothing.js").json()["error"] == "not_found"
        bad = ops.get("/v1/dashboard", params={"period": "2026-13"})
        assert (bad.status_code, bad.json()["error"]) == (422, "invalid_input")
        assert ops.get("/v1/dashboard", params={"verdicts": 0}).status_code == 422
    with serve.client(scraper) as metrics_only:
        refused = metrics_only.get("/v1/dashboard")
        assert (refused.status_code, refused.json()["error"]) == (403, "forbidden")


def test_the_timeline_ends_at_committed_stays_bounded_and_charges_the_admit_period() -> None:
    now = {"ms": 10 * DAY_MS}
    pool = Pool(
        team_tree(g=10**15), STEWARD, MemoryStore(), clock=lambda: now["ms"], period=Schedule("day")
    )
    timeline = Timeline()
    n = 3 * MAX_POINTS
    for i in range(n):
        now["ms"] += 10
        pool.submit(Claim(f"c{i}", "a", 1, 1, Energy(1000 + i, Grade.HwShunt), "k"))
        now["ms"] += 10
        pool.release(f"c{i}", Energy(500, Grade.HwShunt))
    pool.submit(Claim("late", "a", 1, 1, Energy(7000, Grade.HwShunt)))
    timeline.catch_up(pool)
    line = timeline.series(10, ["a", "b"])["a"]
    assert len(line) <= MAX_POINTS
    assert line[-1] == [now["ms"], pool.usage_of("a", 10).spent_uj]
    assert [p[0] for p in line] == sorted(p[0] for p in line)
    # Released in the next day, the claim's actual still counts in the day it was admitted.
    now["ms"] = 11 * DAY_MS + 5
    pool.release("late", Energy(3000, Grade.HwShunt))
    timeline.catch_up(pool)
    line = timeline.series(10, ["a"])["a"]
    assert line[-1] == [11 * DAY_MS + 5, pool.usage_of("a", 10).spent_uj]
    assert timeline.series(11, ["a"]) == {}
    assert timeline.periods(["a"]) == [10] and timeline.periods(["b"]) == []
    assert timeline.classes() == {"k": {"a"}}


def test_a_request_folds_only_a_short_tail_and_the_build_gives_the_whole_fold() -> None:
    """docs/reliability.md §16: past `most` entries a request folds nothing and is told the
    timeline is building; the build, in chunks, ends where one fold of everything does."""
    now = {"ms": 10 * DAY_MS}
    pool = Pool(
        team_tree(g=10**15), STEWARD, MemoryStore(), clock=lambda: now["ms"], period=Schedule("day")
    )
    for i in range(CHUNK + 7):
        now["ms"] += 10
        pool.submit(Claim(f"c{i}", "ab"[i % 2], 1, 1, Energy(1000 + i, Grade.HwShunt), "k"))
        pool.release(f"c{i}", Energy(400 + i * (i % 3), Grade.HwShunt))
    built = Timeline()
    with pytest.raises(TimelineBuilding) as told:
        built.catch_up(pool, most=CHUNK)
    assert (told.value.folded, told.value.length) == (0, pool.length)
    assert built.behind(pool) == pool.length and built.series(10, ["a", "b"]) == {}
    built.build_in_background(pool).join(timeout=30)
    assert built.behind(pool) == 0
    whole = Timeline()
    assert whole.catch_up(pool) == pool.length
    assert built.series(10, ["a", "b"]) == whole.series(10, ["a", "b"]) != {}
    assert built.classes() == whole.classes() and built.periods(["a"]) == whole.periods(["a"])
    # Then a request folds what is new, within its share.
    pool.submit(Claim("late", "a", 1, 1, Energy(7000, Grade.HwShunt)))
    assert built.catch_up(pool, most=CHUNK) == pool.length
    assert built.series(10, ["a"])["a"][-1][1] == pool.usage_of("a", 10).spent_uj


def test_running_claims_show_the_live_figures_of_the_claims_list_and_the_newest_acts(
    tmp_path: Path,
) -> None:
    """DESIGN.md §7: the dashboard's running claims are `GET /v1/claims?state=running`'s,
    figure for figure, unknown as null; its recent acts are `GET /v1/actions`'s; a tenant
    sees its own subtree's of each, under the ids it names them by."""
    run = serving(tmp_path / "d")
    deployment, serve = next(run)
    try:
        t = time.time_ns() // 1_000_000 - 60_000
        with serve.client(deployment.operator) as ops:
            for cid in ("seen", "quiet"):
                assert ops.post("/v1/claims", json=body(cid, "vision", MJ)).json()["verdict"] == (
                    "admit"
                )
            for at, uj in ((t, 0), (t + 60_000, 60 * 10**6)):
                sent = {"at_ms": at, "energy": {"uj": uj, "grade": "HwShunt"}, "every_ms": 30_000}
                sent["job"] = {"id": "77", "user": "ada", "name": "train.sh"}
                assert ops.post("/v1/claims/seen/readings", json=sent).status_code == 200
            assert ops.post("/v1/claims/seen/progress", json={"units": 4}).status_code == 200
        with serve.client(deployment.tenants["robotics"]) as robotics:
            assert robotics.post("/v1/claims", json=body("mine", "robotics", MJ)).json()[
                "verdict"
            ] == ("admit")
        with serve.client(deployment.operator) as ops:
            for cid in ("seen", "robotics/mine"):
                act = {"claim": cid, "kind": "notice", "outcome": "done", "job": "77"}
                assert ops.post("/v1/actions", json=act).status_code == 200, cid
            listed = ops.get("/v1/claims", params={"state": "running"}).json()["claims"]
            logged = ops.get("/v1/actions", params={"limit": 20}).json()["actions"]
        out = ops_get(serve, deployment.operator, "/v1/dashboard")
        assert [c["claim"] for c in out["running"]] == ["robotics/mine", "quiet", "seen"]
        assert out["running"] == sorted(listed, key=lambda c: -c["admitted_seq"])
        assert out["running_more"] == 0
        DashboardOut.model_validate(out)  # the published schema holds the new lists
        seen = out["running"][2]["live"]
        assert (seen["energy_uj"], seen["power_uw"], seen["units"]) == (60 * 10**6, 10**6, 4)
        assert seen["realised_cost"] == "15000000/1"
        assert seen["job"] == {
            "id": "77",
            "user": "ada",
            "name": "train.sh",
            "partition": None,
            "requeue": True,
        }
        quiet = out["running"][1]["live"]
        assert quiet["energy_uj"] is None and quiet["power_uw"] is None
        assert quiet["realised_cost"] is None and quiet["idle"]["reason"] == "no_reading"
        assert [(a["claim"], a["kind"]) for a in out["recent_actions"]] == [
            ("robotics/mine", "notice"),
            ("seen", "notice"),
        ]
        assert out["recent_actions"] == logged
        token = deployment.tenants["robotics"]
        mine = ops_get(serve, token, "/v1/dashboard")
        with serve.client(token) as robotics:
            own = robotics.get("/v1/claims", params={"state": "running"}).json()["claims"]
            own_log = robotics.get("/v1/actions", params={"limit": 20}).json()["actions"]
        assert [c["claim"] for c in mine["running"]] == ["mine"] and mine["running"] == own
        assert [a["claim"] for a in mine["recent_actions"]] == ["mine"]
        assert mine["recent_actions"] == own_log
    finally:
        run.close()


def test_the_running_list_is_bounded_newest_first_with_a_count_of_the_rest() -> None:
    now = {"ms": 10 * DAY_MS}
    pool = Pool(
        team_tree(g=10**15, gd=RUNNING_SHOWN + 10),
        STEWARD,
        MemoryStore(),
        clock=lambda: now["ms"],
        period=Schedule("day"),
    )
    for i in range(RUNNING_SHOWN + 3):
        now["ms"] += 10
        made = pool.submit(Claim(f"c{i}", "ab"[i % 2], 1, 1, Energy(1000, Grade.HwShunt)))
        assert made.verdict.verdict == "admit", i
    pool.release("c0", Energy(500, Grade.HwShunt))
    out = running(pool, Principal("ops", "operator"))
    listed = [c["claim"] for c in out["running"]]
    assert listed == [f"c{i}" for i in range(RUNNING_SHOWN + 2, 2, -1)]
    assert out["running_more"] == 2  # c1 and c2 run unlisted; c0 is released
    assert all(c["state"] == "running" and "live" in c for c in out["running"])
    # A tenant of `b` is told of b's claims only, under its own names, and counts only its own.
    mine = running(pool, Principal("b-team", "tenant:b"))
    assert {c["entitlement"] for c in mine["running"]} == {"b"}
    assert len(mine["running"]) == (RUNNING_SHOWN + 2) // 2 and mine["running_more"] == 0
