"""History judged by the tree in force then (docs/reliability.md §18).

- Every configuration put in force (`pool init`, a start with a changed `pool.toml`, a SIGHUP
  that changes the digest) is kept as a signed statement under `DIR/configs/`.
- `pool usage --period P`, `--history` and the HTTP answers judge a past period by the
  configuration in force at its end and name it; an interior node's history is its
  subtree's sums.
- A tampered statement fails `pool ledger verify`.
- Every reload is a line of `DIR/pool.reload.log` with what it changed, tokens by name only.

Real `pool serve` and `pool` processes; budget periods of a few seconds on the real clock.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from joulepool.deployment.config import CONFIG, read_config, write_config
from joulepool.deployment.configs import CONFIGS, RELOAD_LOG
from joulepool.periods import Schedule
from joulepool.tree import Entitlement, Tree
from tests.support.servers import (
    Deployment,
    admit_and_release,
    pool_cli,
    sighup,
    start_serve,
)

PERIOD_MS = 6_000


def rewrite(
    folder: Path, period: Schedule, guarantees: dict[str, int], added: tuple[Entitlement, ...] = ()
) -> None:
    """pool.toml with `period`, the given guarantees changed and `added` entitlements, the
    rest as it was."""
    config = read_config(folder / CONFIG)
    changed = [
        replace(e, guarantee_uj=guarantees[e.id]) if e.id in guarantees else e for e in config.tree
    ]
    tree = Tree([*changed, *added])
    (folder / CONFIG).unlink()
    write_config(folder / CONFIG, config.steward, tree, config.idle, period)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def wait_for_period_start(margin_ms: int = 300) -> int:
    """Sleep into the next period's first moments; its index."""
    now = now_ms()
    index = now // PERIOD_MS + 1
    time.sleep((index * PERIOD_MS + margin_ms - now) / 1000)
    return index


def usage_json(*args: str) -> dict[str, object]:
    done = pool_cli("usage", *args, "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert isinstance(out, dict)
    return out


def test_a_past_period_is_judged_by_the_guarantee_in_force_then_on_every_surface(
    tmp_path: Path,
) -> None:
    deployment = Deployment.create(tmp_path / "d")
    folder = deployment.folder
    period = Schedule("fixed", PERIOD_MS, 0)
    old_vision = read_config(folder / CONFIG).tree["vision"].guarantee_uj
    new_vision = old_vision * 2
    rewrite(folder, period, {})
    serve = start_serve(folder)
    try:
        # Started with a pool.toml whose digest differs from `pool init`'s: a second statement.
        assert sorted(p.name for p in (folder / CONFIGS).iterdir()) == [
            "00000000.cose",
            "00000001.cose",
        ]
        first = wait_for_period_start()
        admit_and_release(serve, deployment.operator, 0, 2, 1_000_000)
        assert now_ms() < (first + 1) * PERIOD_MS, "the claims missed their period: rerun"
        wait_for_period_start()
        tree_then = read_config(folder / CONFIG).tree
        audio = Entitlement("audio", 10**12, 1, 1, parent="research")
        rewrite(folder, period, {"vision": new_vision}, (audio,))
        said = sighup(serve)
        assert "configuration reloaded" in said, said
        assert "recorded as statement 2" in said, said

        # The CLI: the past period against the old guarantee, naming the configuration.
        past = usage_json(str(folder), "--period", str(first))
        rows = {r["id"]: r for r in past["entitlements"]}  # type: ignore[attr-defined]
        assert rows["vision"]["guarantee_uj"] == old_vision
        assert rows["vision"]["usage"]["spent_uj"] == 1_000_000
        named = past["configuration"]
        assert isinstance(named, dict)
        assert named["position"] == 1 and "pool serve start" in named["applied_by"]
        assert rows["vision"]["configuration"] == named
        # The period running: the new guarantee, named by the SIGHUP's statement.
        now = usage_json(str(folder))
        rows_now = {r["id"]: r for r in now["entitlements"]}  # type: ignore[attr-defined]
        assert rows_now["vision"]["guarantee_uj"] == new_vision
        assert now["configuration"]["position"] == 2  # type: ignore[index]
        assert "SIGHUP" in now["configuration"]["applied_by"]  # type: ignore[index]

        # The HTTP answers give the same figures and name the same configuration.
        with serve.client(deployment.operator) as http:
            one = http.get("/v1/entitlements/vision", params={"period": str(first)}).json()
            missing = http.get("/v1/entitlements/audio", params={"period": str(first)})
            periods = http.get("/v1/entitlements/vision/periods").json()["periods"]
            research = http.get("/v1/entitlements/research/periods").json()["periods"]
            deadline = time.monotonic() + 30
            # 503 while its timeline is still read after a start (docs/reliability.md §16).
            while (
                board := http.get("/v1/dashboard", params={"period": str(first)})
            ).status_code == 503:
                assert time.monotonic() < deadline, board.text
                time.sleep(0.2)
        assert one == rows["vision"]
        # An entitlement the tree of that period did not have: not in its table, and asked
        # for by name, refused naming the period, on both surfaces.
        assert "audio" not in rows and "audio" in rows_now
        assert missing.status_code == 422, missing.text
        assert str(first) in missing.json()["detail"]
        assert board.status_code == 200, board.text
        shown_rows = {r["id"]: r for r in board.json()["entitlements"]}
        assert shown_rows["vision"] == rows["vision"]
        cli_history = usage_json(str(folder), "--history", "vision")
        assert cli_history["periods"] == periods
        (row,) = [p for p in periods if p["label"] == str(first)]
        assert row["guarantee_uj"] == old_vision and row["committed_uj"] == 1_000_000
        assert row["configuration"] == named

        # An interior node's history: its subtree's sums, the same on both surfaces.
        assert usage_json(str(folder), "--history", "research")["periods"] == research
        (dept,) = [p for p in research if p["label"] == str(first)]
        assert dept["subtree"] is True and dept["charged_uj"] == 1_000_000
        assert (
            dept["guarantee_uj"]
            == sum(e.guarantee_uj for e in tree_then if e.id != "vision") + old_vision
        )

        # The reload log: the SIGHUP's diff, old → new.
        lines = [json.loads(x) for x in (folder / RELOAD_LOG).read_text().splitlines()]
        (hup,) = [x for x in lines if x["trigger"] == "SIGHUP"]
        assert hup["ok"] is True
        assert hup["config"] == {
            "entitlements_added": ["audio"],
            "entitlements_changed": {"vision": {"guarantee_uj": [old_vision, new_vision]}},
        }
        assert hup["configuration"]["position"] == 2
        # A refused reload is logged too, with nothing changed.
        good = (folder / CONFIG).read_text()
        (folder / CONFIG).write_text(good + "\n[bogus]\n")
        asked = pool_cli("reload", str(folder))
        assert asked.returncode == 1, asked.stdout + asked.stderr
        (folder / CONFIG).write_text(good)
        lines = [json.loads(x) for x in (folder / RELOAD_LOG).read_text().splitlines()]
        refused = lines[-1]
        assert refused["ok"] is False and refused["config"] == {}
        assert "bogus" in refused["message"]
        # `pool reload` said who it is; a bare signal's sender is unknown.
        assert refused["who"].startswith("SIGHUP from pool reload (pid ")
        assert "sender unknown" in hup["who"]
        assert refused["configuration"]["position"] == 2
        # A token added: logged by its name, never its hash.
        deployment.add_token("ci-bot", "tenant:robotics")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            lines = [json.loads(x) for x in (folder / RELOAD_LOG).read_text().splitlines()]
            watched = [x for x in lines if x["trigger"] == "tokens.toml changed"]
            if watched:
                break
            time.sleep(0.1)
        assert watched[-1]["tokens"] == {"added": ["ci-bot"]}
        assert watched[-1]["config"] == {}
        text = (folder / RELOAD_LOG).read_text()
        hashes = (folder / "tokens.toml").read_text()
        assert all(h not in text for h in hashes.split('"') if len(h) == 64)

        shown = pool_cli("config", "history", str(folder))
        assert shown.returncode == 0, shown.stderr
        assert f"vision.guarantee_uj {old_vision}→{new_vision}" in shown.stdout
        assert "added audio" in shown.stdout
        assert "tokens: added ci-bot" in shown.stdout
    finally:
        serve.kill()

    verified = pool_cli("ledger", "verify", str(folder), "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert json.loads(verified.stdout)["configurations"] == 3


def test_a_tampered_configuration_statement_fails_verification(tmp_path: Path) -> None:
    deployment = Deployment.create(tmp_path / "d")
    folder = deployment.folder
    statement = folder / CONFIGS / "00000000.cose"
    raw = statement.read_bytes()
    # The same length, another guarantee: the text and its digest no longer agree with the
    # signature.
    forged = raw.replace(b'"guarantee_uj":50', b'"guarantee_uj":90', 1)
    assert forged != raw
    statement.write_bytes(forged)
    done = pool_cli("ledger", "verify", str(folder), "--json")
    assert done.returncode == 1, done.stdout
    out = json.loads(done.stdout)
    assert out["error"] == "bad_config_statement" and out["index"] == 0
    assert "signature" in out["detail"]
    # A reader refuses the forged history too, naming it, never a traceback.
    used = pool_cli("usage", str(folder))
    assert used.returncode != 0
    assert "bad_config_statement" in used.stderr and "Traceback" not in used.stderr
    # Bytes that are no statement, and a name out of order: each refused at its position.
    statement.write_bytes(raw)
    (folder / CONFIGS / "00000001.cose").write_bytes(b"\xa1\x00" * 40)
    done = pool_cli("ledger", "verify", str(folder), "--json")
    out = json.loads(done.stdout)
    assert (done.returncode, out["error"], out["index"]) == (1, "bad_config_statement", 1)
    assert "not a configuration statement" in out["detail"]
    (folder / CONFIGS / "00000001.cose").rename(folder / CONFIGS / "00000007.cose")
    done = pool_cli("ledger", "verify", str(folder), "--json")
    out = json.loads(done.stdout)
    assert (out["error"], out["index"]) == ("bad_config_statement", 1)
    assert "expected 00000001.cose" in out["detail"]


def test_configuration_statements_verify_across_key_rotations(tmp_path: Path) -> None:
    deployment = Deployment.create(tmp_path / "d")
    folder = deployment.folder
    # A rotation before any entry retires the key that signed `pool init`'s statement.
    rotated = pool_cli("keys", "rotate", str(folder), "--json")
    assert rotated.returncode == 0, rotated.stderr
    assert json.loads(rotated.stdout)["from_seq"] == 0
    admitted = pool_cli(
        "admit", str(folder), "--id", "a", "--entitlement", "vision", "--estimate-uj", "5"
    )
    assert admitted.returncode == 0, admitted.stderr
    # A changed pool.toml taken in by the next writer, under the new key, from entry 1.
    rewrite(folder, Schedule("day"), {})
    again = pool_cli(
        "admit", str(folder), "--id", "b", "--entitlement", "vision", "--estimate-uj", "5"
    )
    assert again.returncode == 0, again.stderr
    verified = pool_cli("ledger", "verify", str(folder), "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    out = json.loads(verified.stdout)
    assert (out["rotations"], out["configurations"]) == (1, 2)
    shown = pool_cli("config", "history", str(folder), "--json")
    assert shown.returncode == 0, shown.stderr
    statements = json.loads(shown.stdout)["configurations"]
    assert [s["from_length"] for s in statements] == [0, 1]
    assert statements[1]["changes"] == {"period": [{"kind": "month"}, {"kind": "day"}]}
    # A reload log edited by hand or torn: its lines are named unreadable, never guessed.
    (folder / RELOAD_LOG).write_text('garbage\n{"at_ms": 1}\n')
    shown = pool_cli("config", "history", str(folder), "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["reloads"] == [{"unreadable": 1}, {"unreadable": 2}]


def test_a_signed_statement_past_the_ledger_or_going_back_fails_verification(
    tmp_path: Path,
) -> None:
    from joulepool.ledger.configs import seal_config
    from joulepool.ledger.keys import load_key_file

    deployment = Deployment.create(tmp_path / "d")
    folder = deployment.folder
    key = load_key_file(folder / "steward.key", require_secret=True)
    text = '{"entitlements":[],"period":{"kind":"none"}}'
    # Signed by the steward itself: only the order and the ledger's length refuse it.
    (folder / CONFIGS / "00000001.cose").write_bytes(
        seal_config(key, 1, 99, now_ms(), text, "a test")
    )
    done = pool_cli("ledger", "verify", str(folder), "--json")
    out = json.loads(done.stdout)
    assert (done.returncode, out["error"], out["index"]) == (1, "bad_config_statement", 1)
    assert "past the ledger's 0 entries" in out["detail"]
    (folder / CONFIGS / "00000001.cose").write_bytes(seal_config(key, 1, 0, 0, text, "a test"))
    done = pool_cli("ledger", "verify", str(folder), "--json")
    out = json.loads(done.stdout)
    assert (done.returncode, out["error"], out["index"]) == (1, "bad_config_statement", 1)
    assert "it goes back" in out["detail"]


def test_replicas_sharing_a_folder_record_a_configuration_once_and_never_overwrite(
    tmp_path: Path,
) -> None:
    from joulepool.deployment.configs import config_history, record_config
    from joulepool.deployment.keys import deployment_keys

    deployment = Deployment.create(tmp_path / "d")
    folder = deployment.folder
    key, keys = deployment_keys(folder)
    # Two replicas' views, each read before the other wrote anything.
    first, second = config_history(folder, keys), config_history(folder, keys)
    rewrite(folder, Schedule("day"), {})
    day = read_config(folder / CONFIG)
    made = record_config(folder, first, key, day, 0, now_ms(), "replica a")
    assert made is not None and made.position == 1
    # The second finds the same configuration already recorded by the first: nothing new.
    assert record_config(folder, second, key, day, 0, now_ms(), "replica b") is None
    rewrite(folder, Schedule("week"), {})
    week = read_config(folder / CONFIG)
    # The first's view is stale now too; it takes the next free name, never statement 2's.
    made = record_config(folder, second, key, week, 0, now_ms(), "replica b")
    assert made is not None and made.position == 2
    assert record_config(folder, first, key, week, 0, now_ms(), "replica a") is None
    verified = pool_cli("ledger", "verify", str(folder), "--json")
    assert verified.returncode == 0, verified.stdout
    assert json.loads(verified.stdout)["configurations"] == 3


def test_a_ledger_older_than_the_record_is_judged_by_the_first_statement_and_says_so(
    tmp_path: Path,
) -> None:
    import shutil

    from joulepool.deployment.config import KEY, LEDGER
    from joulepool.events import Admitted, Released
    from joulepool.grade import Energy, Grade
    from joulepool.ledger.cose import content_address
    from joulepool.ledger.keys import load_key_file
    from joulepool.ledger.rollback import HighWater
    from joulepool.stores.highwater import HighWaterFile, record_path
    from tests.support.ledgers import seal_all

    deployment = Deployment.create(tmp_path / "d")
    folder = deployment.folder
    # A deployment from before configuration statements: a claim in the last second of last
    # month (within max_clock_gap of now, so a writer may start), no record.
    shutil.rmtree(folder / CONFIGS)
    start = Schedule("month").period_at(now_ms()).start_ms
    assert start is not None
    at = start - 1000
    key = load_key_file(folder / KEY)
    energy = Energy(7, Grade.HwShunt)
    raws = seal_all(
        [Admitted("old", "vision", 1, 1, energy, 0, at), Released("old", energy, at)], key
    )
    (folder / LEDGER).write_bytes(b"".join(raws))
    record_path(folder / LEDGER).unlink(missing_ok=True)
    HighWaterFile.create(
        record_path(folder / LEDGER), HighWater(2, content_address(raws[-1]))
    ).close()

    before = usage_json(str(folder), "--history", "vision")["periods"]
    assert isinstance(before, list) and len(before) == 1
    assert "configuration" not in before[0]  # nothing records one: none is named
    # The first writer of this version records the configuration, from the ledger's length.
    admitted = pool_cli(
        "admit", str(folder), "--id", "new", "--entitlement", "vision", "--estimate-uj", "5"
    )
    assert admitted.returncode == 0, admitted.stderr
    after = usage_json(str(folder), "--history", "vision")["periods"]
    assert isinstance(after, list)
    old = after[0]
    assert old["charged_uj"] == 7
    assert old["configuration"]["position"] == 0
    assert old["configuration"]["from_length"] == 2
    assert old["configuration"]["recorded_after_period"] is True
    assert "recorded_after_period" not in after[-1]["configuration"]
    shown = pool_cli("usage", str(folder), "--history", "vision")
    assert "recorded after this period ended" in shown.stdout
