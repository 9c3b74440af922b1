"""`pool claims` (running claims per team), `pool claim` (one
claim described) and `pool admit --dry-run` (the verdict now, nothing written); unknown
entitlements suggest the closest ids."""

from __future__ import annotations

from pathlib import Path

from tests.cli.test_pool_cli_e2e import MJ, admit, pool, pool_json


def deployment(tmp_path: Path) -> Path:
    folder = tmp_path / "d"
    pool("init", str(folder), "--no-power-ceiling")  # releases of MJ a moment after admission
    admit(folder, "v1", "vision", 4 * MJ, "HwShunt")
    admit(folder, "v2", "vision", 1 * MJ, "HwShunt")
    admit(folder, "l1", "language", 2 * MJ, "HwShunt")
    pool("release", str(folder), "v2", "--actual", "0.5MJ", "--grade", "HwShunt")
    return folder


def test_pool_claims_lists_per_entitlement_and_state(tmp_path: Path) -> None:
    folder = deployment(tmp_path)
    every = pool_json("claims", str(folder))["claims"]
    assert [c["claim"] for c in every] == ["v1", "v2", "l1"]
    running = pool_json("claims", str(folder), "--entitlement", "vision", "--state", "running")
    assert [c["claim"] for c in running["claims"]] == ["v1"]
    released = pool_json("claims", str(folder), "--state", "released")["claims"]
    assert released[0]["actual"] == {"uj": MJ // 2, "grade": "HwShunt"}
    subtree = pool_json("claims", str(folder), "--entitlement", "research")["claims"]
    assert len(subtree) == 3
    text = pool("claims", str(folder)).stdout
    assert "reserved (MJ)" in text and "v1" in text


def test_pool_claim_describes_one_claim(tmp_path: Path) -> None:
    folder = deployment(tmp_path)
    one = pool_json("claim", str(folder), "v2")
    assert one["state"] == "released" and one["reserved"]["uj"] == MJ
    assert one["admitted_seq"] == 1 and one["released_seq"] == 3
    text = pool("claim", str(folder), "v2").stdout
    assert "charged 500 kJ (HwShunt)" in text
    missing = pool("claim", str(folder), "v9", ok=(1,))
    assert "unknown_claim" in missing.stderr


def test_dry_run_gives_the_verdict_and_writes_nothing(tmp_path: Path) -> None:
    folder = deployment(tmp_path)
    ledger = (folder / "ledger.cbor").read_bytes()
    out = pool_json(
        "admit",
        str(folder),
        "--id",
        "x",
        "--entitlement",
        "vision",
        "--estimate",
        "1MJ",
        "--grade",
        "HwShunt",
        "--dry-run",
    )
    assert out["verdict"] == "admit" and out["dry_run"] is True and "seq" not in out
    assert (folder / "ledger.cbor").read_bytes() == ledger
    deny = pool(
        "admit",
        str(folder),
        "--id",
        "x",
        "--entitlement",
        "visoin",
        "--estimate",
        "1MJ",
        "--dry-run",
        ok=(4,),
    )
    assert "would be denied" in deny.stdout and "did you mean 'vision'" in deny.stdout
    # The id is still free: the dry run recorded nothing.
    assert (
        pool_json(
            "admit",
            str(folder),
            "--id",
            "x",
            "--entitlement",
            "vision",
            "--estimate",
            "1MJ",
            "--grade",
            "HwShunt",
        )["seq"]
        == 4
    )


def test_unknown_entitlement_suggests_the_closest_ids(tmp_path: Path) -> None:
    folder = deployment(tmp_path)
    r = pool("claims", str(folder), "--entitlement", "langauge", ok=(1,))
    assert "did you mean 'language'" in r.stderr
