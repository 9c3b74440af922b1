"""The dashboard at `/ui` in a real headless Chromium against a real `pool serve` on
127.0.0.1, driven through the DevTools protocol (tests/support/browser.py).

- the page loads with no console error and no request leaving 127.0.0.1, and never puts
  the token in a URL;
- each entitlement shows exactly the figures `GET /v1/entitlements` and `pool usage --json`
  give (the page keeps each exact µJ figure in `data-value`), for the current period and for
  a past one chosen on the page;
- the line chart of each team ends at the committed figure beside it;
- an admission made through the API appears without a reload;
- a tenant token shows that tenant's subtree and nothing of the other teams.

The ledger's history is written before the service starts, by a `Pool` whose clock is set
back, so the period has entries spread over days (a simulated past; every entry is signed
and verified like any other). A screenshot of the operator view is written to
docs/dashboard.png under CI (JOULEPOOL_CI=1) or with JOULEPOOL_SCREENSHOT=1, else to a
temporary folder. Without Chromium the tests skip naming the Debian package (`chromium`);
under CI a skip fails the run.
"""

from __future__ import annotations

import json
import os
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from joulepool.claim import Claim
from joulepool.deployment.open import open_pool
from joulepool.grade import Energy, Grade
from joulepool.ledger.keys import KeyPair, load_key_file
from joulepool.ledger.witness import sign_witness
from tests.support.browser import INSTALL_HINT, Chromium, Page, chromium_binary
from tests.support.servers import Deployment, Serve, pool_cli, start_serve

MJ = 10**12
WITNESSED_MS = 1_796_300_000_000
HOUR_MS = 3_600_000
REPO = Path(__file__).resolve().parents[2]
FIELDS = (
    "committed_uj",
    "charged_uj",
    "reserved_uj",
    "remaining_uj",
    "borrowed_uj",
    "held_devices",
)


def write_history(folder: Path) -> str:
    """Claims admitted and released over the previous period and the current one, each
    entry at its own time; the previous period's label."""
    pool = open_pool(folder)
    try:
        now = pool.now_ms()
        current = pool.period()
        past = pool.period(current.index - 1)
        assert current.start_ms is not None and past.start_ms is not None
        assert past.end_ms is not None
        clock = {"ms": past.start_ms + 24 * HOUR_MS}
        # The writer's clock, set back so the history spreads over the periods: a rig's
        # clock moved by hand, so not watched for steps against the monotonic one.
        pool._clock = lambda: clock["ms"]
        pool._watch_steps = False

        def at(ms: int) -> None:
            clock["ms"] = ms

        def admit(cid: str, ent: str, uj: int, cls: str | None = "train", dev: int = 1) -> None:
            decision = pool.submit(Claim(cid, ent, 1, dev, Energy(uj, Grade.HwShunt), cls))
            assert decision.verdict.verdict == "admit", (cid, decision.to_json())

        def release(cid: str, uj: int) -> None:
            pool.release(cid, Energy(uj, Grade.HwShunt))

        step = (past.end_ms - clock["ms"] - HOUR_MS) // 8
        for n in range(4):
            at(clock["ms"] + step)
            admit(f"old-v{n}", "vision", 8 * MJ)
            admit(f"old-l{n}", "language", 6 * MJ, "finetune")
            at(clock["ms"] + step)
            release(f"old-v{n}", (5 + n) * MJ)
            release(f"old-l{n}", 4 * MJ)
        start = max(current.start_ms, now - 60 * HOUR_MS)
        step = max(1, (now - 60_000 - start) // 12)
        at(start)
        script: list[tuple[str, Any]] = [
            ("admit", ("v1", "vision", 12 * MJ)),
            ("admit", ("l1", "language", 20 * MJ, "finetune")),
            ("admit", ("r1", "robotics", 6 * MJ, "sim", 2)),
            ("release", ("v1", 9 * MJ)),
            ("admit", ("v2", "vision", 15 * MJ)),
            ("release", ("l1", 18 * MJ)),
            ("admit", ("l2", "language", 16 * MJ, "finetune")),  # borrows 4 MJ
            ("release", ("r1", 5 * MJ)),
            ("admit", ("v3", "vision", 10 * MJ)),
            ("release", ("v2", 14 * MJ)),
            ("admit", ("r2", "robotics", 4 * MJ, "sim", 2)),
        ]
        for kind, args in script:
            at(clock["ms"] + step)
            if kind == "admit":
                admit(*args)
            else:
                release(*args)
        return pool.schedule.label(past.index)
    finally:
        pool.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Chromium]:
    if chromium_binary() is None:
        pytest.skip(INSTALL_HINT)
    with Chromium() as b:
        yield b


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Deployment, Serve, str]]:
    deployment = Deployment.create(tmp_path_factory.mktemp("ui") / "d")
    past = write_history(deployment.folder)
    serve = start_serve(deployment.folder)
    try:
        with serve.client(deployment.operator) as ops:
            # Verdicts only the service knows: a queue and a denial.
            big = {"id": "l-big", "entitlement": "language", "gang_size": 1}
            big |= {"devices_per_member": 1, "estimate": {"uj": 40 * MJ, "grade": "HwShunt"}}
            assert ops.post("/v1/claims", json=big).json()["reason"] == "limit_reached"
            wide = {"id": "r-wide", "entitlement": "robotics", "gang_size": 5}
            wide |= {"devices_per_member": 1, "estimate": {"uj": MJ, "grade": "HwShunt"}}
            assert ops.post("/v1/claims", json=wide).json()["verdict"] == "deny"
            # An auditor witnesses the ledger as it stands (§6.7): the page says so.
            head = ops.get("/v1/ledger").json()
            steward = load_key_file(deployment.folder / "steward.pub").public_key
            auditor = KeyPair.generate("auditor")
            receipt = sign_witness(
                auditor,
                "steward",
                bytes.fromhex(head["head_hex"]),
                head["length"],
                WITNESSED_MS,
                steward,
            )
            kept = ops.post(
                "/v1/witness-receipts",
                json={
                    "witness": "auditor",
                    "public_key_hex": auditor.public_key.hex(),
                    "receipt_hex": receipt.hex(),
                },
            )
            assert kept.json()["attestation"] == "witnessed", kept.text
        yield deployment, serve, past
    finally:
        serve.kill()


def open_dashboard(browser: Chromium, serve: Serve, token: str) -> Page:
    """A new tab on /ui with `token` given through the page's own form."""
    page = browser.new_page()
    page.goto(f"{serve.url}/ui")
    page.evaluate(
        f"document.getElementById('token').value = {json.dumps(token)};"
        "document.getElementById('token-form').requestSubmit(); true"
    )
    page.wait_for("document.querySelectorAll('.ent').length > 0")
    return page


def shown(page: Page) -> dict[str, dict[str, Any]]:
    """Each entitlement row's exact figures as the page holds them."""
    rows: dict[str, dict[str, Any]] = page.evaluate(
        """(() => {
          const out = {};
          for (const row of document.querySelectorAll('.ent')) {
            const figs = {source: row.dataset.source};
            for (const f of row.querySelectorAll('[data-field]')) {
              figs[f.dataset.field] = f.dataset.value === '' ? null : Number(f.dataset.value);
            }
            out[row.dataset.ent] = figs;
          }
          return out;
        })()"""
    )
    return rows


def expected(entitlement: dict[str, Any]) -> dict[str, Any]:
    """What the page must show for one entitlement of the API's answer."""
    figs = entitlement.get("subtree", entitlement["usage"])
    out = {f: figs[f] for f in FIELDS}
    out["source"] = "subtree" if "subtree" in entitlement else "usage"
    out["guarantee_uj"] = figs.get("guarantee_uj", entitlement["guarantee_uj"])
    out["guarantee_devices"] = figs.get("guarantee_devices", entitlement["guarantee_devices"])
    out["limit_uj"] = None if "subtree" in entitlement else entitlement.get("limit_uj")
    return out


def test_the_page_loads_without_console_errors_or_requests_leaving_loopback(
    browser: Chromium, served: tuple[Deployment, Serve, str]
) -> None:
    deployment, serve, _ = served
    page = open_dashboard(browser, serve, deployment.operator)
    browser.pump(2.5)  # at least one poll more
    assert page.console_errors == []
    assert page.requests, "no request was seen"
    for url in page.requests:
        assert urlsplit(url).hostname == "127.0.0.1", url
        assert deployment.operator not in url  # the token travels in a header only
    assert page.evaluate("document.getElementById('status').className") == ""


# Before any test below adds its claims, so the picture shows the history alone.
def test_a_screenshot_of_the_operator_view(
    browser: Chromium, served: tuple[Deployment, Serve, str], tmp_path: Path
) -> None:
    deployment, serve, _ = served
    page = open_dashboard(browser, serve, deployment.operator)
    page.wait_for("document.querySelectorAll('#timeline polyline').length === 3")
    keep = os.environ.get("JOULEPOOL_CI") == "1" or os.environ.get("JOULEPOOL_SCREENSHOT") == "1"
    path = REPO / "docs" / "dashboard.png" if keep else tmp_path / "dashboard.png"
    page.screenshot(path)
    png = path.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert width == 1400 and height > 600
    assert page.console_errors == []


def test_each_entitlement_shows_the_figures_the_api_and_pool_usage_give(
    browser: Chromium, served: tuple[Deployment, Serve, str]
) -> None:
    deployment, serve, _ = served
    page = open_dashboard(browser, serve, deployment.operator)
    with serve.client(deployment.operator) as ops:
        api = ops.get("/v1/entitlements").json()["entitlements"]
    cli = pool_cli("usage", str(deployment.folder), "--json")
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["entitlements"] == api  # one answer, read beside the writer
    assert shown(page) == {e["id"]: expected(e) for e in api}
    # Each team's line ends at its own committed figure; borrowing names the lenders.
    lines = page.evaluate(
        "Object.fromEntries([...document.querySelectorAll('#timeline polyline')]"
        ".map(p => [p.dataset.ent, Number(p.dataset.last)]))"
    )
    assert lines == {e["id"]: e["usage"]["committed_uj"] for e in api if e["id"] != "research"}
    language = next(e for e in api if e["id"] == "language")
    assert language["usage"]["borrowed_uj"] > 0
    lenders = page.evaluate(
        "document.querySelector('[data-ent=language] [data-lenders]').dataset.lenders"
    )
    assert set(lenders.split(",")) == {
        e["id"]
        for e in api
        if e.get("parent") == "research"
        and e["id"] != "language"
        and e["usage"]["remaining_uj"] > 0
    }
    verdicts = page.evaluate(
        "[...document.querySelectorAll('#verdicts tbody tr')].map(r => [r.dataset.claim, r.dataset.verdict])"
    )
    assert ["l-big", "queue"] in verdicts and ["r-wide", "deny"] in verdicts
    classes = page.evaluate(
        "Object.fromEntries([...document.querySelectorAll('#estimates tbody tr')]"
        ".map(r => [r.dataset.class, Number(r.dataset.evidence)]))"
    )
    with serve.client(deployment.operator) as ops:
        for name, evidence in classes.items():
            answer = ops.post("/v1/estimates", json={"class": name}).json()
            assert evidence == answer["evidence"], name
        ledger = ops.get("/v1/ledger").json()
    assert set(classes) == {"train", "finetune", "sim"}
    facts = page.evaluate(
        "Object.fromEntries([...document.querySelectorAll('#ledger dd[data-field]')]"
        ".map(d => [d.dataset.field, d.textContent]))"
    )
    assert facts["length"] == str(ledger["length"])
    assert facts["head_hex"] == ledger["head_hex"]
    assert facts["attestation"] == ledger["attestation"] == "witnessed"
    assert facts["witnessed_through"] == f"entry {ledger['witnessed_through']}"
    # 1_796_300_000_000 ms is 2026-12-03 12:13:20 UTC.
    assert facts["witnessed_at_ms"] == "2026-12-03 12:13:20 UTC by auditor"


def test_a_past_period_chosen_on_the_page_shows_that_periods_figures(
    browser: Chromium, served: tuple[Deployment, Serve, str]
) -> None:
    deployment, serve, past = served
    page = open_dashboard(browser, serve, deployment.operator)
    page.evaluate(
        f"const s = document.getElementById('period'); s.value = {json.dumps(past)};"
        "s.dispatchEvent(new Event('change')); true"
    )
    page.wait_for(
        f"document.getElementById('period-words').textContent.startsWith({json.dumps(past)})"
    )
    with serve.client(deployment.operator) as ops:
        api = [
            ops.get(f"/v1/entitlements/{e}", params={"period": past}).json()
            for e in ("research", "vision", "language", "robotics")
        ]
    assert shown(page) == {e["id"]: expected(e) for e in api}
    assert api[1]["usage"]["charged_uj"] == (5 + 6 + 7 + 8) * MJ


def test_an_admission_through_the_api_appears_without_a_reload(
    browser: Chromium, served: tuple[Deployment, Serve, str]
) -> None:
    deployment, serve, _ = served
    page = open_dashboard(browser, serve, deployment.operator)
    page.evaluate("window.sameDocument = true")
    before = shown(page)["robotics"]["committed_uj"]
    body = {"id": "r-live", "entitlement": "robotics", "gang_size": 1, "devices_per_member": 1}
    body |= {"estimate": {"uj": 3 * MJ, "grade": "HwShunt"}}
    with serve.client(deployment.tenants["robotics"]) as robotics:
        assert robotics.post("/v1/claims", json=body).json()["verdict"] == "admit"
        after = robotics.get("/v1/entitlements/robotics").json()["usage"]
    assert after["committed_uj"] == before + 3 * MJ
    page.wait_for(
        f"document.querySelector('[data-ent=robotics] [data-field=committed_uj]').dataset.value === '{after['committed_uj']}'"
    )
    assert shown(page)["robotics"] == expected({**_entitlement(serve, deployment, "robotics")})
    assert page.evaluate("window.sameDocument") is True  # updated in place, not reloaded
    assert (
        page.wait_for("document.querySelector('#verdicts tbody tr').dataset.claim")
        == "robotics/r-live"
    )
    # A claim id is hostile input: shown as text, never parsed as markup.
    hostile = '<img src=x onerror="document.title=1">'
    body = {"id": hostile, "entitlement": "robotics", "gang_size": 1, "devices_per_member": 1}
    body |= {"estimate": {"uj": 25 * MJ, "grade": "Estimator"}}
    with serve.client(deployment.operator) as ops:
        assert ops.post("/v1/claims", json=body).json()["verdict"] == "deny"
    page.wait_for(
        f"document.querySelector('#verdicts tbody tr').dataset.claim === {json.dumps(hostile)}"
    )
    assert page.evaluate("document.querySelectorAll('main img').length") == 0
    assert hostile in page.evaluate("document.getElementById('verdicts').innerText")
    assert page.evaluate("document.title") == "joulepool"
    assert page.console_errors == []


def test_running_claims_and_recent_acts_show_the_live_figures_with_a_dash_for_unknown(
    browser: Chromium, served: tuple[Deployment, Serve, str]
) -> None:
    deployment, serve, _ = served
    t = time.time_ns() // 1_000_000 - 60_000
    with serve.client(deployment.operator) as ops:
        for cid in ("v-watched", "v-unread"):
            body: dict[str, Any] = {"id": cid, "entitlement": "vision", "gang_size": 1}
            body |= {"devices_per_member": 1, "estimate": {"uj": 10**9, "grade": "HwShunt"}}
            assert ops.post("/v1/claims", json=body).json()["verdict"] == "admit", cid
        for at, uj in ((t, 0), (t + 60_000, 60 * 10**6)):
            sent: dict[str, Any] = {"at_ms": at, "energy": {"uj": uj, "grade": "HwShunt"}}
            sent |= {"every_ms": 30_000, "job": {"id": "77", "user": "ada"}}
            assert ops.post("/v1/claims/v-watched/readings", json=sent).status_code == 200
        assert ops.post("/v1/claims/v-watched/progress", json={"units": 4}).status_code == 200
        act = {"claim": "v-watched", "kind": "notice", "outcome": "done", "job": "77"}
        assert ops.post("/v1/actions", json=act).status_code == 200
        listed = ops.get("/v1/claims", params={"state": "running", "limit": 1000}).json()
    live = {c["claim"]: c["live"] for c in listed["claims"]}
    page = open_dashboard(browser, serve, deployment.operator)
    page.wait_for("document.querySelector('#running tr[data-claim=v-unread]') !== null")
    cells = page.evaluate(
        """Object.fromEntries([...document.querySelectorAll('#running tbody tr')].map(r => [
          r.dataset.claim,
          Object.fromEntries([...r.querySelectorAll('[data-field]')].map(
            c => [c.dataset.field, [c.dataset.value, c.textContent]]))]))"""
    )
    watched, unread = cells["v-watched"], cells["v-unread"]
    figures = live["v-watched"]
    assert watched["energy_uj"] == [str(figures["energy_uj"]), "60 J HwShunt"]
    assert watched["power_uw"] == [str(figures["power_uw"]), "1 W"]
    assert watched["realised_cost"] == ["15000000/1", "15000000/1 µJ/unit"]
    assert watched["units"][1] == "4 steps" and watched["job"][1] == "77 (ada)"
    assert watched["reservation_used_pct"][1] == f"{figures['reservation_used_pct']} %"
    # Unknown is not zero: no reading yet, so every measured figure is a dash.
    for field in ("energy_uj", "power_uw", "units", "realised_cost", "exhausts_at_ms", "job"):
        assert unread[field] == ["", "—"], field
    assert (
        unread["idle"][1]
        == "no_verdict (no_reading)"
        == (f"{live['v-unread']['idle']['verdict']} ({live['v-unread']['idle']['reason']})")
    )
    acts = page.evaluate(
        "[...document.querySelectorAll('#actions tbody tr')].map(r => [r.dataset.claim, r.dataset.kind])"
    )
    assert acts[0] == ["v-watched", "notice"]
    assert page.evaluate("document.querySelectorAll('section section').length") == 0  # well formed
    assert page.console_errors == []


def _entitlement(serve: Serve, deployment: Deployment, ent: str) -> dict[str, Any]:
    with serve.client(deployment.operator) as ops:
        answer: dict[str, Any] = ops.get(f"/v1/entitlements/{ent}").json()
        return answer


def test_a_tenant_token_shows_only_its_own_subtree(
    browser: Chromium, served: tuple[Deployment, Serve, str]
) -> None:
    deployment, serve, _ = served
    page = open_dashboard(browser, serve, deployment.tenants["vision"])
    browser.pump(0.5)
    with serve.client(deployment.tenants["vision"]) as vision:
        api = vision.get("/v1/entitlements").json()["entitlements"]
    assert [e["id"] for e in api] == ["vision"]
    assert shown(page) == {"vision": expected(api[0])}
    text = page.evaluate("document.body.innerText")
    # Its parent's name is a fact of its own row (`parent`); nothing of its siblings shows.
    for other in ("language", "robotics", "l-big", "r-wide", "finetune", "sim"):
        assert other not in text, other
    lines = page.evaluate(
        "[...document.querySelectorAll('#timeline polyline')].map(p => p.dataset.ent)"
    )
    assert lines == ["vision"]
    assert "operators only" in page.evaluate("document.getElementById('ledger').textContent")
    assert page.console_errors == []
