"""`pool exec` refuses bad input with a typed result, exit 0 and no traceback (CONFORMANCE.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from joulepool.conformance.execute import exec_bytes

TREE = {
    "entitlements": [
        {"id": "a", "guarantee_uj": 100, "guarantee_devices": 2, "over_quota_weight": 1}
    ]
}
CLAIM = {
    "id": "c",
    "entitlement": "a",
    "gang_size": 1,
    "devices_per_member": 1,
    "estimate": {"uj": 5, "grade": "HwShunt"},
}


def decide_case(**changes: Any) -> dict[str, Any]:
    case: dict[str, Any] = {"op": "decide", "tree": TREE, "usage": {}, "claim": dict(CLAIM)}
    for key, value in changes.items():
        if key.startswith("claim_"):
            case["claim"][key[6:]] = value
        else:
            case[key] = value
    return case


def without(d: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k != key}


# (raw bytes of the case, the field the detail must name)
CORPUS: list[tuple[bytes, str]] = [
    (b"", "JSON"),
    (b"{", "JSON"),
    (b"not json", "JSON"),
    (b"\xff\xfe", "UTF-8"),
    (b"[]", "object"),
    (b'{"op": "decide", "op": "attribute"}', "op"),
    (b'{"op": "nope"}', "op"),
    (b'{"op": 7}', "op"),
    (json.dumps(without(decide_case(), "claim")).encode(), "claim"),
    (json.dumps(decide_case(extra=1)).encode(), "extra"),
    (json.dumps(decide_case(claim_uj=5)).encode(), "claim.uj"),
    (json.dumps(decide_case(claim_gang_size=1.0)).encode(), "claim.gang_size"),
    (json.dumps(decide_case(claim_gang_size=-1)).encode(), "claim.gang_size"),
    (json.dumps(decide_case(claim_gang_size=True)).encode(), "claim.gang_size"),
    (
        json.dumps(decide_case(claim_estimate={"uj": 1.5, "grade": "HwShunt"})).encode(),
        "claim.estimate.uj",
    ),
    (
        json.dumps(decide_case(claim_estimate={"uj": -1, "grade": "HwShunt"})).encode(),
        "claim.estimate.uj",
    ),
    (
        json.dumps(decide_case(claim_estimate={"uj": 1, "grade": "Measured"})).encode(),
        "claim.estimate.grade",
    ),
    (json.dumps(decide_case(claim_estimate={"uj": 1})).encode(), "claim.estimate.grade"),
    (json.dumps(decide_case(claim_id="")).encode(), "claim.id"),
    # DESIGN.md §3 (pinned): a null optional field is absent, but a null required one and an
    # empty class are refused.
    (json.dumps(decide_case(claim_class="")).encode(), "claim.class"),
    (json.dumps(decide_case(claim_gang_size=None)).encode(), "claim.gang_size"),
    (json.dumps(decide_case(claim_gang_size=2**64)).encode(), "claim.gang_size"),
    (
        json.dumps(decide_case(usage={"a": {"spent_uj": -5, "held_devices": 0}})).encode(),
        "usage.a.spent_uj",
    ),
    (json.dumps(decide_case(usage={"a": {"spent_uj": 5}})).encode(), "usage.a.held_devices"),
    (
        json.dumps(
            decide_case(
                tree={
                    "entitlements": [
                        {
                            "id": "a",
                            "guarantee_uj": 1e3,
                            "guarantee_devices": 2,
                            "over_quota_weight": 1,
                        }
                    ]
                }
            )
        ).encode(),
        "guarantee_uj",
    ),
    (
        json.dumps(
            decide_case(
                tree={
                    "entitlements": [
                        {
                            "id": "a",
                            "guarantee_uj": -1,
                            "guarantee_devices": 2,
                            "over_quota_weight": 1,
                        }
                    ]
                }
            )
        ).encode(),
        "guarantee_uj",
    ),
    (
        b'{"op": "decide", "tree": {"entitlements": []}, "usage": {}, "claim": {"id": "c", '
        b'"entitlement": "a", "gang_size": NaN, "devices_per_member": 1, "estimate": {"uj": 1, '
        b'"grade": "HwShunt"}}}',
        "NaN",
    ),
    (
        b'{"op": "attribute", "total": {"uj": 10, "grade": "HwShunt"}, "occupants": {"x": 0.5}}',
        "occupants.x",
    ),
    (b'{"op": "attribute", "total": {"uj": 10, "grade": "HwShunt"}, "occupants": []}', "occupants"),
    (b'{"op": "derive_estimate", "history": [], "class": "x", "required": -1}', "required"),
    (
        b'{"op": "derive_estimate", "history": [{"entitlement": "a"}], "class": "x"}',
        "history[0].actual",
    ),
    (b'{"op": "derive_estimate", "history": {}, "class": "x"}', "history"),
    (
        b'{"op": "preemption_order", "workloads": [{"key": "a", "spent_uj": 1, "completed_units": 1}]}',
        "workloads[0].priority",
    ),
    (
        b'{"op": "preemption_order", "workloads": [{"key": "a", "spent_uj": 1, "completed_units": 1, '
        b'"priority": 0}, {"key": "a", "spent_uj": 1, "completed_units": 1, "priority": 0}]}',
        "twice",
    ),
    (b'{"op": "idle", "policy": {"window_us": 1.0}, "workloads": []}', "policy.window_us"),
    (b'{"op": "idle", "policy": {"window": 1}, "workloads": []}', "policy.window"),
    (
        b'{"op": "idle", "policy": {}, "workloads": [{"key": "w", "held_devices": 1, "observed_us": 1, '
        b'"energy": {"uj": 1, "grade": "Guess"}}]}',
        "workloads[0].energy.grade",
    ),
    (b'{"op": "decide", "claim": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested"),
    (b'{"op": "decide", "x": 1' + b"0" * 5000 + b"}", "JSON"),
]


@pytest.mark.parametrize(("raw", "names"), CORPUS, ids=[n for _, n in CORPUS])
def test_bad_input_is_refused_naming_what_was_wrong(raw: bytes, names: str) -> None:
    out = json.loads(exec_bytes(raw))
    assert out["error"] == "invalid_input", out
    assert names in out["detail"], out["detail"]


def test_the_command_itself_exits_zero_with_no_traceback() -> None:
    for raw, _ in CORPUS[:12] + CORPUS[-3:]:
        proc = subprocess.run(
            [sys.executable, "-m", "joulepool.cli", "exec"],
            input=raw,
            capture_output=True,
            check=False,
        )
        assert proc.returncode == 0
        assert proc.stderr == b""
        assert json.loads(proc.stdout)["error"] == "invalid_input"


def test_the_same_case_gives_the_same_bytes() -> None:
    raw = json.dumps(decide_case()).encode()
    assert exec_bytes(raw) == exec_bytes(raw)
    assert json.loads(exec_bytes(raw))["verdict"] == "admit"
