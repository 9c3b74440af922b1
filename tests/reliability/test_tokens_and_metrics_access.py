"""`pool serve` at a trust boundary: who reads `/metrics`, the ledger's head and
the witness receipts, and a `tokens.toml` that is not trusted as written. All through real
`pool serve` and `pool` processes on 127.0.0.1.

- `/metrics` needs a token (API.md, Additions): an operator or `metrics` token reads every
  series; a tenant token reads its own subtree's usage and nothing about the pool as a whole.
  A `metrics` token reads `/metrics` and nothing else.
- `GET /v1/ledger` and `GET /v1/witness-receipts` are for operators only.
- `tokens.toml` open to group or others, a sha256 or a name listed twice, a scope that is not
  exactly `operator`, `metrics` or `tenant:<id in the tree>`: `pool serve` will not start, and
  SIGHUP keeps the tokens in force, saying why at error level, with the file and the line.
Unit tests of `read_tokens`: tests/service/test_tokens.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from joulepool.deployment.config import CONFIG, TOKENS, read_config, write_config
from joulepool.tree import Tree
from tests.support.faults import TEAMS, Figures, claim
from tests.support.servers import Deployment, Serve, pool_cli, serving, sighup, start_serve

_figures = Figures("tokens_and_metrics")
# Per-entitlement usage in the current budget period, and the period's bounds.
# (base units, `_total` counters, every figure of the usage object.)
USAGE = {
    "pool_guarantee_joules",
    "pool_committed_joules",
    "pool_reserved_joules",
    "pool_charged_joules",
    "pool_remaining_joules",
    "pool_borrowed_joules",
    "pool_devices_held",
    "pool_devices_guaranteed",
    "pool_running_claims",
}
# Only where an entitlement has a `limit_uj` (the example tree: language alone).
LIMITED = {"language"}
PERIOD = {"pool_period_start_timestamp_seconds", "pool_period_end_timestamp_seconds"}
# A tenant reads its own subtree's verdicts (they carry the entitlement label).
VERDICTS = {"pool_verdicts"}
# An interior node's sums over its subtree: read by a tenant whose subtree has one.
SUBTREE = {
    "pool_subtree_guarantee_joules",
    "pool_subtree_committed_joules",
    "pool_subtree_charged_joules",
    "pool_subtree_reserved_joules",
    "pool_subtree_devices_held",
}
GLOBAL = {
    "pool_build_info",
    "pool_ready",
    "pool_ledger_length",
    "pool_ledger_last_append_timestamp_seconds",
    "pool_fsyncs",
    "pool_appends",
    "pool_commit_seconds",
}


@pytest.fixture(scope="module", autouse=True)
def _record_figures() -> Iterator[None]:
    yield
    _figures.extra["escalations_accepted"] = 0
    _figures.record()


@dataclass
class Served:
    """A running deployment with, beyond the operator and team tokens, a `metrics` token
    added by `pool token add` and a token for the parent entitlement, both taken in by SIGHUP."""

    deployment: Deployment
    serve: Serve
    scraper: str
    research: str


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    run = serving(tmp_path_factory.mktemp("boundary") / "d")
    deployment, serve = next(run)
    try:
        added = pool_cli("token", "add", str(deployment.folder), "--scope", "metrics", "--json")
        assert added.returncode == 0, added.stderr
        assert json.loads(added.stdout)["scope"] == "metrics"
        research = deployment.add_token("research", "tenant:research")
        assert "configuration reloaded" in sighup(serve)
        with serve.client(deployment.operator) as ops:
            for team in TEAMS:
                r = ops.post("/v1/claims", json=claim(f"{team}-own", team))
                assert r.json()["verdict"] == "admit", r.text
        yield Served(deployment, serve, json.loads(added.stdout)["token"], research)
    finally:
        run.close()


def scrape(serve: Serve, token: str | None) -> httpx.Response:
    with serve.client(token) as http:
        return http.get("/metrics")


def series(text: str) -> dict[str, dict[str, float]]:
    """Family name -> {entitlement label (or "") -> value} of a Prometheus text exposition."""
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(family.name, {})[sample.labels.get("entitlement", "")] = sample.value
    return out


def test_metrics_needs_a_token(served: Served) -> None:
    for token in (None, "jp_" + "0" * 43):
        r = scrape(served.serve, token)
        assert (r.status_code, r.json()["error"]) == (401, "unauthorized"), r.text
        assert "pool_" not in r.text
        _figures.faults_injected += 1


@pytest.mark.parametrize("who", ["operator", "metrics"])
def test_operator_and_metrics_tokens_read_every_series(served: Served, who: str) -> None:
    token = served.deployment.operator if who == "operator" else served.scraper
    r = scrape(served.serve, token)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    found = series(r.text)
    assert set(found) >= USAGE | PERIOD | VERDICTS | GLOBAL, sorted(found)
    assert set(found["pool_committed_joules"]) == {"research", *TEAMS}
    assert set(found["pool_limit_joules"]) == LIMITED
    assert found["pool_ledger_length"][""] >= len(TEAMS)


LIVE = {
    "pool_running_energy_joules",
    "pool_running_read_claims",
    "pool_running_unread_claims",
    "pool_running_idle_claims",
}
"""Run-time gauges (DESIGN.md §7): per entitlement, present while its claims run."""


@pytest.mark.parametrize(
    ("tenant", "subtree"),
    [("vision", {"vision"}), ("robotics", {"robotics"}), ("research", {"research", *TEAMS})],
)
def test_a_tenant_token_reads_only_its_subtree_on_metrics(
    served: Served, tenant: str, subtree: set[str]
) -> None:
    token = served.research if tenant == "research" else served.deployment.tenants[tenant]
    r = scrape(served.serve, token)
    assert r.status_code == 200, r.text
    found = series(r.text)
    # Only per-entitlement usage, its verdicts and the period's bounds: no latencies,
    # ledger length, appends or fsyncs.
    limited = {"pool_limit_joules"} if subtree & LIMITED else set()
    interior = SUBTREE if "research" in subtree else set()
    running = set(found) & LIVE
    assert set(found) - running == USAGE | limited | interior | PERIOD | VERDICTS, sorted(found)
    for family in running:
        assert set(found[family]) <= subtree, (family, found[family])
    for family in USAGE:
        assert set(found[family]) == subtree, (family, found[family])
    for family in interior:
        assert set(found[family]) == {"research"}, (family, found[family])
    # Each team had one claim decided; the department itself none.
    assert set(found["pool_verdicts"]) == subtree & set(TEAMS), found["pool_verdicts"]
    everything = series(scrape(served.serve, served.deployment.operator).text)
    for family in USAGE | limited | interior | VERDICTS:
        for node in found[family]:  # the same figures the operator reads
            assert found[family][node] == everything[family][node]
    _figures.faults_injected += len(GLOBAL) + len({"research", *TEAMS} - subtree)


def test_a_metrics_token_reads_metrics_and_nothing_else(served: Served) -> None:
    with served.serve.client(served.deployment.operator) as ops:
        before = ops.get("/v1/ledger").json()
    witness = {"witness": "w", "public_key_hex": "0" * 64, "receipt_hex": "00"}
    release = {"actual": {"uj": 1, "grade": "HwShunt"}}
    with served.serve.client(served.scraper) as http:
        answers = [
            http.get("/v1/entitlements"),
            http.get("/v1/entitlements/vision"),
            http.get("/v1/claims/vision-own"),
            http.get("/v1/ledger"),
            http.get("/v1/ledger/entries"),
            http.get("/v1/witness-receipts"),
            http.post("/v1/claims", json=claim("scraper-claim", "vision")),
            http.post("/v1/claims/vision-own/release", json=release),
            http.post("/v1/estimates", json={"class": "train", "entitlement": "vision"}),
            http.post("/v1/estimates", json={"class": "train"}),
            http.post("/v1/preemption-order", json={"workloads": []}),
            http.post("/v1/idle", json={"workloads": []}),
            http.post(
                "/v1/attribution",
                json={"total": {"uj": 10, "grade": "HwShunt"}, "occupants": {"a": 1}},
            ),
            http.post("/v1/witness-receipts", json=witness),
        ]
        assert http.get("/metrics").status_code == 200
    for r in answers:
        assert (r.status_code, r.json()["error"]) == (403, "forbidden"), (r.request.url, r.text)
    _figures.faults_injected += len(answers)
    with served.serve.client(served.deployment.operator) as ops:
        assert ops.get("/v1/ledger").json() == before  # nothing was written
        assert ops.get("/v1/claims/vision-own").json()["state"] == "running"


@pytest.mark.parametrize("tenant", ["vision", "research"])
def test_the_ledger_head_and_the_witness_receipts_are_for_operators_only(
    served: Served, tenant: str
) -> None:
    token = served.research if tenant == "research" else served.deployment.tenants[tenant]
    with served.serve.client(token) as http:
        for path in ("/v1/ledger", "/v1/witness-receipts"):
            r = http.get(path)
            assert (r.status_code, r.json()["error"]) == (403, "forbidden"), (path, r.text)
            assert "length" not in r.text and "receipts" not in r.text
            _figures.faults_injected += 1
    with served.serve.client(served.deployment.operator) as ops:
        assert ops.get("/v1/ledger").json()["length"] >= len(TEAMS)
        assert ops.get("/v1/witness-receipts").json() == {"receipts": []}


def test_pool_token_add_refuses_a_scope_the_tree_does_not_have(tmp_path: Path) -> None:
    deployment = Deployment.create(tmp_path / "d", tenants=())
    before = (deployment.folder / TOKENS).read_bytes()
    for scope in ("tenant:visoin", "tenant:vision ", "Operator", "tenant:"):
        out = pool_cli("token", "add", str(deployment.folder), "--scope", scope)
        assert out.returncode == 1 and out.stdout == "", out
        assert out.stderr.startswith("pool: invalid_input: --scope: "), out.stderr
        assert "Traceback" not in out.stderr
        _figures.faults_injected += 1
    assert (deployment.folder / TOKENS).read_bytes() == before
    ok = pool_cli("token", "add", str(deployment.folder), "--scope", "metrics", "--name", "prom")
    assert ok.returncode == 0 and ok.stdout.strip().startswith("jp_"), ok


# -- a tokens.toml that must not be trusted ----------------------------------------------


def header_line(text: str, name: str) -> int:
    """The line of the `[[token]]` table whose name is `name` (as `pool token add` writes it)."""
    lines = text.split("\n")
    return next(
        i + 1
        for i, line in enumerate(lines)
        if line == "[[token]]" and lines[i + 1] == f'name = "{name}"'
    )


def spoil(deployment: Deployment, case: str) -> tuple[str, str]:
    """Make `tokens.toml` bad in the way `case` names; return where the refusal must point
    (`FILE:LINE:`, or `FILE:` for the file as a whole) and what it must say."""
    path = deployment.folder / TOKENS
    text = path.read_text(encoding="utf-8")
    vision = hashlib.sha256(deployment.tenants["vision"].encode()).hexdigest()
    fresh = hashlib.sha256(os.urandom(16)).hexdigest()
    appended = {
        # The finding: the vision token listed again, as operator, made vision an operator.
        "tenant_listed_again_as_operator": ("escalated", vision, "operator"),
        "same_name_twice": ("ops", fresh, "metrics"),
        "misspelt_entitlement": ("typo", fresh, "tenant:visoin"),
        "stray_whitespace": ("blank", fresh, "tenant:vision "),
        "control_character": ("bell", fresh, "tenant:vision\\u0007"),
    }
    if case in ("mode_0666", "mode_0640"):
        path.chmod(int(case[-4:], 8))
        return f"{path}: ", f"mode {case[-4:]}"
    name, digest, scope = appended[case]
    line = text.count("\n") + 2
    path.write_text(
        text + f'\n[[token]]\nname = "{name}"\nsha256 = "{digest}"\nscope = "{scope}"\n',
        encoding="utf-8",
    )
    said = {
        "tenant_listed_again_as_operator": (
            f"listed already at line {header_line(text, 'vision')}"
        ),
        "same_name_twice": f"the name 'ops' is taken already at line {header_line(text, 'ops')}",
        "misspelt_entitlement": "names entitlement 'visoin', which is not in the tree",
        "stray_whitespace": "stray characters",
        "control_character": "stray characters",
    }[case]
    return f"{path}:{line}: ", said


CASES = [
    "mode_0666",
    "mode_0640",
    "tenant_listed_again_as_operator",
    "same_name_twice",
    "misspelt_entitlement",
    "stray_whitespace",
    "control_character",
]


@pytest.mark.parametrize("case", CASES)
def test_pool_serve_will_not_start_on_a_tokens_file_it_cannot_trust(
    tmp_path: Path, case: str
) -> None:
    deployment = Deployment.create(tmp_path / "d")
    where, said = spoil(deployment, case)
    serve = start_serve(deployment.folder, wait=False)
    code = serve.proc.wait(timeout=120)
    out = serve.output()
    assert code != 0, out
    assert f"invalid_tokens: {where}" in out and said in out, out
    assert "Traceback" not in out, out
    _figures.faults_injected += 1


@pytest.fixture(scope="module")
def reloading(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Deployment, Serve]]:
    yield from serving(tmp_path_factory.mktemp("boundary-sighup") / "d")


def still_in_force(deployment: Deployment, serve: Serve) -> None:
    """The tokens of the deployment, with the scopes they were given, and no other."""
    with serve.client(deployment.operator) as ops:
        assert ops.get("/v1/ledger").status_code == 200
    for team, token in deployment.tenants.items():
        with serve.client(token) as http:
            assert http.get(f"/v1/entitlements/{team}").status_code == 200
            r = http.get("/v1/ledger")  # still a tenant: no escalation took effect
            assert (r.status_code, r.json()["error"]) == (403, "forbidden"), r.text


@pytest.mark.parametrize("case", CASES)
def test_sighup_refuses_a_tokens_file_it_cannot_trust_and_keeps_the_old_tokens(
    reloading: tuple[Deployment, Serve], case: str
) -> None:
    deployment, serve = reloading
    path = deployment.folder / TOKENS
    good = path.read_bytes()
    where, said = spoil(deployment, case)
    try:
        log = sighup(serve)
        assert "pool serve: error: reload refused, keeping the old tokens" in log, log
        assert where in log and said in log, log
        assert "Traceback" not in log and serve.proc.poll() is None, log
        still_in_force(deployment, serve)
        _figures.faults_injected += 1
    finally:
        path.write_bytes(good)
        path.chmod(0o600)
    assert "configuration reloaded" in sighup(serve)
    still_in_force(deployment, serve)


def test_sighup_refuses_a_tree_that_drops_an_entitlement_a_token_names(
    reloading: tuple[Deployment, Serve],
) -> None:
    deployment, serve = reloading
    config_path = deployment.folder / CONFIG
    good = config_path.read_bytes()
    config = read_config(config_path)
    smaller = Tree([e for e in config.tree if e.id != "robotics"])
    config_path.unlink()
    write_config(config_path, config.steward, smaller, config.idle)
    try:
        log = sighup(serve)
        refused = "pool serve: error: reload refused, keeping the old configuration"
        assert refused in log and "the token 'robotics' in force" in log, log
        assert "'robotics', which is not in the tree" in log, log
        # Refused as a whole: the tree stays as it was, and so do the tokens.
        with serve.client(deployment.tenants["robotics"]) as robotics:
            r = robotics.post("/v1/claims", json=claim("robotics-after-refusal", "robotics"))
            assert r.json()["verdict"] == "admit", r.text
        with serve.client(deployment.operator) as ops:
            assert ops.get("/v1/entitlements/robotics").status_code == 200
        still_in_force(deployment, serve)
        _figures.faults_injected += 1
    finally:
        config_path.write_bytes(good)
    assert "configuration reloaded" in sighup(serve)


def test_a_good_tokens_file_is_taken_in_without_a_sighup(
    reloading: tuple[Deployment, Serve],
) -> None:
    deployment, serve = reloading
    scraper = deployment.add_token("prometheus", "metrics")
    # tokens.toml is watched (docs/reliability.md §15): in force within a second or two.
    deadline = time.monotonic() + 5
    while scrape(serve, scraper).status_code == 401:
        assert time.monotonic() < deadline, serve.output()
        time.sleep(0.05)
    assert scrape(serve, scraper).status_code == 200
    with serve.client(scraper) as http:
        assert http.get("/v1/entitlements").status_code == 403
    still_in_force(deployment, serve)
