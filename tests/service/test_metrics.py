"""`/metrics` in Prometheus's conventions, against a real `pool serve`: parsed with
prometheus-client's own text parser, every figure checked against the HTTP API's and
`pool usage --json`'s answer for the same state (one answer everywhere).

- base units: joules (µJ / 10⁶, at the exposition edge only), timestamps in seconds;
- counters end in `_total`; verdicts carry entitlement, verdict and reason;
- a figure nobody has (no `limit_uj`, never witnessed) is absent, never 0 or +Inf;
- commit latency is a histogram with one observation per durable answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from joulepool.claim import Claim
from joulepool.deployment.open import open_pool
from joulepool.grade import Energy, Grade
from joulepool.ledger.keys import KeyPair, load_key_file
from joulepool.ledger.witness import sign_witness
from joulepool.service.metrics import USAGE_GAUGES, exported_names
from tests.support.servers import Deployment, Serve, pool_cli, serving, start_serve

MJ = 10**12
SIGNED_MS = 1_796_000_000_123


def claim(cid: str, ent: str, uj: int, grade: str = "HwShunt", gang: int = 1) -> dict[str, Any]:
    return {
        "id": cid,
        "entitlement": ent,
        "gang_size": gang,
        "devices_per_member": 1,
        "estimate": {"uj": uj, "grade": grade},
    }


# (claim, expected verdict, reason) in the example tree: vision 50 MJ, language 30 MJ with a
# 60 MJ limit, robotics 20 MJ and 4 devices.
SCENARIO = [
    (claim("v-1", "vision", 10 * MJ), "admit", ""),
    (claim("v-2", "vision", 5 * MJ), "admit", ""),
    (claim("l-1", "language", 35 * MJ), "admit", ""),  # borrows 5 MJ
    (claim("l-2", "language", 30 * MJ), "queue", "limit_reached"),
    (claim("r-1", "robotics", MJ, gang=5), "deny", "devices_exceed_guarantee"),
    (claim("r-2", "robotics", 25 * MJ, grade="Estimator"), "deny", "unobserved_cannot_borrow"),
    (claim("r-3", "robotics", 2 * MJ), "admit", ""),
    (claim("x-1", "nosuchteam", MJ), "deny", "unknown_entitlement"),
]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Deployment, Serve]]:
    run = serving(tmp_path_factory.mktemp("metrics") / "d")
    deployment, serve = next(run)
    try:
        with serve.client(deployment.operator) as ops:
            for body, verdict, reason in SCENARIO:
                answer = ops.post("/v1/claims", json=body).json()
                assert (answer["verdict"], answer.get("reason", "")) == (verdict, reason), answer
            rel = ops.post(
                "/v1/claims/v-1/release", json={"actual": {"uj": 7 * MJ, "grade": "HwShunt"}}
            )
            assert rel.status_code == 200, rel.text
        yield deployment, serve
    finally:
        run.close()


def scrape(serve: Serve, token: str) -> dict[str, list[Sample]]:
    with serve.client(token) as http:
        r = http.get("/metrics")
    assert r.status_code == 200, r.text
    return {f.name: f.samples for f in text_string_to_metric_families(r.text)}


def by_entitlement(samples: list[Sample]) -> dict[str, float]:
    return {s.labels["entitlement"]: s.value for s in samples}


def test_usage_gauges_equal_the_api_and_pool_usage_in_joules(
    served: tuple[Deployment, Serve],
) -> None:
    deployment, serve = served
    families = scrape(serve, deployment.operator)
    with serve.client(deployment.operator) as ops:
        api = {e["id"]: e for e in ops.get("/v1/entitlements").json()["entitlements"]}
    cli = pool_cli("usage", str(deployment.folder), "--json")
    assert cli.returncode == 0, cli.stderr
    usage = {e["id"]: e for e in json.loads(cli.stdout)["entitlements"]}
    assert {k: v["usage"] for k, v in usage.items()} == {k: v["usage"] for k, v in api.items()}
    for name, _, field, energy in USAGE_GAUGES:
        family = name.removesuffix("_total")
        got = by_entitlement(families.get(family, []))
        want = {}
        for node, row in api.items():
            value = row["usage"].get(field, row.get(field))
            if value is not None:
                want[node] = value / 10**6 if energy else value
        assert got == want, name
    joules = by_entitlement(families["pool_committed_joules"])
    assert joules["vision"] == 12_000_000.0  # 7 MJ charged + 5 MJ reserved, in joules
    assert by_entitlement(families["pool_borrowed_joules"])["language"] == 5_000_000.0
    # No limit is no sample: never 0 or +Inf standing in for "none".
    assert set(by_entitlement(families["pool_limit_joules"])) == {"language"}


def test_period_and_ledger_figures_equal_the_api(served: tuple[Deployment, Serve]) -> None:
    deployment, serve = served
    families = scrape(serve, deployment.operator)
    with serve.client(deployment.operator) as ops:
        period = ops.get("/v1/entitlements/vision").json()["usage"]["period"]
        ledger = ops.get("/v1/ledger").json()
        entries = ops.get("/v1/ledger/entries").content
    assert families["pool_period_start_timestamp_seconds"][0].value == period["start_ms"] / 1000
    assert families["pool_period_end_timestamp_seconds"][0].value == period["end_ms"] / 1000
    assert families["pool_ledger_length"][0].value == ledger["length"] == 5  # 4 admits, 1 release
    from joulepool.conformance.ledger_ops import split_ledger
    from joulepool.ledger.cose import open_envelope

    raw, damage = split_ledger(entries)
    assert damage is None
    last = open_envelope(raw[-1]).core
    assert families["pool_ledger_last_append_timestamp_seconds"][0].value == last["at_ms"] / 1000
    # Self-attested: no witnessed length, rather than a 0 that reads as "witnessed through 0".
    assert ledger["attestation"] == "self-attested"
    assert "pool_ledger_witnessed_length" not in families
    assert families["pool_appends"][0].name == "pool_appends_total"
    assert families["pool_fsyncs"][0].name == "pool_fsyncs_total"


def test_verdicts_are_counted_by_entitlement_verdict_and_reason(
    served: tuple[Deployment, Serve],
) -> None:
    deployment, serve = served
    samples = scrape(serve, deployment.operator)["pool_verdicts"]
    assert {s.name for s in samples} == {"pool_verdicts_total"}
    got = {
        (s.labels["entitlement"], s.labels["verdict"], s.labels["reason"]): s.value for s in samples
    }
    want: dict[tuple[str, str, str], float] = {}
    for body, verdict, reason in SCENARIO:
        ent = body["entitlement"] if body["entitlement"] != "nosuchteam" else ""
        want[ent, verdict, reason] = want.get((ent, verdict, reason), 0) + 1
    assert got == want


def test_commit_latency_is_a_histogram_of_every_durable_answer(
    served: tuple[Deployment, Serve],
) -> None:
    deployment, serve = served
    samples = scrape(serve, deployment.operator)["pool_commit_seconds"]
    count = next(s.value for s in samples if s.name == "pool_commit_seconds_count")
    assert count == len(SCENARIO) + 1  # every submission and the release
    buckets = [s for s in samples if s.name == "pool_commit_seconds_bucket"]
    assert buckets[-1].labels["le"] == "+Inf" and buckets[-1].value == count
    assert all(a.value <= b.value for a, b in pairwise(buckets))


def test_a_tenant_reads_its_subtree_and_its_own_verdicts_only(
    served: tuple[Deployment, Serve],
) -> None:
    deployment, serve = served
    mine = scrape(serve, deployment.tenants["language"])
    everything = scrape(serve, deployment.operator)
    for name, *_ in USAGE_GAUGES:
        assert set(by_entitlement(mine.get(name, []))) <= {"language"}, name
        if name in everything and "language" in by_entitlement(everything[name]):
            assert by_entitlement(mine[name]) == {
                "language": by_entitlement(everything[name])["language"]
            }
    assert {s.labels["entitlement"] for s in mine["pool_verdicts"]} == {"language"}
    for hidden in ("pool_ledger_length", "pool_commit_seconds", "pool_appends", "pool_fsyncs"):
        assert hidden not in mine


def test_every_exported_name_is_listed_for_dashboards(
    served: tuple[Deployment, Serve],
) -> None:
    deployment, serve = served
    names = {s.name for samples in scrape(serve, deployment.operator).values() for s in samples}
    assert names <= exported_names(), names - exported_names()


def test_witnessed_length_and_snapshot_age_appear_once_known(tmp_path: Path) -> None:
    deployment = Deployment.create(tmp_path / "d")
    pool = open_pool(deployment.folder)
    try:
        pool.submit(Claim("s-1", "vision", 1, 1, Energy(MJ, Grade.HwShunt)))
        assert pool.seal_snapshot() == 1
    finally:
        pool.close()
    serve = start_serve(deployment.folder)
    try:
        families = scrape(serve, deployment.operator)
        assert families["pool_snapshot_length"][0].value == 1
        assert 0 <= families["pool_snapshot_age_seconds"][0].value < 600
        assert "pool_ledger_witnessed_length" not in families
        witness = KeyPair.generate("auditor")
        steward = load_key_file(deployment.folder / "steward.pub")
        with serve.client(deployment.operator) as ops:
            assert ops.post("/v1/claims", json=claim("s-2", "vision", MJ)).json()["seq"] == 1
            head = ops.get("/v1/ledger").json()
            receipt = sign_witness(
                witness,
                "steward",
                bytes.fromhex(head["head_hex"]),
                head["length"],
                SIGNED_MS,
                steward.public_key,
            )
            payload = {
                "witness": "auditor",
                "public_key_hex": witness.public_key.hex(),
                "receipt_hex": receipt.hex(),
            }
            assert ops.post("/v1/witness-receipts", json=payload).status_code == 200
            assert ops.post("/v1/claims", json=claim("s-3", "vision", MJ)).json()["seq"] == 2
            ledger = ops.get("/v1/ledger").json()
        families = scrape(serve, deployment.operator)
        assert ledger["witnessed_through"] == 2
        assert families["pool_ledger_witnessed_length"][0].value == 2
        assert families["pool_ledger_witnessed_timestamp_seconds"][0].value == SIGNED_MS / 1000
        with serve.client(deployment.operator) as ops:
            shown = ops.get("/v1/dashboard").json()["ledger"]
        assert (shown["witness"], shown["witnessed_at_ms"]) == ("auditor", SIGNED_MS)
        assert shown["witnessed_through"] == 2
        assert families["pool_ledger_length"][0].value == 3
    finally:
        serve.kill()
