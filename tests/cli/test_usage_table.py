"""`pool usage`: every figure readable without a manual. One unit per column,
interior nodes with their subtree's totals marked Σ, nothing cut when piped, exact µJ in
`--json` with the new fields beside the old."""

from __future__ import annotations

from pathlib import Path

from tests.cli.test_pool_cli_e2e import MJ, admit, pool, pool_json


def deployment(tmp_path: Path) -> Path:
    folder = tmp_path / "d"
    pool("init", str(folder), "--no-power-ceiling")  # releases of MJ a moment after admission
    admit(folder, "v1", "vision", 4 * MJ, "HwShunt")
    admit(folder, "l1", "language", 13_100_900_002_000)
    pool("release", str(folder), "l1", "--actual", "2MJ", "--grade", "HwShunt")
    return folder


def test_usage_piped_is_plain_text_never_cut_one_unit_per_column(tmp_path: Path) -> None:
    folder = deployment(tmp_path)
    out = pool("usage", str(folder)).stdout
    lines = out.splitlines()
    assert "…" not in out and "│" not in out and "┃" not in out
    header = lines[1].split()
    assert header[:5] == ["entitlement", "guarantee", "(MJ)", "limit", "(MJ)"]
    rows = {line.split()[0]: line.split() for line in lines[2:6]}
    # research is interior: its row is its subtree's sum, marked Σ.
    assert rows["research"][1] == "Σ"
    assert rows["research"][2] == "100.000"  # 50 + 30 + 20 MJ of its children's guarantees
    assert rows["vision"][1:3] == ["50.000", "-"]
    assert rows["language"][2] == "60.000"  # its limit
    assert "Σ: an interior node" in out
    exact = pool("usage", str(folder), "--units", "uj").stdout
    assert "50,000,000,000,000" in exact and "2,000,000,000,000" in exact
    assert "(kWh)" in pool("usage", str(folder), "--units", "kwh").stdout


def test_usage_json_keeps_exact_uj_and_adds_subtree(tmp_path: Path) -> None:
    folder = deployment(tmp_path)
    rows = {r["id"]: r for r in pool_json("usage", str(folder))["entitlements"]}
    lang = rows["language"]["usage"]
    assert lang["charged_uj"] == 2 * MJ and lang["spent_uj"] == lang["committed_uj"] == 2 * MJ
    assert lang["remaining_uj"] == 28 * MJ
    assert "subtree" not in rows["vision"]
    sub = rows["research"]["subtree"]
    assert sub["subtree"] is True
    assert sub["committed_uj"] == 6 * MJ and sub["reserved_uj"] == 4 * MJ
    assert sub["charged_uj"] == 2 * MJ and sub["guarantee_uj"] == 100 * MJ
    assert sub["held_devices"] == 1 and sub["running_claims"] == 1
    assert rows["research"]["usage"]["committed_uj"] == 0  # its own claims: none
