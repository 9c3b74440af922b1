"""PostgreSQL restarted, crashed, unreachable or cut off mid-append, through `pool serve`
(DESIGN.md §6).

A client gets an error or a verdict whose entry is committed, never a verdict that is not;
no entry is written twice; each replica recovers by itself, with no restart. A real server
(tests/support/pg.py) and a real relay that cuts the connection around a COMMIT; nothing mocked.
Store- and Pool-level counterparts: tests/postgres/test_store.py
(test_a_commit_lost_before_the_server_got_it_is_unknown_then_absent,
test_a_commit_whose_answer_was_lost_landed_exactly_once,
test_a_pool_whose_commit_outcome_is_unknown_never_answers_falsely,
test_a_restart_between_sections_reconnects_by_itself).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from joulepool.events import Admitted
from joulepool.ledger.cose import open_envelope
from joulepool.ledger.entry import event_of
from joulepool.ledger.keys import load_key_file
from joulepool.stores.postgres import PostgresStore
from tests.support.faults import Figures, Told, audit, claim, drive, roomy, usage_matches
from tests.support.pg import FaultProxy, PgServer, pg_dsn, pg_ledger, pg_proxy, pg_server
from tests.support.servers import Deployment, Serve, start_serve

__all__ = ["pg_dsn", "pg_ledger", "pg_proxy", "pg_server"]

pytestmark = pytest.mark.postgres

# What a store fault may be answered with: an error that says nothing was decided, or
# that the outcome is unknown. Never a 500, never a verdict.
STORE_ERRORS = {"store_unavailable", "commit_outcome_unknown", "store_error", "not_ready"}

_outcomes: dict[str, float] = {}


def ledger_in_db(dsn: str, ledger: str) -> list[bytes]:
    """The ledger as committed in PostgreSQL, read on a connection of its own."""
    with PostgresStore(dsn, ledger=ledger) as store:
        return list(store.entries())


def admissions_of(entries: list[bytes], steward: str, cid: str) -> list[int]:
    return [
        i
        for i, raw in enumerate(entries)
        if isinstance(e := event_of(open_envelope(raw).core, steward), Admitted) and e.claim == cid
    ]


def until_admitted(http: httpx.Client, cid: str, deadline_s: float = 30) -> dict[str, object]:
    """Submit until a verdict comes: the replica must recover by itself, without a restart."""
    deadline = time.monotonic() + deadline_s
    while True:
        r = http.post("/v1/claims", json=claim(cid))
        if r.status_code == 200:
            body: dict[str, object] = r.json()
            return body
        assert r.status_code == 503 and r.json()["error"] in STORE_ERRORS, r.text
        assert time.monotonic() < deadline, f"the replica did not recover: {r.text}"
        time.sleep(0.2)


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_commit_cut_mid_append_is_an_error_never_a_false_verdict(
    tmp_path: Path, pg_proxy: FaultProxy, pg_dsn: str, pg_ledger: str, when: str
) -> None:
    deployment = Deployment.create(tmp_path / "d")
    key = load_key_file(deployment.folder / "steward.pub")
    serve = start_serve(deployment.folder, "--postgres", pg_proxy.dsn(), "--ledger", pg_ledger)
    try:
        with serve.client(deployment.operator) as ops:
            assert ops.post("/v1/claims", json=claim("j0")).json()["seq"] == 0
            pg_proxy.cut_next_commit(when)
            r = ops.post("/v1/claims", json=claim("j1"))
            assert pg_proxy.cuts == [f"{when} commit"]
            assert (r.status_code, r.json()["error"]) == (503, "commit_outcome_unknown"), r.text
            in_db = ledger_in_db(pg_dsn, pg_ledger)
            landed = admissions_of(in_db, key.kid, "j1")
            assert landed == ([] if when == "before" else [1])
            # The replica learns the truth from the ledger, not from a guess.
            state = ops.get("/v1/claims/j1")
            again = ops.post("/v1/claims", json=claim("j1"))
            if when == "before":
                assert state.status_code == 404
                assert again.json()["verdict"] == "admit" and again.json()["seq"] == 1
            else:
                assert state.json()["admitted_seq"] == 1
                assert (again.status_code, again.json()["error"]) == (409, "claim_exists")
            assert ops.post("/v1/claims", json=claim("j2")).json()["seq"] == 2
        entries = ledger_in_db(pg_dsn, pg_ledger)
        assert len(entries) == 3
        assert admissions_of(entries, key.kid, "j1") == [1]  # written once, whatever happened
    finally:
        serve.kill()
    _outcomes[f"cut_{when}_entries"] = len(entries)


def test_an_unreachable_server_is_an_error_and_the_replica_recovers_by_itself(
    tmp_path: Path, pg_server: PgServer, pg_proxy: FaultProxy, pg_dsn: str, pg_ledger: str
) -> None:
    deployment = Deployment.create(tmp_path / "d")
    key = load_key_file(deployment.folder / "steward.pub")
    serve = start_serve(deployment.folder, "--postgres", pg_proxy.dsn(), "--ledger", pg_ledger)
    try:
        with serve.client(deployment.operator) as ops:
            assert ops.post("/v1/claims", json=claim("u0")).json()["seq"] == 0
            # A crash drops every connection; the relay then answers nothing, like a host
            # that vanished from the network: each reconnect waits out connect_timeout.
            pg_proxy.silent = True
            pg_server.restart("kill")
            began = time.monotonic()
            r = ops.post("/v1/claims", json=claim("u1"))
            waited = time.monotonic() - began
            assert (r.status_code, r.json()["error"]) == (503, "store_unavailable"), r.text
            assert "nothing was written" in r.json()["detail"]
            assert waited < 20, f"an unreachable server held a client {waited:.1f} s"
            pg_proxy.silent = False
            verdict = until_admitted(ops, "u1")
            assert verdict["seq"] == 1
        entries = ledger_in_db(pg_dsn, pg_ledger)
        assert [admissions_of(entries, key.kid, c) for c in ("u0", "u1")] == [[0], [1]]
    finally:
        serve.kill()
    _outcomes["unreachable_wait_s"] = round(waited, 1)


@pytest.mark.slow
def test_postgres_restarts_and_cut_commits_under_load_on_two_replicas_lose_nothing(
    tmp_path: Path, pg_server: PgServer, pg_proxy: FaultProxy, pg_dsn: str, pg_ledger: str
) -> None:
    deployment = Deployment.create(tmp_path / "d")
    tree = roomy(deployment.folder, devices=10_000)
    key = load_key_file(deployment.folder / "steward.pub")
    figures = Figures("postgres_faults")
    serves: list[Serve] = []
    # Restarts clean (fast), crash-like (immediate: WAL replay) and brutal (SIGKILL to the
    # whole server), and COMMITs cut before the server got them or after it answered.
    modes = ["fast", "cut-before", "immediate", "cut-after", "kill"] * 2
    told = Told()
    try:
        for _ in range(2):
            serves.append(
                start_serve(deployment.folder, "--postgres", pg_proxy.dsn(), "--ledger", pg_ledger)
            )
        stop = threading.Event()

        def store_fault(r: httpx.Response) -> bool:
            return r.status_code == 503 and r.json().get("error") in STORE_ERRORS

        result: list[Told] = []
        load = threading.Thread(
            target=lambda: result.append(
                drive(
                    [s.url for s in serves],
                    deployment.operator,
                    "pg",
                    6,
                    stop,
                    on_error=store_fault,
                )
            )
        )
        load.start()
        for n, mode in enumerate(modes):
            time.sleep(0.5)
            if mode.startswith("cut-"):
                cuts = len(pg_proxy.cuts)
                pg_proxy.cut_next_commit(mode.removeprefix("cut-"))
                deadline = time.monotonic() + 30
                while len(pg_proxy.cuts) == cuts:
                    assert time.monotonic() < deadline, "the load sent no COMMIT to cut"
                    time.sleep(0.01)
            else:
                pg_server.restart(mode)
            figures.faults_injected += 1
            # Both replicas admit again by themselves, neither restarted.
            for i, s in enumerate(serves):
                with s.client(deployment.operator) as ops:
                    v = until_admitted(ops, f"probe-{n}-{i}")
                    assert v["verdict"] == "admit", v
                    told.admits[f"probe-{n}-{i}"] = int(str(v["seq"]))
                assert s.proc.poll() is None
            figures.rounds += 1
        time.sleep(0.5)
        stop.set()
        load.join(timeout=120)
        assert not load.is_alive()
        told.merge(result[0])
        assert all(e.split(": ")[1].startswith("503") for e in told.errors), told.errors[:5]
        codes = told.codes
        # A cut COMMIT that carried entries reached its clients as "outcome unknown", never
        # as a verdict. (A cut may also hit the COMMIT of a section that wrote nothing, all
        # Queue or Deny: those verdicts stand, as nothing depended on the commit.)
        assert codes.get("commit_outcome_unknown", 0) >= 1, codes

        entries = ledger_in_db(pg_dsn, pg_ledger)
        checked = audit(entries, key.kid, key.public_key, tree, told)
        assert checked.lost == [], f"told but not committed: {checked.lost}"
        for s in serves:
            with s.client(deployment.operator) as ops:
                reported = ops.get("/v1/entitlements").json()["entitlements"]
                ledger = ops.get("/v1/ledger").json()
            # Reads catch up with the other replica first: both report the whole ledger.
            assert ledger["length"] == len(entries)
            assert ledger["head_hex"] == checked.replayer.head.hex()
            usage_matches(checked.replayer, reported)
    finally:
        for s in serves:
            s.kill()
    assert len(told.admits) > 20
    figures.entries_checked = checked.entries
    figures.admissions_told = len(told.admits)
    figures.releases_told = len(told.releases)
    figures.errors_answered = len(told.errors)
    figures.entries_lost = len(checked.lost)
    figures.extra = {
        "faults": {m: modes.count(m) for m in sorted(set(modes))},
        "cuts_seen_by_proxy": len(pg_proxy.cuts),
        "error_codes": dict(sorted(codes.items())),
        "replicas": 2,
        "unanswered_requests": told.unanswered,
        **_outcomes,
    }
    figures.record()
