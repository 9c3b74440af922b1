"""Reloads that never stop the service (docs/reliability.md §15).

- A SIGHUP that changes `[period]` replays the ledger off the event loop: `/healthz` and
  decisions are answered meanwhile, under the configuration in force, and the new one is
  put in force in one step; SIGHUPs during the replay make one more reload, not one each.
- Tokens are their own reload: `tokens.toml` is watched (no SIGHUP), a file missing or
  listing no token while tokens are in force is refused and every token stays, a broken
  `pool.toml` never holds a revoke back, and a token's expiry is judged on a clock no
  earlier than the ledger's last entry.
- `pool reload DIR` signals the running service and says what it did with the files (exit 0
  or 1 with the refusal); `/metrics` exports `pool_config_last_reload_successful`.

Real `pool serve` and `pool` processes; ledgers sealed with the deployment's own key.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from joulepool.deployment.config import CONFIG, KEY, LEDGER, TOKENS, read_config, write_config
from joulepool.events import Admitted, Event, Released
from joulepool.grade import Energy, Grade
from joulepool.ledger.cose import content_address
from joulepool.ledger.keys import load_key_file
from joulepool.ledger.rollback import HighWater
from joulepool.periods import Schedule
from joulepool.service.tokens import add_token
from joulepool.stores.highwater import HighWaterFile, record_path
from tests.support.faults import Figures, claim
from tests.support.ledgers import seal_all
from tests.support.servers import Deployment, Serve, pool_cli, start_serve, wait_ready

DAY_MS = 86_400_000
RELEASE = {"actual": {"uj": 1, "grade": "HwShunt"}}
CLAIMS = 30_000
"""Claims in the served ledger (two entries each): enough that a replay under a new period
takes seconds on a shared 2-core machine, which is what the probes must not notice."""

_figures = Figures("reloads")


@pytest.fixture(scope="module", autouse=True)
def _record_figures() -> Iterator[None]:
    yield
    _figures.rounds = max(_figures.rounds, 1)
    _figures.record()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def seed_ledger(deployment: Deployment, claims: int, first_ms: int, step_ms: int) -> int:
    """Replace the deployment's empty ledger by `claims` admitted and released claims of
    vision, sealed with its own key from `first_ms` on, `step_ms` apart; the entry count."""
    key = load_key_file(deployment.folder / KEY)
    events: list[Event] = []
    for i in range(claims):
        at = first_ms + i * step_ms
        events.append(Admitted(f"old-{i}", "vision", 1, 1, Energy(1, Grade.HwShunt), 0, at))
        events.append(Released(f"old-{i}", Energy(1, Grade.HwShunt), at))
    raws = seal_all(events, key)
    ledger = deployment.folder / LEDGER
    ledger.write_bytes(b"".join(raws))
    record = record_path(ledger)
    record.unlink(missing_ok=True)
    HighWaterFile.create(record, HighWater(len(raws), content_address(raws[-1]))).close()
    return len(raws)


def rewrite_period(folder: Path, period: Schedule) -> None:
    config = read_config(folder / CONFIG)
    (folder / CONFIG).unlink()
    write_config(folder / CONFIG, config.steward, config.tree, config.idle, period)


def period_ms(serve: Serve, token: str) -> int:
    with serve.client(token) as http:
        period = http.get("/v1/entitlements/vision").json()["usage"]["period"]
    return int(period["end_ms"]) - int(period["start_ms"])


def said(serve: Serve, words: str) -> int:
    return serve.output().count(words)


def wait_for(predicate: object, timeout_s: float, serve: Serve) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, serve.output()[-3000:]
        time.sleep(0.05)


def reload_metrics(serve: Serve, token: str) -> dict[str, float]:
    with serve.client(token) as http:
        text = http.get("/metrics").text
    return {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("pool_config_last_reload")
    }


# -- a [period] change is replayed off the event loop -----------------------------------------


def test_a_period_change_is_replayed_while_the_service_answers_under_the_old_one(
    tmp_path: Path,
) -> None:
    deployment = Deployment.create(tmp_path / "d")
    spare = deployment.add_token("spare", "operator")
    # Claims a minute apart over the last three weeks: monthly and daily periods group them
    # differently, so the replay is real work.
    entries = seed_ledger(deployment, CLAIMS, now_ms() - 21 * DAY_MS, 60_000)
    serve = start_serve(deployment.folder)
    wait_ready(serve, 120)
    ops = deployment.operator
    probes: list[tuple[float, float]] = []  # (started, seconds)
    decisions: list[tuple[float, float, int]] = []
    seen: list[tuple[float, int]] = []  # (asked, the period's length in force)
    stop = threading.Event()

    def probe() -> None:
        with httpx.Client(base_url=serve.url, timeout=30) as http:
            while not stop.is_set():
                began = time.monotonic()
                assert http.get("/healthz").status_code == 200
                probes.append((began, time.monotonic() - began))
                time.sleep(0.05)

    def decide() -> None:
        # Admissions and releases through the commit path while the replay runs.
        with serve.client(ops) as http:
            i = 0
            while not stop.is_set():
                began = time.monotonic()
                r = http.post("/v1/claims", json=claim(f"during-{i}", uj=1))
                decisions.append((began, time.monotonic() - began, r.status_code))
                assert r.json()["verdict"] == "admit", r.text
                began = time.monotonic()
                r = http.post(f"/v1/claims/during-{i}/release", json=RELEASE)
                decisions.append((began, time.monotonic() - began, r.status_code))
                began = time.monotonic()
                usage = http.get("/v1/entitlements/vision").json()["usage"]
                seen.append((began, usage["period"]["end_ms"] - usage["period"]["start_ms"]))
                i += 1
                time.sleep(0.1)

    try:
        assert period_ms(serve, ops) != DAY_MS
        rewrite_period(deployment.folder, Schedule("day"))
        workers = [threading.Thread(target=probe), threading.Thread(target=decide)]
        for w in workers:
            w.start()
        time.sleep(0.3)
        sent = time.monotonic()
        serve.proc.send_signal(signal.SIGHUP)
        # Two more while the first replays: coalesced into one more reload, not two.
        time.sleep(0.3)
        serve.proc.send_signal(signal.SIGHUP)
        serve.proc.send_signal(signal.SIGHUP)
        # A revoke while the replay runs is in force within a second, not behind it.
        revoked = pool_cli("token", "revoke", str(deployment.folder), "spare")
        assert revoked.returncode == 0, revoked.stderr
        revoked_at = time.monotonic()
        assert said(serve, "configuration reloaded") == 0, "the replay ended before the revoke"
        with serve.client(spare) as http:
            while http.get("/v1/entitlements").status_code != 401:
                assert time.monotonic() < revoked_at + 1.5, serve.output()[-2000:]
                time.sleep(0.02)
        revoke_s = time.monotonic() - revoked_at
        replaying = said(serve, "configuration reloaded") == 0
        wait_for(lambda: said(serve, "configuration reloaded") >= 1, 120, serve)
        replayed_s = time.monotonic() - sent
        wait_for(lambda: said(serve, "configuration reloaded") >= 2, 60, serve)
        time.sleep(1.5)
        stop.set()
        for w in workers:
            w.join(timeout=60)
        assert said(serve, "configuration reloaded") == 2, serve.output()[-3000:]
        during = [s for began, s in probes if sent <= began <= sent + replayed_s]
        answered = [s for began, s, _ in decisions if sent <= began <= sent + replayed_s]
        codes = {code for _, _, code in decisions}
        print(
            f"RELOAD entries={entries} replay_s={replayed_s:.2f} probes={len(during)} "
            f"probe_max_s={max(during, default=0):.3f} decisions={len(answered)} "
            f"decision_max_s={max(answered, default=0):.3f} revoke_s={revoke_s:.2f} "
            f"revoke_during_replay={replaying}"
        )
        # The replay took visible time, and neither the loop nor the commit path waited on it.
        assert replayed_s > 1.5, replayed_s
        assert len(during) >= 5 and max(during) < 1.0, during
        assert max(s for _, s in probes) < 1.0, probes  # one begun before the SIGHUP too
        assert len(answered) >= 3 and max(answered) < 1.0, answered
        assert codes == {200}, decisions
        assert replaying, "the revoke waited for the replay"
        # The old period answered until the switch, the new one from it: never both ways.
        lengths = [length for _, length in seen]
        month = lengths[0]
        assert month > DAY_MS and lengths[-1] == DAY_MS, lengths
        switch = lengths.index(DAY_MS)
        assert set(lengths[switch:]) == {DAY_MS} and set(lengths[:switch]) == {month}, lengths
        assert sum(1 for asked, _ in seen[:switch] if asked > sent + 0.5) >= 3, seen
        # Decided under the new period from the switch on; what was admitted meanwhile is
        # in the ledger and in the usage, none lost to the switch.
        assert period_ms(serve, ops) == DAY_MS
        with serve.client(ops) as http:
            r = http.post("/v1/claims", json=claim("after", uj=1))
            assert r.json()["verdict"] == "admit", r.text
            usage = http.get("/v1/entitlements/vision").json()["usage"]
            assert usage["running_claims"] == 1, usage
            # Claims released during the replay are known released after the switch.
            first, last = "during-0", f"during-{len(decisions) // 2 - 1}"
            for cid in (first, last, "old-7"):
                again = http.post(f"/v1/claims/{cid}/release", json=RELEASE)
                assert again.status_code == 409, again.text
                assert again.json()["error"] == "already_released", again.text
                r = http.post("/v1/claims", json=claim(cid, uj=1))
                assert (r.status_code, r.json()["error"]) == (409, "claim_exists"), r.text
            assert http.get("/v1/ledger").json()["length"] == entries + len(decisions) + 1
        done = pool_cli("ledger", "verify", str(deployment.folder))
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Traceback" not in serve.output()
        _figures.entries_checked += entries + len(decisions) + 1
        _figures.extra["period_replay_s"] = round(replayed_s, 2)
        _figures.extra["healthz_max_s_during_replay"] = round(max(during), 3)
        _figures.extra["decision_max_s_during_replay"] = round(max(answered), 3)
        _figures.extra["revoke_s_during_replay"] = round(revoke_s, 2)
    finally:
        stop.set()
        serve.kill()


# -- tokens, their own reload ----------------------------------------------------------------


def test_a_tokens_file_emptied_or_removed_is_refused_and_every_token_stays(
    tmp_path: Path,
) -> None:
    deployment = Deployment.create(tmp_path / "d")
    serve = start_serve(deployment.folder)
    path = deployment.folder / TOKENS
    good = path.read_bytes()
    ops = deployment.operator
    try:
        assert reload_metrics(serve, ops) == {"pool_config_last_reload_successful": 1.0}
        for spoil, words in (("empty", "lists no token"), ("missing", "missing")):
            seen = said(serve, words)
            if spoil == "empty":
                path.write_bytes(b"")
            else:
                path.unlink()
            # Watched: refused by itself, with no SIGHUP.
            wait_for(lambda w=words, s=seen: said(serve, w) > s, 5, serve)
            assert "reload refused, keeping the old tokens" in serve.output()
            for token in (ops, *deployment.tenants.values()):
                with serve.client(token) as http:
                    assert http.get("/v1/entitlements").status_code == 200
            assert reload_metrics(serve, ops)["pool_config_last_reload_successful"] == 0
            # `pool reload` says so too, and exits non-zero.
            done = pool_cli("reload", str(deployment.folder))
            assert done.returncode == 1, done.stdout + done.stderr
            assert "reload_refused" in done.stderr and words in done.stderr, done.stderr
            _figures.faults_injected += 1
        path.write_bytes(good)
        path.chmod(0o600)
        done = pool_cli("reload", str(deployment.folder))
        assert done.returncode == 0 and "reloaded" in done.stdout, done.stdout + done.stderr
        metrics = reload_metrics(serve, ops)
        assert metrics["pool_config_last_reload_successful"] == 1
        assert abs(metrics["pool_config_last_reload_success_timestamp_seconds"] - time.time()) < 60
        assert "Traceback" not in serve.output()
    finally:
        serve.kill()


def test_a_revoke_is_not_held_back_by_a_broken_pool_toml(tmp_path: Path) -> None:
    deployment = Deployment.create(tmp_path / "d")
    spare = deployment.add_token("spare", "operator")
    serve = start_serve(deployment.folder)
    config = deployment.folder / CONFIG
    try:
        config.write_text(config.read_text() + "\n[[entitlement]]\nid = 5\n")
        done = pool_cli("reload", str(deployment.folder))
        assert done.returncode == 1 and f"{config}" in done.stderr, done.stderr
        revoked = pool_cli("token", "revoke", str(deployment.folder), "spare")
        assert revoked.returncode == 0, revoked.stderr
        # By SIGHUP too: the tokens are taken, pool.toml is refused, each on its own.
        done = pool_cli("reload", str(deployment.folder))
        assert done.returncode == 1 and "keeping the old configuration" in done.stderr
        with serve.client(spare) as http:
            assert http.get("/v1/entitlements").status_code == 401
        with serve.client(deployment.operator) as http:
            assert http.get("/v1/entitlements").status_code == 200
        # The tokens taken in do not hide the pool.toml still refused.
        metrics = reload_metrics(serve, deployment.operator)
        assert metrics["pool_config_last_reload_successful"] == 0, metrics
        _figures.faults_injected += 1
    finally:
        serve.kill()


def test_pool_reload_needs_a_running_service(tmp_path: Path) -> None:
    deployment = Deployment.create(tmp_path / "d")
    done = pool_cli("reload", str(deployment.folder))
    assert done.returncode == 1 and "no pool serve is running" in done.stderr, done.stderr
    serve = start_serve(deployment.folder)
    pid_file = deployment.folder / "pool.serve.pid"
    assert pid_file.read_text().strip() == str(serve.proc.pid)
    serve.kill(signal.SIGTERM)
    assert not pid_file.exists()
    # A pid file left by a killed service names no running process: refused, not hung.
    pid_file.write_text(f"{serve.proc.pid}\n")
    done = pool_cli("reload", str(deployment.folder))
    assert done.returncode == 1 and "not running" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    # Nor is a process that took the number since: it is never sent the signal.
    other = subprocess.Popen(["sleep", "60"])
    try:
        pid_file.write_text(f"{other.pid}\n")
        done = pool_cli("reload", str(deployment.folder))
        assert done.returncode == 1 and "not running pool serve" in done.stderr, done.stderr
        time.sleep(0.2)
        assert other.poll() is None  # SIGHUP would have ended it
    finally:
        other.kill()
        other.wait()


def test_an_expired_token_stays_expired_with_the_clock_behind_the_ledger(tmp_path: Path) -> None:
    deployment = Deployment.create(tmp_path / "d")
    # The last entry is dated an hour ahead of this clock: the clock is behind the ledger.
    seed_ledger(deployment, 3, now_ms() + 3_600_000, 1)
    tree = read_config(deployment.folder / CONFIG).tree
    expires = datetime.now(UTC) + timedelta(minutes=30)  # past, by the ledger's time
    lapsed = add_token(deployment.folder / TOKENS, "lapsed", "operator", tree, expires)
    fresh = add_token(
        deployment.folder / TOKENS, "fresh", "operator", tree, expires + timedelta(hours=2)
    )
    serve = start_serve(deployment.folder, wait=False)
    try:
        # /readyz is 503 clock_behind_ledger, by design: wait for the replay through a read.
        def replayed() -> bool:
            try:
                with serve.client(deployment.operator) as http:
                    return http.get("/v1/entitlements").status_code == 200
            except httpx.TransportError:
                return False

        wait_for(replayed, 60, serve)
        with serve.client(lapsed) as http:
            r = http.get("/v1/entitlements")
            assert (r.status_code, r.json()["error"]) == (401, "unauthorized"), r.text
        with serve.client(fresh) as http:
            assert http.get("/v1/entitlements").status_code == 200
        assert os.environ.get("FAKETIME") is None
        _figures.faults_injected += 1
    finally:
        serve.kill()
