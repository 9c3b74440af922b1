"""`pool report DIR --start --end --by entitlement|class [--csv]`: energy charged over a range,
read from the ledger's released claims by release time, through the real `pool` command:
the same figures as `pool usage --json` for the same claims (one answer everywhere), exact
µJ in `--json` and `--csv`, interior nodes with their subtree's sums, no class kept apart."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.cli.test_pool_cli_e2e import MJ, pool, pool_json


def admit(folder: Path, claim: str, ent: str, uj: int, klass: str | None = None) -> None:
    extra = ["--class", klass] if klass else []
    pool("admit", str(folder), "--id", claim, "--entitlement", ent, "--estimate-uj", str(uj),
         "--grade", "HwShunt", *extra)  # fmt: skip


def release(folder: Path, claim: str, uj: int, grade: str = "HwShunt") -> None:
    pool("release", str(folder), claim, "--actual", str(uj), "--grade", grade)


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat()


def deployment(tmp_path: Path) -> Path:
    folder = tmp_path / "d"
    pool("init", str(folder), "--no-power-ceiling")  # releases of MJ a moment after admission
    admit(folder, "v1", "vision", 4 * MJ, "train")
    admit(folder, "v2", "vision", 2 * MJ)
    admit(folder, "l1", "language", 3 * MJ, "train")
    admit(folder, "r1", "robotics", 5 * MJ, "eval")  # still running: never in a report
    release(folder, "v1", 3 * MJ + 1)
    release(folder, "v2", 2 * MJ, "Estimator")
    release(folder, "l1", 1)
    return folder


def rows(answer: dict[str, Any], key: str) -> dict[Any, dict[str, Any]]:
    return {r[key]: r for r in answer["rows"]}


def test_report_by_entitlement_equals_pool_usage_for_the_same_released_claims(
    tmp_path: Path,
) -> None:
    folder = deployment(tmp_path)
    usage = pool_json("usage", str(folder))
    period = usage["period"]
    answer = pool_json(
        "report", str(folder), "--start", iso(period["start_ms"]), "--end", iso(period["end_ms"])
    )
    assert answer["time"] == "released" and answer["by"] == "entitlement"
    got = rows(answer, "entitlement")
    assert list(got) == ["research", "vision", "language", "robotics"]  # the tree's order
    for e in usage["entitlements"]:
        assert got[e["id"]]["charged_uj"] == e["usage"]["charged_uj"], e["id"]
    assert got["vision"] == {
        "entitlement": "vision",
        "claims": 2,
        "charged_uj": 5 * MJ + 1,
        "measured_uj": 3 * MJ + 1,
        "estimated_uj": 2 * MJ,
        "reserved_uj": 6 * MJ,
    }
    assert got["robotics"]["claims"] == 0  # running: reserved, not charged
    assert got["research"]["claims"] == 0
    assert got["research"]["subtree"]["charged_uj"] == 5 * MJ + 2
    assert answer["total"]["charged_uj"] == 5 * MJ + 2 and answer["total"]["claims"] == 3


def test_report_by_class_keeps_claims_without_one_apart(tmp_path: Path) -> None:
    folder = deployment(tmp_path)
    answer = pool_json("report", str(folder), "--start", "2000-01-01", "--by", "class")
    got = rows(answer, "class")
    assert list(got) == ["train", None]  # named classes first, then those with none
    assert got["train"]["claims"] == 2 and got["train"]["charged_uj"] == 3 * MJ + 2
    assert got[None]["charged_uj"] == 2 * MJ and got[None]["estimated_uj"] == 2 * MJ
    empty = pool_json(
        "report", str(folder), "--start", "2000-01-01", "--end", "2001-01-01", "--by", "class"
    )
    assert empty["rows"] == [] and empty["total"]["claims"] == 0


def test_report_csv_is_exact_and_the_table_has_one_unit(tmp_path: Path) -> None:
    folder = deployment(tmp_path)
    out = pool("report", str(folder), "--start", "2000-01-01", "--csv").stdout
    table = list(csv.reader(io.StringIO(out)))
    assert table[0] == ["entitlement", "claims", "charged_uj", "measured_uj", "estimated_uj",
                        "reserved_uj"]  # fmt: skip
    by = {r[0]: r for r in table[1:]}
    assert by["vision"][2] == str(5 * MJ + 1) and by["total"][2] == str(5 * MJ + 2)
    human = pool("report", str(folder), "--start", "2000-01-01", "--units", "kj").stdout
    assert human.count("(kJ)") == 4 and "by release time" in human
    assert "research Σ" in human


def test_report_refuses_a_range_it_cannot_read(tmp_path: Path) -> None:
    folder = deployment(tmp_path)
    for args, words in (
        (["--start", "2026-11-01T12:00"], "no offset"),
        (["--start", "yesterday"], "a date (2026-11-01"),
        (["--start", "2026-11-02", "--end", "2026-11-01"], "is not after --start"),
    ):
        run = pool("report", str(folder), *args, ok=(1,))
        assert words in run.stderr and len(run.stderr.splitlines()) == 1, run.stderr
    run = pool("report", str(folder), "--start", "2000-01-01", "--by", "team", ok=(2,))
    assert "entitlement" in run.stderr
