"""`pool usage` and `pool claims`: every figure readable without a manual. One unit per table,
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


def test_usage_piped_is_plain_text_never_cut_one_unit_per_table(tmp_path: Path) -> None:
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
    heading = lines[1]
    assert heading.count("(MJ)") == 7  # guarantee, limit, charged, reserved, committed, ...


def test_units_are_named_in_any_case_and_one_unit_serves_the_whole_table(
    tmp_path: Path,
) -> None:
    folder = deployment(tmp_path)
    for spelled in ("GJ", "gj", "Gj"):
        out = pool("usage", str(folder), "--units", spelled).stdout
        assert out.splitlines()[1].count("(GJ)") == 7, out
    kj = pool("usage", str(folder), "--units", "KJ").stdout
    rows = {line.split()[0]: line.split() for line in kj.splitlines()[2:6]}
    assert rows["vision"][1] == "50,000.000"  # 50 MJ
    bad = pool("usage", str(folder), "--units", "furlongs", ok=(2,))
    assert bad.returncode == 2 and "uJ, J, kJ, MJ, GJ, kWh" in bad.stderr
    assert "Traceback" not in bad.stderr
    claims = pool("claims", str(folder), "--units", "mj").stdout
    assert "reserved (MJ)" in claims and "actual (MJ)" in claims
    assert "4.000" in claims and "2.000" in claims


def test_a_figure_that_is_not_zero_never_reads_as_zero(tmp_path: Path) -> None:
    folder = deployment(tmp_path)
    admit(folder, "tiny", "robotics", 1, "HwShunt")  # 1 µJ beside figures of MJ
    out = pool("usage", str(folder)).stdout
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:6]}
    assert rows["robotics"][4] == "<0.001"  # reserved: 1 µJ in a table of MJ
    assert rows["robotics"][3] == "0.000"  # charged: nothing, which reads 0
    claims = pool("claims", str(folder), "--state", "running").stdout
    assert "<0.001" in claims


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
