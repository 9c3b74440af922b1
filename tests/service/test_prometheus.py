"""The shipped Prometheus files against the real programs: deploy/prometheus/joulepool-alerts.yml
under `promtool test rules` (every alert made to fire and kept quiet, on two replicas), and a
real `prometheus` scraping a live `pool serve` with the shipped scrape configuration, whose
PromQL answer is `pool usage --json`'s figure (one answer everywhere)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml  # type: ignore[import-untyped]
from prometheus_client.parser import text_string_to_metric_families

from joulepool import __version__
from joulepool.deployment.config import CONFIG, TOKENS, read_config
from joulepool.service.metrics import exported_names
from joulepool.service.tokens import add_token
from tests.service.test_grafana_dashboard import metric_names
from tests.support.servers import Deployment, Serve, free_port, pool_cli, start_serve

PROMETHEUS = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RULES = PROMETHEUS / "joulepool-alerts.yml"
RULE_TESTS = PROMETHEUS / "joulepool-alerts.test.yml"
MJ = 10**12
EXPIRES = datetime(2099, 1, 2, 3, 4, 5, tzinfo=UTC)
# Exported by other parts of the service than metrics.py's declared list: Prometheus's own
# `up`, and the reload outcome the configuration reload adds.
ELSEWHERE = {"up", "pool_config_last_reload_successful"}


def program(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not installed (Debian package prometheus)")
    return path


def rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_alert_rules_pass_promtool_check_and_their_unit_tests() -> None:
    promtool = program("promtool")
    for args in (["check", "rules", RULES.name], ["test", "rules", RULE_TESTS.name]):
        run = subprocess.run(
            [promtool, *args],
            cwd=PROMETHEUS,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert run.returncode == 0, run.stdout + run.stderr


def test_every_alert_has_a_unit_test_where_it_fires() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text(encoding="utf-8"))["tests"]
    fired = {
        case["alertname"]
        for test in tests
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    alerts = {rule["alert"] for rule in rules()}
    assert alerts == fired
    assert {
        "PoolGuarantee80Percent",
        "PoolGuarantee90Percent",
        "PoolGuaranteeSpent",
        "PoolGuaranteeProjectedExhaustion",
        "PoolNotReady",
        "PoolReloadFailed",
        "PoolNoAppend",
        "PoolWitnessLag",
        "PoolTokenExpiring",
    } <= alerts


def test_alert_rules_read_only_exported_metrics() -> None:
    for rule in rules():
        unknown = metric_names(rule["expr"]) - exported_names() - ELSEWHERE
        assert not unknown, (rule["alert"], unknown)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Deployment, str, Serve]]:
    """A deployment with a `metrics` token for Prometheus, served, one claim released and
    one running; and that token."""
    deployment = Deployment.create(tmp_path_factory.mktemp("prometheus") / "d")
    scraper = deployment.add_token("prometheus", "metrics")
    tree = read_config(deployment.folder / CONFIG).tree
    add_token(deployment.folder / TOKENS, "rotating", "tenant:vision", tree, EXPIRES)
    serve = start_serve(deployment.folder)
    try:
        with serve.client(deployment.operator) as ops:
            body = {
                "id": "v-1",
                "entitlement": "vision",
                "gang_size": 1,
                "devices_per_member": 1,
                "estimate": {"uj": 10 * MJ, "grade": "HwShunt"},
            }
            assert ops.post("/v1/claims", json=body).json()["verdict"] == "admit"
            release = {"actual": {"uj": 7 * MJ + 1, "grade": "HwShunt"}}
            assert ops.post("/v1/claims/v-1/release", json=release).status_code == 200
            body = {**body, "id": "l-1", "entitlement": "language"}
            assert ops.post("/v1/claims", json=body).json()["verdict"] == "admit"
            # robotics at 85 % of its 20 MJ: the shipped rules' 80 % alert fires on it.
            body = {**body, "id": "r-1", "entitlement": "robotics"}
            body["estimate"] = {"uj": 17 * MJ, "grade": "HwShunt"}
            assert ops.post("/v1/claims", json=body).json()["verdict"] == "admit"
        yield deployment, scraper, serve
    finally:
        serve.kill()


def scrape_config(serve: Serve, token_file: Path) -> dict[str, Any]:
    """The shipped prometheus.yml, pointed at this test's `pool serve` and token file, with a
    one-second scrape and the shipped alert rules loaded."""
    config: dict[str, Any] = yaml.safe_load(
        (PROMETHEUS / "prometheus.yml").read_text(encoding="utf-8")
    )
    config["global"]["scrape_interval"] = "1s"
    config["global"]["evaluation_interval"] = "1s"
    config["rule_files"] = [str(RULES)]
    (job,) = config["scrape_configs"]
    job["authorization"]["credentials_file"] = str(token_file)
    job["static_configs"][0]["targets"] = [serve.url.removeprefix("http://")]
    return config


def query(url: str, promql: str, deadline: float) -> list[dict[str, Any]]:
    """The instant vector Prometheus answers for `promql`, once it has one (it scrapes first)."""
    while True:
        try:
            answer = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=5).json()
        except httpx.TransportError:
            answer = {"status": "starting"}
        if answer["status"] == "success" and answer["data"]["result"]:
            return list(answer["data"]["result"])
        if time.monotonic() > deadline:
            raise AssertionError(f"no answer to {promql}: {answer}")
        time.sleep(0.25)


def test_real_prometheus_scrapes_pool_serve_and_answers_pool_usage_figures(
    served: tuple[Deployment, str, Serve], tmp_path: Path
) -> None:
    prometheus = program("prometheus")
    deployment, scraper, serve = served
    token_file = tmp_path / "pool.token"
    token_file.write_text(scraper, encoding="utf-8")
    token_file.chmod(0o600)
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(scrape_config(serve, token_file)), encoding="utf-8")
    port = free_port()
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        query(url, 'up{job="joulepool"} == 1', deadline)  # scraped, with the token
        cli = pool_cli("usage", str(deployment.folder), "--json")
        assert cli.returncode == 0, cli.stderr
        usage = {e["id"]: e for e in json.loads(cli.stdout)["entitlements"]}
        committed = query(url, "pool_committed_joules", deadline)
        got = {s["metric"]["entitlement"]: s["value"][1] for s in committed}
        # Prometheus keeps floats: the figure in joules is µJ / 10⁶, exactly as printed.
        assert got["vision"] == "7000000.000001"
        want = {k: str(v["usage"]["committed_uj"] / 10**6) for k, v in usage.items()}
        assert {k: float(v) for k, v in got.items()} == {k: float(v) for k, v in want.items()}
        parents = {s["metric"]["entitlement"]: s["metric"].get("parent") for s in committed}
        assert parents == {"research": None, "vision": "research", "language": "research",
                           "robotics": "research"}  # fmt: skip
        (subtree,) = query(url, "pool_subtree_committed_joules", deadline)
        assert subtree["metric"]["entitlement"] == "research"
        assert float(subtree["value"][1]) == usage["research"]["subtree"]["committed_uj"] / 10**6
        (build,) = query(url, "pool_build_info", deadline)
        assert build["metric"]["version"] == __version__
        (ready,) = query(url, "pool_ready", deadline)
        assert ready["value"][1] == "1"
        # The shipped rules load, and fire on the live series as they are labelled.
        groups = httpx.get(f"{url}/api/v1/rules", timeout=5).json()["data"]["groups"]
        assert {g["name"] for g in groups} == {"joulepool-usage", "joulepool-service"}
        firing = query(url, 'ALERTS{alertstate="firing",alertname=~"PoolGuarantee.*"}', deadline)
        assert [(a["metric"]["alertname"], a["metric"]["entitlement"]) for a in firing] == [
            ("PoolGuarantee80Percent", "robotics")
        ]
        assert firing[0]["metric"]["parent"] == "research"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_metrics_say_version_readiness_and_token_expiry_by_name_only(
    served: tuple[Deployment, str, Serve],
) -> None:
    deployment, scraper, serve = served
    with serve.client(scraper) as http:
        text = http.get("/metrics").text
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    assert samples[("pool_build_info", (("version", __version__),))] == 1
    assert samples[("pool_ready", ())] == 1
    expiry = [(k, v) for k, v in samples.items() if k[0] == "pool_token_expiry_timestamp_seconds"]
    assert expiry == [
        (
            (
                "pool_token_expiry_timestamp_seconds",
                (("name", "rotating"), ("scope", "tenant:vision")),
            ),
            EXPIRES.timestamp(),
        )
    ]  # tokens that never expire have no sample
    tokens = (deployment.folder / TOKENS).read_text(encoding="utf-8")
    assert "sha256" in tokens
    for line in tokens.splitlines():
        if line.startswith("sha256"):
            assert line.split('"')[1] not in text
    # A tenant reads its subtree's usage, nothing about the process or its tokens.
    with serve.client(deployment.tenants["vision"]) as http:
        tenant = http.get("/metrics").text
    assert "pool_committed_joules" in tenant
    for name in ("pool_build_info", "pool_ready", "pool_token_expiry"):
        assert name not in tenant
