"""DESIGN.md §3, "budget periods": a live Pool, `pool serve` and replay give one answer.

The live tests run on a real clock over a `fixed` period of about a second, so they cross
several boundaries in a few seconds with no clock faked; only the test of a clock stepping
back hands Pool a clock, since no real clock can be made to step back.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from joulepool.admission import Admit, Queue
from joulepool.claim import Claim
from joulepool.conformance.execute import run_case
from joulepool.deployment.config import CONFIG, parse_config, read_config
from joulepool.errors import ClockFault, InvalidInput
from joulepool.grade import Energy, Grade
from joulepool.ledger.cose import open_envelope
from joulepool.ledger.entry import event_of
from joulepool.ledger.keys import load_key_file
from joulepool.ledger.replay import replay
from joulepool.periods import Schedule, utc_text
from joulepool.pool import BUDGET_REASONS, Pool, wall_clock_ms
from joulepool.stores.file import FileStore
from tests.support.builders import team_tree
from tests.support.ledgers import STEWARD
from tests.support.servers import Deployment, Serve, pool_cli, start_serve

LENGTH_MS = 1000


def fixed_now() -> Schedule:
    """A fixed period of LENGTH_MS whose epoch is a whole second a little before now."""
    return Schedule("fixed", LENGTH_MS, wall_clock_ms() // 1000 * 1000)


def exec_case(case: dict[str, Any]) -> dict[str, Any]:
    result = run_case(case)
    assert "error" not in result, result
    return result


def period_usage(entries: list[bytes], schedule: Schedule, at_ms: int) -> dict[str, Any]:
    """`pool exec period_usage` of a ledger at an instant (CONFORMANCE.md)."""
    return exec_case(
        {
            "op": "period_usage",
            "steward": STEWARD.kid,
            "public_key_hex": STEWARD.public_key.hex(),
            "ledger_hex": b"".join(entries).hex(),
            "period": schedule.to_json(),
            "at_ms": at_ms,
        }
    )


def claim_json(claim: Claim) -> dict[str, Any]:
    return {
        "id": claim.id,
        "entitlement": claim.entitlement,
        "gang_size": claim.gang_size,
        "devices_per_member": claim.devices_per_member,
        "estimate": claim.estimate.to_json(),
    }


def test_live_pool_across_boundaries_agrees_with_exec_decide_on_period_usage(
    tmp_path: Path,
) -> None:
    schedule = fixed_now()
    tree = team_tree(g=1000, gd=3)
    store = FileStore(tmp_path / "ledger.cbor", create=True)
    pool = Pool(tree, STEWARD, store, period=schedule)
    running: list[str] = []
    checked: list[tuple[int, dict[str, Any]]] = []
    deadline = time.monotonic() + 4.5
    n = 0
    while time.monotonic() < deadline:
        n += 1
        # A guess of 400 µJ in `a` (a guess never borrows), and an observed 1200 µJ in `b`
        # that must borrow from its siblings' unspent guarantees in this period.
        claim = (
            Claim(f"a-{n}", "a", 1, 1, Energy(400, Grade.Estimator))
            if n % 3
            else Claim(f"b-{n}", "b", 1, 1, Energy(1200, Grade.ModelBased))
        )
        before = list(store.entries())
        decision = pool.submit(claim)
        assert decision.at_ms is not None
        usage = period_usage(before, schedule, decision.at_ms)
        expected = exec_case(
            {
                "op": "decide",
                "tree": tree.to_json(),
                "usage": usage["usage"],
                "claim": claim_json(claim),
            }
        )
        assert decision.verdict.to_json() == expected, (claim.id, usage)
        if isinstance(decision.verdict, Queue) and decision.verdict.reason in BUDGET_REASONS:
            assert decision.period_end_ms == usage["period"]["end_ms"]
        else:
            assert decision.period_end_ms is None
        if isinstance(decision.verdict, Admit):
            running.append(claim.id)
        if n % 4 == 0 and running:
            # Its actual counts in the period it was admitted in, whenever it is released.
            pool.release(running.pop(0), Energy(300, Grade.HwShunt))
        checked.append((schedule.index_at(decision.at_ms), decision.to_json()))
        time.sleep(0.12)
    periods = sorted({index for index, _ in checked})
    assert len(periods) >= 4, "the test should cross at least three boundaries"
    # A claim queued on the period's budget and an admission in a later period of `a`.
    queued_at = [i for i, d in checked if d.get("reason") == "guarantee_exhausted_may_not_borrow"]
    assert queued_at, "some guess should exhaust a period's guarantee"
    assert any(i > queued_at[0] and d["verdict"] == "admit" for i, d in checked)
    # Restart: replay under the same schedule gives every period's figures the pool has.
    entries = list(store.entries())
    replayed = replay(entries, STEWARD.kid, STEWARD.public_key, tree, schedule=schedule).state
    for index in periods:
        start = schedule.period(index).start_ms
        assert start is not None
        from_exec = period_usage(entries, schedule, start)["usage"]
        for ent in ("a", "b"):
            live = pool.usage_of(ent, index)
            again = replayed.figures_in(ent, index)
            assert live == again
            assert from_exec[ent] == {
                "spent_uj": live.spent_uj,
                "held_devices": live.held_devices,
            }
    pool.close()


def test_writer_keeps_at_ms_non_decreasing_across_a_small_step_back(tmp_path: Path) -> None:
    # A clock that steps back 4 s after the first entry, within the 5 s the writer absorbs:
    # the only clock faked here, since a real one cannot be made to step back on demand.
    now = [50_000]
    schedule = Schedule("fixed", 10_000, 0)
    pool = Pool(
        team_tree(g=1000),
        STEWARD,
        FileStore(tmp_path / "l.cbor", create=True),
        clock=lambda: now[0],
        period=schedule,
    )
    pool.submit(Claim("x", "a", 1, 1, Energy(600, Grade.HwShunt)))
    now[0] = 46_000
    later = pool.submit(Claim("y", "a", 1, 1, Energy(600, Grade.HwShunt)))
    # The second claim is decided at 50 000, in the first one's period [50 000, 60 000), not
    # in the closed period [40 000, 50 000): both count there, and it borrows 200 µJ.
    assert later.at_ms == 50_000
    assert later.verdict.to_json()["borrowed_uj"] == 200
    assert pool.usage_of("a", 5).spent_uj == 1200
    at = [event_of(open_envelope(raw).core, STEWARD.kid).at_ms for raw in pool.entries()]
    assert at == [50_000, 50_000]
    pool.close()


def test_writer_appends_nothing_when_the_clock_is_far_behind_the_ledger(tmp_path: Path) -> None:
    # 10 s back is beyond the absorbed step: reported, naming both instants, never clamped.
    now = [50_000]
    pool = Pool(
        team_tree(g=1000),
        STEWARD,
        FileStore(tmp_path / "l.cbor", create=True),
        clock=lambda: now[0],
        period=Schedule("fixed", 10_000, 0),
    )
    pool.submit(Claim("x", "a", 1, 1, Energy(600, Grade.HwShunt)))
    now[0] = 40_000
    with pytest.raises(ClockFault) as refused:
        pool.submit(Claim("y", "a", 1, 1, Energy(600, Grade.HwShunt)))
    assert refused.value.code == "clock_behind_ledger"
    assert (refused.value.clock_ms, refused.value.ledger_ms) == (40_000, 50_000)
    assert "(40000 ms)" in str(refused.value) and "(50000 ms)" in str(refused.value)
    assert pool.length == 1
    pool.close()


def test_period_end_ms_is_where_the_period_renews() -> None:
    month = Schedule("month")
    at = int(datetime(2026, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC).timestamp() * 1000)
    end = month.period_at(at).end_ms
    assert end == int(datetime(2027, 1, 1, tzinfo=UTC).timestamp()) * 1000
    assert end is not None
    assert utc_text(end) == "2027-01-01 00:00 UTC"


@pytest.mark.parametrize(
    ("kind", "label"),
    [("month", "2026-11"), ("week", "2026-W48"), ("day", "2026-11-30"), ("week", "2026-W53")],
)
def test_period_labels_name_the_period_they_parse_to(kind: str, label: str) -> None:
    schedule = Schedule(kind)  # type: ignore[arg-type]
    if label == "2026-W53":  # 2026 has 53 ISO weeks (it starts on a Thursday)
        assert schedule.label(schedule.parse_label(label)) == label
        return
    index = schedule.parse_label(label)
    assert schedule.label(index) == label
    start = schedule.period(index).start_ms
    assert start is not None
    assert (
        utc_text(start)
        == {"month": "2026-11-01", "week": "2026-11-23", "day": "2026-11-30"}[kind] + " 00:00 UTC"
    )


@pytest.mark.parametrize(
    ("kind", "label"),
    [
        ("month", "2026-13"),
        ("month", "2026-1"),
        ("week", "2027-W53"),
        ("week", "2026-W00"),
        ("day", "2026-02-29"),
        ("day", "2026-11-31"),
        ("month", "2026-11\n"),
        ("none", "2026-11"),
    ],
)
def test_bad_period_labels_are_invalid_input(kind: str, label: str) -> None:
    with pytest.raises(InvalidInput) as info:
        Schedule(kind).parse_label(label, "--period")  # type: ignore[arg-type]
    assert info.value.field == "--period"


def test_fixed_periods_are_named_by_their_index() -> None:
    schedule = Schedule("fixed", 1000, 10_000)
    assert schedule.parse_label("-1") == -1
    assert schedule.period(-1).start_ms == 9_000
    assert schedule.label(schedule.index_at(10_999)) == "0"


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ('[period]\nkind = "fortnight"\n', "period.kind"),
        ('[period]\nkind = "fixed"\nepoch_ms = 0\n', "period.length_ms"),
        ('[period]\nkind = "fixed"\nlength_ms = 0\nepoch_ms = 0\n', "period.length_ms"),
        ('[period]\nkind = "fixed"\nlength_ms = 1.5\nepoch_ms = 0\n', "period.length_ms"),
        ('[period]\nkind = "month"\nepoch_ms = 0\n', "period.epoch_ms"),
        ('[period]\nkind = "month"\nstart = 1\n', "period.start"),
        ("period = 3\n", "period"),
    ],
)
def test_a_bad_period_table_names_the_file_and_the_field(table: str, field: str) -> None:
    import tomllib

    doc = tomllib.loads(table + '\n[pool]\nsteward = "s"\n')
    with pytest.raises(InvalidInput) as info:
        parse_config(doc, "/etc/pool/pool.toml")
    assert info.value.field == f"/etc/pool/pool.toml: {field}"


def test_pool_init_writes_a_monthly_period_and_its_choices(tmp_path: Path) -> None:
    folder = tmp_path / "d"
    assert pool_cli("init", str(folder)).returncode == 0
    text = (folder / CONFIG).read_text()
    assert '[period]\nkind = "month"' in text
    for choice in ('"none"', '"day"', '"week"', '"month"', '"fixed"', "length_ms", "epoch_ms"):
        assert choice in text
    assert read_config(folder / CONFIG).period == Schedule("month")


def use_period(folder: Path, table: str) -> None:
    path = folder / CONFIG
    path.write_text(path.read_text().replace('[period]\nkind = "month"\n', table))


def cli_json(*args: str, ok: tuple[int, ...] = (0,)) -> Any:
    done = pool_cli(*args, "--json")
    assert done.returncode in ok, done.stderr
    return json.loads(done.stdout)


def test_cli_queue_says_when_the_month_renews_and_usage_shows_the_month(tmp_path: Path) -> None:
    folder = tmp_path / "d"
    pool_cli("init", str(folder))
    mj = 10**12
    args = ["admit", str(folder), "--entitlement", "robotics", "--estimate-uj", str(15 * mj)]
    assert cli_json(*args, "--id", "r-1")["verdict"] == "admit"
    queued = cli_json(*args, "--id", "r-2", ok=(3,))
    now = datetime.now(UTC)
    first = datetime(now.year + now.month // 12, now.month % 12 + 1, 1, tzinfo=UTC)
    assert queued["reason"] == "guarantee_exhausted_may_not_borrow"
    assert queued["period_end_ms"] == int(first.timestamp()) * 1000
    human = pool_cli(*args, "--id", "r-3")
    assert human.returncode == 3
    assert f"fits from {first:%Y-%m-%d} 00:00 UTC, when the month's guarantee renews" in " ".join(
        human.stdout.split()
    )
    usage = cli_json("usage", str(folder))
    assert usage["label"] == f"{now:%Y-%m}"
    assert usage["period"]["end_ms"] == queued["period_end_ms"]
    robotics = next(e for e in usage["entitlements"] if e["id"] == "robotics")
    assert robotics["usage"]["committed_uj"] == 15 * mj
    assert robotics["usage"]["remaining_uj"] == 5 * mj
    assert robotics["usage"]["period"] == usage["period"]
    # A month with no claims: nothing spent there, but the devices running now are held.
    past = cli_json("usage", str(folder), "--period", "2020-02")
    robotics = next(e for e in past["entitlements"] if e["id"] == "robotics")
    assert (robotics["usage"]["spent_uj"], robotics["usage"]["held_devices"]) == (0, 1)
    history = cli_json("usage", str(folder), "--history", "robotics")
    assert [(p["label"], p["charged_uj"], p["reserved_uj"]) for p in history["periods"]] == [
        (f"{now:%Y-%m}", 0, 15 * mj)
    ]
    bad = pool_cli("usage", str(folder), "--period", "2026-13")
    assert bad.returncode == 1
    assert "--period" in bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Deployment, Serve, Schedule]]:
    deployment = Deployment.create(tmp_path / "d")
    schedule = fixed_now()
    use_period(
        deployment.folder,
        f'[period]\nkind = "fixed"\nlength_ms = {LENGTH_MS}\nepoch_ms = {schedule.epoch_ms}\n',
    )
    serve = start_serve(deployment.folder)
    try:
        yield deployment, serve, schedule
    finally:
        serve.kill()


def test_pool_serve_reports_what_replay_derives_across_boundaries(
    served: tuple[Deployment, Serve, Schedule],
) -> None:
    deployment, serve, schedule = served
    mj = 10**12
    pub = load_key_file(deployment.folder / "steward.pub", require_secret=False)
    with serve.client(deployment.operator) as http:
        seen = set()
        deadline = time.monotonic() + 3.2
        n = 0
        while time.monotonic() < deadline:
            n += 1
            body = {
                "id": f"r-{n}",
                "entitlement": "robotics",
                "gang_size": 1,
                "devices_per_member": 1,
                "estimate": {"uj": 8 * mj, "grade": "Estimator"},
            }
            answer = http.post("/v1/claims", json=body).json()
            if answer["verdict"] == "queue":
                assert answer["reason"] == "guarantee_exhausted_may_not_borrow"
                renews = answer["period_end_ms"]
                assert (renews - schedule.epoch_ms) % LENGTH_MS == 0
            else:
                http.post(
                    f"/v1/claims/r-{n}/release", json={"actual": {"uj": mj, "grade": "HwShunt"}}
                )
            one = http.get("/v1/entitlements/robotics").json()
            start = one["usage"]["period"]["start_ms"]
            seen.add(start)
            ledger = http.get("/v1/ledger/entries").content
            derived = exec_case(
                {
                    "op": "period_usage",
                    "steward": pub.kid,
                    "public_key_hex": pub.public_key.hex(),
                    "ledger_hex": ledger.hex(),
                    "period": schedule.to_json(),
                    "at_ms": start,
                }
            )
            assert derived["period"] == one["usage"]["period"]
            assert derived["usage"]["robotics"]["spent_uj"] == one["usage"]["spent_uj"]
            assert derived["usage"]["robotics"]["held_devices"] == one["usage"]["held_devices"]
            time.sleep(0.1)
        assert len(seen) >= 3
        periods = http.get("/v1/entitlements/robotics/periods").json()
        assert periods["period"] == schedule.to_json()
        assert sum(p["claims"] for p in periods["periods"]) >= 3
        label = periods["periods"][0]["label"]
        past = http.get("/v1/entitlements/robotics", params={"period": label}).json()
        assert past["usage"]["charged_uj"] == periods["periods"][0]["charged_uj"]
        assert http.get("/v1/entitlements/robotics", params={"period": "x"}).status_code == 422
        metrics = http.get("/metrics").text
        assert "pool_period_end_timestamp_seconds" in metrics
        assert 'pool_remaining_joules{entitlement="robotics",parent="research"}' in metrics


def test_a_bad_period_on_sighup_keeps_the_old_configuration(
    served: tuple[Deployment, Serve, Schedule],
) -> None:
    import signal

    deployment, serve, _ = served
    path = deployment.folder / CONFIG
    path.write_text(path.read_text().replace('kind = "fixed"', 'kind = "fortnight"'))
    serve.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while "reload refused" not in serve.output() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert f"{path}: period.kind" in serve.output()
    with serve.client(deployment.operator) as http:
        period = http.get("/v1/entitlements/vision").json()["usage"]["period"]
        assert period["end_ms"] - period["start_ms"] == LENGTH_MS


def test_pool_exec_period_usage_is_a_command() -> None:
    case = {
        "op": "period_usage",
        "steward": STEWARD.kid,
        "public_key_hex": STEWARD.public_key.hex(),
        "ledger_hex": "",
        "period": {"kind": "none"},
        "at_ms": 0,
    }
    done = subprocess.run(
        [sys.executable, "-m", "joulepool", "exec"],
        input=json.dumps(case),
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(done.stdout) == {
        "ok": True,
        "period": {"start_ms": None, "end_ms": None},
        "usage": {},
        "open_claims": [],
    }
