"""DESIGN.md §3 "Edge cases, pinned", on the surfaces beside `pool exec`.

`pool exec` is held to each pinned line by the conformance vectors (conformance/vectors/,
the files the DESIGN.md §3 lines name); here the same lines are checked on `Pool` (and the
library objects it takes), the `pool` command line and the HTTP API, so that every surface
gives the same answer. Test names carry the line: `pin1` figures in [0, 2**64 - 1], `pin2`
non-empty ids and classes, `pin3` `empty_class`, `pin4` a receipt at length 0, `pin5`
priority, `pin6` null optional fields, `pin7` a ledger entry's first check.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from joulepool.admission import Admit
from joulepool.claim import Claim
from joulepool.cli import main
from joulepool.conformance.ledger_ops import replay_bytes, split_ledger
from joulepool.deployment.init import init_deployment
from joulepool.deployment.witnesses import KeptReceipt, attestation
from joulepool.errors import InvalidInput, InvalidTree, LedgerRefused
from joulepool.estimate import Declined, DeclineReason, Derived
from joulepool.events import event_from_json
from joulepool.grade import Energy
from joulepool.ledger.cbor import CborRefused
from joulepool.ledger.cose import GENESIS, content_address, open_envelope
from joulepool.ledger.keys import KeyPair, load_key_file, write_key_file
from joulepool.ledger.witness import (
    Attestation,
    AttestationReport,
    best_attestation,
    check_witness,
    sign_witness,
)
from joulepool.pool import Pool
from joulepool.preemption import Workload, preemption_order
from joulepool.stores.memory import MemoryStore
from joulepool.tree import Entitlement, Tree
from tests.support.builders import H, claim, ent, team_tree
from tests.support.faults import claim as claim_json
from tests.support.ledgers import STEWARD, WITNESS, admitted, seal_all
from tests.support.servers import Deployment, Serve, pool_cli, serving

TOP = 2**64 - 1
"""The largest figure: the largest unsigned integer a ledger entry carries."""
OVER = 2**64
MJ = 10**12
VECTORS = Path(__file__).resolve().parents[2] / "conformance" / "vectors"


def memory_pool(tree: Tree | None = None, clock_ms: int = 1_764_000_000_000) -> Pool:
    """A pool over a ledger in memory, sealed by the tests' steward."""
    return Pool(tree or team_tree(), STEWARD, MemoryStore(), clock=lambda: clock_ms)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    """`pool ARGS --json` in this process: its exit status, its JSON (or None), its stderr."""
    code = main([*args, "--json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def append_entitlement(folder: Path, **fields: object) -> None:
    """Add an `[[entitlement]]` table to a deployment's pool.toml, figures written as given."""
    lines = ["", "[[entitlement]]"]
    for name, value in fields.items():
        lines.append(f"{name} = {json.dumps(value)}")
    with (folder / "pool.toml").open("a", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")


@pytest.fixture
def deployment_dir(tmp_path: Path) -> Path:
    """A fresh deployment: the example tree (research > vision, language, robotics)."""
    folder = tmp_path / "deploy"
    init_deployment(folder, "steward")
    return folder


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Deployment, Serve]]:
    yield from serving(tmp_path_factory.mktemp("pinned") / "d")


def http_claim(claim_id: str, ent_id: str = "vision", uj: int = 1, **extra: Any) -> dict[str, Any]:
    """`POST /v1/claims`'s one-device HwShunt claim, with fields replaced by `extra`."""
    return claim_json(claim_id, ent_id, uj) | extra


def assert_422_invalid_input(response: Any, field: str) -> None:
    assert response.status_code == 422, response.text
    assert response.json()["error"] == "invalid_input"
    assert field in response.json()["detail"]


# -- pin 1: every figure is an integer in [0, 2**64 - 1] ---------------------------------------


def test_s3_pin1_pool_submit_never_takes_a_figure_past_2_64_minus_1() -> None:
    pool = memory_pool(Tree([ent("a", TOP, 4)]))
    builders: list[Callable[[], Claim]] = [
        lambda: claim("c", "a", OVER),
        lambda: claim("c", "a", 1, gang=OVER),
        lambda: claim("c", "a", 1, per_member=OVER),
    ]
    for build in builders:
        with pytest.raises(InvalidInput) as refused:
            pool.submit(build())
        assert refused.value.code == "invalid_input"
    with pytest.raises(InvalidInput):
        pool.release("c", Energy(OVER, H))
    assert pool.length == 0


def test_s3_pin1_pool_admits_seals_and_replays_figures_at_2_64_minus_1() -> None:
    store = MemoryStore()
    tree = Tree([Entitlement("a", TOP, TOP, TOP)])
    pool = Pool(tree, STEWARD, store, clock=lambda: TOP)
    decision = pool.submit(claim("c", "a", TOP))
    assert isinstance(decision.verdict, Admit)
    assert decision.verdict.reserved == Energy(TOP, H)
    reopened = Pool(tree, STEWARD, MemoryStore(list(store.entries())))
    assert reopened.usage_of("a").spent_uj == TOP


@pytest.mark.parametrize("field", ["guarantee_uj", "guarantee_devices", "over_quota_weight"])
def test_s3_pin1_a_tree_figure_past_2_64_minus_1_is_invalid_input(field: str) -> None:
    node: dict[str, Any] = {
        "id": "a",
        "guarantee_uj": 1,
        "guarantee_devices": 1,
        "over_quota_weight": 1,
    }
    with pytest.raises(InvalidTree) as refused:
        Tree.from_json({"entitlements": [node | {field: OVER}]})
    assert refused.value.code == "invalid_input"
    assert Tree.from_json({"entitlements": [node | {field: TOP}]})["a"].id == "a"


def test_s3_pin1_cli_refuses_figures_past_2_64_minus_1(
    deployment_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = str(deployment_dir)
    for extra in (["--estimate-uj", str(OVER)], ["--estimate-uj", "1", "--gang-size", str(OVER)]):
        code, _, err = cli(capsys, "admit", folder, "--id", "c", "--entitlement", "vision", *extra)
        assert (code, err.startswith("pool: invalid_input:")) == (1, True), err
    code, _, err = cli(capsys, "estimate", folder, "train", "--required", str(OVER))
    assert (code, err.startswith("pool: invalid_input:")) == (1, True), err
    code, _, err = cli(capsys, "attribute", "--total-uj", str(OVER), "--grade", "HwShunt")
    assert (code, "invalid_input" in err) == (1, True), err
    code, usage, _ = cli(capsys, "usage", folder)
    assert code == 0 and usage["length"] == 0  # nothing was sealed


def test_s3_pin1_a_pool_toml_figure_past_2_64_minus_1_is_invalid_input(
    deployment_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    append_entitlement(
        deployment_dir, id="x", guarantee_uj=OVER, guarantee_devices=1, over_quota_weight=1
    )
    code, _, err = cli(capsys, "usage", str(deployment_dir))
    assert code == 1
    assert err.startswith("pool: invalid_input:") and "guarantee_uj" in err


def test_s3_pin1_http_refuses_figures_past_2_64_minus_1(served: tuple[Deployment, Serve]) -> None:
    deployment, serve = served
    with serve.client(deployment.operator) as ops:
        assert_422_invalid_input(ops.post("/v1/claims", json=http_claim("p1", uj=OVER)), "uj")
        assert_422_invalid_input(
            ops.post("/v1/claims", json=http_claim("p1", gang_size=OVER)), "gang_size"
        )
        assert_422_invalid_input(
            ops.post("/v1/estimates", json={"class": "train", "required": OVER}), "required"
        )
        assert_422_invalid_input(
            ops.post(
                "/v1/attribution",
                json={"total": {"uj": 1, "grade": "HwShunt"}, "occupants": {"a": OVER}},
            ),
            "occupants",
        )
        assert_422_invalid_input(
            ops.post(
                "/v1/idle",
                json={
                    "policy": {"window_us": 1, "threshold_uw": OVER},
                    "workloads": [],
                },
            ),
            "threshold_uw",
        )
        admitted_ = ops.post("/v1/claims", json=http_claim("p1", uj=MJ))
        assert admitted_.json()["verdict"] == "admit"
        assert_422_invalid_input(
            ops.post("/v1/claims/p1/release", json={"actual": {"uj": OVER, "grade": "HwShunt"}}),
            "uj",
        )
        shares = ops.post(
            "/v1/attribution",
            json={"total": {"uj": 11, "grade": "HwShunt"}, "occupants": {"a": TOP, "b": TOP}},
        )
        assert shares.status_code == 200
        assert shares.json()["shares"]["a"] == {"uj": 6, "grade": "ModelBased"}


# -- pin 2: ids and classes are non-empty strings ---------------------------------------------


@pytest.mark.parametrize(
    ("fields", "name"),
    [
        ({"claim_id": ""}, "id"),
        ({"entitlement": ""}, "entitlement"),
        ({"class_": ""}, "class"),
    ],
)
def test_s3_pin2_an_empty_claim_id_entitlement_or_class_is_invalid_input(
    fields: dict[str, str], name: str
) -> None:
    args: dict[str, Any] = {"claim_id": "c", "entitlement": "a", "uj": 1} | fields
    with pytest.raises(InvalidInput) as refused:
        memory_pool().submit(claim(**args))
    assert refused.value.code == "invalid_input"
    assert refused.value.field == name


def test_s3_pin2_in_a_tree_an_empty_id_or_parent_is_invalid_tree() -> None:
    builders: list[Callable[[], Tree]] = [
        lambda: Tree([Entitlement("", 1, 1, 1)]),
        lambda: Tree([Entitlement("a", 1, 1, 1), Entitlement("b", 1, 1, 1, parent="")]),
        lambda: Tree.from_json({"entitlements": [ent("a", 1, 1).to_json() | {"parent": ""}]}),
    ]
    for build in builders:
        with pytest.raises(InvalidTree) as refused:
            build()
        assert refused.value.code == "invalid_tree"


@pytest.mark.parametrize("bad", [-1, 1.5, True, "1"])
def test_s3_pin2_a_negative_or_non_integer_tree_figure_is_invalid_input(bad: object) -> None:
    with pytest.raises(InvalidTree) as refused:
        Tree.from_json(
            {
                "entitlements": [
                    {"id": "a", "guarantee_uj": bad, "guarantee_devices": 1, "over_quota_weight": 1}
                ]
            }
        )
    assert refused.value.code == "invalid_input"


@pytest.mark.parametrize(
    "args",
    [
        ["--id", "", "--entitlement", "vision"],
        ["--id", "c", "--entitlement", ""],
        ["--id", "c", "--entitlement", "vision", "--class", ""],
    ],
    ids=["id", "entitlement", "class"],
)
def test_s3_pin2_cli_admit_refuses_an_empty_id_entitlement_or_class(
    deployment_dir: Path, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    code, _, err = cli(capsys, "admit", str(deployment_dir), *args, "--estimate-uj", "1")
    assert code == 1
    assert err.startswith("pool: invalid_input:"), err


@pytest.mark.parametrize(
    ("node", "code"),
    [
        ({"id": "x", "parent": ""}, "invalid_tree"),
        ({"id": ""}, "invalid_tree"),
        ({"id": "x", "guarantee_devices": -1}, "invalid_input"),
    ],
    ids=["empty-parent", "empty-id", "negative-figure"],
)
def test_s3_pin2_cli_refuses_a_pool_toml_tree_by_the_pinned_name(
    deployment_dir: Path, capsys: pytest.CaptureFixture[str], node: dict[str, Any], code: str
) -> None:
    append_entitlement(
        deployment_dir,
        **({"guarantee_uj": 1, "guarantee_devices": 1, "over_quota_weight": 1} | node),
    )
    status, _, err = cli(capsys, "usage", str(deployment_dir))
    assert status == 1
    assert err.startswith(f"pool: {code}:"), err


def test_s3_pin2_http_refuses_an_empty_id_entitlement_or_class(
    served: tuple[Deployment, Serve],
) -> None:
    deployment, serve = served
    with serve.client(deployment.operator) as ops:
        assert_422_invalid_input(ops.post("/v1/claims", json=http_claim("")), "id")
        assert_422_invalid_input(
            ops.post("/v1/claims", json=http_claim("e1", ent_id="")), "entitlement"
        )
        assert_422_invalid_input(
            ops.post("/v1/claims", json=http_claim("e1") | {"class": ""}), "class"
        )


# -- pin 3: derive_estimate with class missing, null or empty declines empty_class -------------

EMPTY_CLASS = {"declined": "empty_class", "observations": 0, "evidence": 0}


def test_s3_pin3_pool_estimate_declines_a_missing_or_empty_class_with_both_counts() -> None:
    pool = memory_pool()
    for i in range(3):
        pool.submit(claim(f"t{i}", "a", 10, class_="train"))
        pool.release(f"t{i}", Energy(10 + i, H))
    assert isinstance(pool.estimate("train"), Derived)
    for class_ in (None, ""):
        declined = pool.estimate(class_)
        assert declined == Declined(DeclineReason.empty_class, 0, 0)
        assert declined.to_json() == EMPTY_CLASS


def test_s3_pin3_cli_estimate_declines_a_missing_or_empty_class(
    deployment_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = str(deployment_dir)
    for i in range(3):
        code, _, err = cli(
            capsys,
            "admit",
            folder,
            "--id",
            f"t{i}",
            "--entitlement",
            "vision",
            "--estimate-uj",
            "10",
            "--class",
            "train",
        )
        assert code == 0, err
        code, _, err = cli(
            capsys, "release", folder, f"t{i}", "--actual-uj", "10", "--grade", "HwShunt"
        )
        assert code == 0, err
    code, derived, _ = cli(capsys, "estimate", folder, "train")
    assert (code, derived["evidence"]) == (0, 3)
    for given in ([], [""]):
        code, declined, err = cli(capsys, "estimate", folder, *given)
        assert (code, declined) == (3, EMPTY_CLASS), err
    # And for people: no traceback, the reason named.
    proc = pool_cli("estimate", folder)
    assert proc.returncode == 3 and "empty_class" in proc.stdout and proc.stderr == ""


def test_s3_pin3_http_estimates_decline_a_missing_null_or_empty_class(
    served: tuple[Deployment, Serve],
) -> None:
    deployment, serve = served
    with serve.client(deployment.operator) as ops:
        for body in ({}, {"class": None}, {"class": ""}, {"class": "", "entitlement": "vision"}):
            r = ops.post("/v1/estimates", json=body)
            assert (r.status_code, r.json()) == (200, EMPTY_CLASS), body
    with serve.client(deployment.tenants["vision"]) as tenant:
        r = tenant.post("/v1/estimates", json={"entitlement": "vision"})
        assert (r.status_code, r.json()) == (200, EMPTY_CLASS)


# -- pin 4: a witness receipt at length 0 covers no entry ---------------------------------------


def test_s3_pin4_a_receipt_at_length_0_leaves_the_ledger_self_attested() -> None:
    ledger = seal_all([admitted("c1"), admitted("c2")])
    heads = [GENESIS, *(content_address(e) for e in ledger)]
    zero = sign_witness(WITNESS, "steward", GENESIS, 0, 0, STEWARD.public_key)
    for length in (0, 2):
        report = check_witness(
            zero,
            "auditor",
            WITNESS.public_key,
            "steward",
            STEWARD.public_key,
            length,
            lambda n: heads[n],
        )
        assert report.to_json() == {"attestation": "self-attested", "length": length}
        assert report.error is None and report.through is None
    kept = [KeptReceipt("auditor", WITNESS.public_key, zero)]
    graded = attestation(kept, "steward", STEWARD.public_key, 2, lambda n: heads[n])
    assert graded.to_json() == {"attestation": "self-attested", "length": 2}
    # Even a report claiming "witnessed through 0" is not taken as witnessed.
    through_zero = AttestationReport(Attestation.witnessed, 2, through=0)
    assert best_attestation([through_zero], 2).attestation is Attestation.self_attested


def test_s3_pin4_cli_witness_check_and_ledger_verify_stay_self_attested_at_length_0(
    deployment_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = str(deployment_dir / "ledger.cbor")
    witness_key, witness_pub = tmp_path / "auditor.key", tmp_path / "auditor.pub"
    key = KeyPair.generate("auditor")
    write_key_file(witness_key, key)
    write_key_file(witness_pub, key.public())
    receipt = tmp_path / "auditor-0.receipt"
    code, signed, err = cli(
        capsys, "witness", "sign", ledger, "--witness-key", str(witness_key), "--out", str(receipt)
    )
    assert (code, signed["length"]) == (0, 0), err
    admit = ["--id", "c", "--entitlement", "vision", "--estimate-uj", "1"]
    code, _, err = cli(capsys, "admit", str(deployment_dir), *admit)
    assert code == 0, err
    check = ["--witness-key", str(witness_pub), "--receipt", str(receipt)]
    code, checked, err = cli(capsys, "witness", "check", ledger, *check)
    assert (code, checked) == (0, {"attestation": "self-attested", "length": 1}), err
    code, verified, err = cli(capsys, "ledger", "verify", ledger, *check)
    assert code == 0, err
    assert verified["attestation"] == "self-attested"
    assert "witnessed_through" not in verified


def test_s3_pin4_http_a_receipt_at_length_0_is_no_error_and_witnesses_nothing(
    served: tuple[Deployment, Serve],
) -> None:
    deployment, serve = served
    steward = load_key_file(deployment.folder / "steward.pub")
    witness = KeyPair.generate("auditor0")
    receipt = sign_witness(witness, "steward", GENESIS, 0, 0, steward.public_key)
    with serve.client(deployment.operator) as ops:
        length = ops.get("/v1/ledger").json()["length"]
        r = ops.post(
            "/v1/witness-receipts",
            json={
                "witness": "auditor0",
                "public_key_hex": witness.public_key.hex(),
                "receipt_hex": receipt.hex(),
            },
        )
        assert (r.status_code, r.json()) == (
            200,
            {"attestation": "self-attested", "length": length},
        )
        ledger = ops.get("/v1/ledger").json()
    assert ledger["attestation"] == "self-attested"
    assert "witnessed_through" not in ledger


# -- pin 5: priority is a figure -----------------------------------------------------------------


@pytest.mark.parametrize("bad", [OVER, -1, 1.0, None])
def test_s3_pin5_an_entitlement_priority_outside_the_figures_is_invalid_input(bad: object) -> None:
    with pytest.raises(InvalidTree) as refused:
        Entitlement("a", 1, 1, 1, priority=bad)  # type: ignore[arg-type]
    assert refused.value.code == "invalid_input"
    assert ent("a", 1, 1, priority=TOP).priority == TOP


def test_s3_pin5_a_workload_priority_is_a_figure() -> None:
    with pytest.raises(InvalidInput):
        Workload("a", 1, 0, OVER)
    with pytest.raises(InvalidInput):
        Workload("a", 1, 0, -1)
    assert preemption_order([Workload("a", 5, 0, TOP), Workload("b", 5, 0, 0)]) == ["b", "a"]


def test_s3_pin5_cli_preempt_and_pool_toml_take_priority_as_a_figure(
    deployment_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workloads = tmp_path / "workloads.json"
    for priority, status in ((OVER, 1), (-1, 1), (TOP, 0)):
        item = {"key": "a", "spent_uj": 1, "completed_units": 0, "priority": priority}
        workloads.write_text(json.dumps([item]))
        code, out, err = cli(capsys, "preempt", "--workloads", str(workloads))
        assert code == status, err
        if status:
            assert "invalid_input" in err and "priority" in err
        else:
            assert out == {"order": ["a"], "costs": {"a": None}}
    append_entitlement(
        deployment_dir,
        id="x",
        guarantee_uj=1,
        guarantee_devices=1,
        over_quota_weight=1,
        priority=OVER,
    )
    code, _, err = cli(capsys, "usage", str(deployment_dir))
    assert code == 1 and err.startswith("pool: invalid_input:") and "priority" in err


def test_s3_pin5_http_preemption_takes_priority_as_a_figure(
    served: tuple[Deployment, Serve],
) -> None:
    deployment, serve = served

    def order(priority: object) -> Any:
        item = {"key": "a", "spent_uj": 1, "completed_units": 0, "priority": priority}
        with serve.client(deployment.operator) as ops:
            return ops.post("/v1/preemption-order", json={"workloads": [item]})

    assert_422_invalid_input(order(OVER), "priority")
    assert_422_invalid_input(order(-1), "priority")
    assert_422_invalid_input(order(None), "priority")  # required: null is not absent here
    assert order(TOP).json() == {"order": ["a"], "costs": {"a": None}}


# -- pin 6: in JSON input, an optional field given as null is absent ---------------------------


def test_s3_pin6_the_json_readers_pool_takes_read_a_null_optional_field_as_absent() -> None:
    body = claim("c", "a", 10).to_json()
    read = Claim.from_json(body | {"class": None})
    assert read == Claim.from_json(body) and read.class_ is None
    assert memory_pool().submit(read).verdict == memory_pool().submit(Claim.from_json(body)).verdict
    node = {"id": "a", "guarantee_uj": 1, "guarantee_devices": 1, "over_quota_weight": 1}
    nulls = node | {"parent": None, "limit_uj": None, "priority": None}
    assert Entitlement.from_json(nulls) == Entitlement.from_json(node) == Entitlement("a", 1, 1, 1)
    event = admitted("c", class_=None).to_json()
    assert event_from_json(event | {"class": None}) == event_from_json(event)
    with pytest.raises(InvalidInput) as refused:
        Claim.from_json(body | {"gang_size": None})
    assert refused.value.field == "claim.gang_size"


def test_s3_pin6_http_reads_a_null_optional_field_as_absent(
    served: tuple[Deployment, Serve],
) -> None:
    deployment, serve = served
    with serve.client(deployment.operator) as ops:
        r = ops.post("/v1/claims", json=http_claim("n1") | {"class": None})
        assert (r.status_code, r.json()["verdict"]) == (200, "admit")
        state = ops.get("/v1/claims/n1").json()
        assert state["state"] == "running"
        assert_422_invalid_input(ops.post("/v1/claims", json=http_claim("n2") | {"id": None}), "id")
        r = ops.post(
            "/v1/estimates", json={"class": "train", "entitlement": None, "required": None}
        )
        assert r.status_code == 200 and r.json()["declined"] == "insufficient_evidence"
        observation = {
            "key": "w",
            "held_devices": 1,
            "observed_us": 10,
            "energy": {"uj": 0, "grade": "HwShunt"},
        }
        unconfigured = {"verdict": "no_verdict", "reason": "unconfigured", "mean_uw": 0}
        for policy in (None, {"window_us": None, "threshold_uw": None}, {"threshold_uw": None}):
            r = ops.post("/v1/idle", json={"policy": policy, "workloads": [observation]})
            assert r.status_code == 200, r.text
            assert r.json()["verdicts"]["w"] == unconfigured, policy


# -- pin 7: a ledger entry's first check ---------------------------------------------------------

PINNED_LEDGER_VECTORS = sorted(
    p.stem
    for p in VECTORS.glob("*.json")
    if p.stem.startswith(("13-6.5-malformed-", "14-6.6-non-canonical-repeated-key"))
    and p.stem
    not in ("13-6.5-malformed-not-cose", "13-6.5-malformed-truncated", "13-6.5-malformed-fields")
)
VECTOR_STEWARD = KeyPair.from_seed("steward-1", bytes(range(32)))


def ledger_vector(name: str) -> tuple[bytes, dict[str, Any]]:
    doc = json.loads((VECTORS / f"{name}.json").read_text(encoding="utf-8"))
    assert doc["case"]["public_key_hex"] == VECTOR_STEWARD.public_key.hex()
    return bytes.fromhex(doc["case"]["ledger_hex"]), doc["expect"]


def test_s3_pin7_every_pinned_first_check_has_its_vector() -> None:
    for name in (
        "13-6.5-malformed-tag-55799-wrapper",
        "13-6.5-malformed-untagged-array",
        "13-6.5-malformed-protected-header-true-key",
        "13-6.5-malformed-payload-array",
        "13-6.5-malformed-payload-integer",
        "13-6.5-malformed-payload-float",
        "13-6.5-malformed-payload-trailing-bytes",
        "14-6.6-non-canonical-repeated-key",
        "13-6.5-malformed-empty-class",
    ):
        assert name in PINNED_LEDGER_VECTORS


@pytest.mark.parametrize("name", PINNED_LEDGER_VECTORS)
def test_s3_pin7_pool_replay_and_cli_refuse_the_entry_by_the_pinned_name(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, expect = ledger_vector(name)
    entries, tail = split_ledger(data)
    assert tail is None  # every entry is one whole CBOR item: the fault is inside it
    refused = (expect["index"], expect["error"])
    with pytest.raises(LedgerRefused) as by_replay:
        replay_bytes(data, VECTOR_STEWARD.kid, VECTOR_STEWARD.public_key)
    assert (by_replay.value.index, by_replay.value.error) == refused
    with pytest.raises(LedgerRefused) as by_pool:
        Pool(team_tree(), VECTOR_STEWARD, MemoryStore(entries))
    assert (by_pool.value.index, by_pool.value.error) == refused
    if expect["error"] == "malformed" and not name.endswith("empty-class"):
        with pytest.raises(CborRefused) as by_envelope:
            open_envelope(entries[expect["index"]])
        assert by_envelope.value.error == "malformed"
    ledger, key = tmp_path / "ledger.cbor", tmp_path / "steward.pub"
    ledger.write_bytes(data)
    write_key_file(key, VECTOR_STEWARD.public())
    code, out, err = cli(capsys, "ledger", "verify", str(ledger), "--key", str(key))
    assert code == 1, err
    assert (out["ok"], out["index"], out["error"]) == (False, *refused)
