"""deploy/grafana/joulepool.json and deploy/prometheus/prometheus.yml: every
PromQL expression of the Grafana board names only metrics `pool serve` exports, checked
against the declared list (`metrics.exported_names`) and against a real scrape; the
example scrape configuration sends the bearer token from a file."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from prometheus_client.parser import text_string_to_metric_families

from joulepool.service.metrics import exported_names
from tests.support.servers import Deployment, Serve, serving

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
    "unless", "offset", "inf", "nan",
}  # fmt: skip
# Series present only once their figure is known: a witnessed ledger, a kept snapshot.
ONLY_WHEN_KNOWN = {
    "pool_actions_total",  # a sample per (rule, kind, outcome) once one is recorded
    "pool_ledger_witnessed_length",
    "pool_ledger_witnessed_timestamp_seconds",
    "pool_snapshot_age_seconds",
}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (not its functions, labels or keywords)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        if text[match.end() :].lstrip().startswith("("):
            continue  # a function
        if match.group(0) not in KEYWORDS:
            names.add(match.group(0))
    return names


def board_queries() -> list[str]:
    board = json.loads((DEPLOY / "grafana" / "joulepool.json").read_text(encoding="utf-8"))
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            found = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", variable["definition"])
            assert found is not None, variable["definition"]
            exprs.append(found.group(1))
    return exprs


def test_metric_names_reads_metrics_not_functions_or_labels() -> None:
    expr = 'histogram_quantile(0.9, sum by (le) (rate(pool_commit_seconds_bucket{x="a b"}[5m])))'
    assert metric_names(expr) == {"pool_commit_seconds_bucket"}
    assert metric_names("time() - a_b + c / (d > 0)") == {"a_b", "c", "d"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Deployment, Serve]]:
    yield from serving(tmp_path_factory.mktemp("grafana") / "d")


def test_every_grafana_query_names_only_exported_metrics(
    served: tuple[Deployment, Serve],
) -> None:
    deployment, serve = served
    queries = board_queries()
    used = set().union(*(metric_names(q) for q in queries))
    assert len(queries) >= 15 and len(used) >= 15, sorted(used)
    assert used <= exported_names(), sorted(used - exported_names())
    claim: dict[str, Any] = {"id": "g-1", "entitlement": "vision", "gang_size": 1}
    claim |= {"devices_per_member": 1, "estimate": {"uj": 10**12, "grade": "HwShunt"}}
    with serve.client(deployment.operator) as ops:
        assert ops.post("/v1/claims", json=claim).json()["verdict"] == "admit"
        text = ops.get("/metrics").text
    scraped = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    assert used - ONLY_WHEN_KNOWN <= scraped, sorted(used - ONLY_WHEN_KNOWN - scraped)


def test_the_board_covers_usage_verdicts_ledger_and_latency() -> None:
    board = json.loads((DEPLOY / "grafana" / "joulepool.json").read_text(encoding="utf-8"))
    by_title = {p["title"]: " ".join(t["expr"] for t in p["targets"]) for p in board["panels"]}
    joined = " ".join(by_title.values())
    for needed in ("pool_committed_joules", "pool_guarantee_joules", "pool_borrowed_joules"):
        assert needed in joined
    assert 'verdict="queue"' in by_title["Why claims are queued"]
    assert "sum by (reason)" in by_title["Why claims are queued"]
    assert "pool_commit_seconds_bucket" in by_title["Commit latency"]


def test_the_example_scrape_config_sends_the_token_from_a_file() -> None:
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text(encoding="utf-8"))
    (job,) = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    assert job["authorization"]["type"] == "Bearer"
    assert job["authorization"]["credentials_file"].startswith("/")
    assert "credentials" not in job["authorization"]  # never the token itself
    assert job["static_configs"][0]["targets"] == ["127.0.0.1:7460"]


# Counted by each process for itself (its own verdicts, commits, appends): summed over replicas.
PER_PROCESS = {"pool_verdicts_total", "pool_appends_total", "pool_fsyncs_total"}


def test_the_board_reads_pool_state_from_one_replica_at_a_time() -> None:
    """Replicas sharing a ledger export the same usage and ledger figures: every series of
    that state is read from the one replica the `instance` variable names, so nothing is
    counted twice; per-process counters are read from all of them."""
    board = json.loads((DEPLOY / "grafana" / "joulepool.json").read_text(encoding="utf-8"))
    (instance,) = [v for v in board["templating"]["list"] if v["name"] == "instance"]
    assert not instance["multi"] and not instance["includeAll"]
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    for expr in exprs:
        for selector in re.finditer(r"\b(pool_\w+)(\{[^}]*\})?", expr):
            name, matchers = selector.group(1), selector.group(2) or ""
            shared = name not in PER_PROCESS and not name.startswith("pool_commit_seconds")
            assert ('instance="$instance"' in matchers) == shared, (name, expr)
