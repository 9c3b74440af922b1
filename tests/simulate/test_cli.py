"""`pool simulate` end to end on a tiny data folder, its refusals of bad input, its help, and
the `joulepool-sim` script that is the same command."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from joulepool.cli import main
from joulepool_sim.cli import build_parser
from joulepool_sim.cli import main as sim_main
from tests.simulate.helpers import trace_line, write_data

R50 = "ResNet-50 (batch size 64)"
LM = "LM (batch size 20)"


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return write_data(
        tmp_path / "data",
        {
            "aa": [trace_line(R50, 100, "0.0", 1), trace_line(LM, 50, "1.0", 2)],
            "bb": [trace_line(LM, 20, "0.5", 1)],
            "zz": [trace_line(LM, 20, "0.5", 1)],
        },
        {"aa": 3, "bb": 1},
    )


def test_simulate_writes_the_report_and_figures(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = ["simulate", "--data-dir", str(data), "--seeds", "0", "--sample", "1"]
    argv += ["--gpus", "4", "--budgets", "10000000000,20000000000", "--error-sigma", "0"]
    code = main([*argv, "--out", str(out), "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["traces"]["0"]["jobs"] == 3
    assert result["traces"]["0"]["left_out_no_size"] == {"zz": 1}
    assert [c["budget_uj"] for c in result["cells"]] == [10_000_000_000, 20_000_000_000]
    cell = result["cells"][1]
    assert set(cell["policies"]) == {
        "devices",
        "gpu_hours",
        "blind",
        "pool1",
        "pool1_requeue",
        "pool1_cancel",
        "pool1_timed",
        "pool1_timed_cancel",
    }
    # The first seed again with monthly periods, and the preemption replay's three orders.
    assert [c["budget_uj"] for c in result["monthly"]] == [42_857_142_857, 85_714_285_714]
    assert set(result["preemption"]["0"]) == {"none", "realised_cost", "youngest"}
    # Under sigma 0 no guess is below what its job draws: no run passes its reservation.
    assert cell["policies"]["pool1_cancel"]["acts"].get("cancel", 0) == 0
    # With sigma 0 every user reserves twice the modelled figure. At 20,000,000,000 µJ a week
    # aa holds 3 of 4 GPUs and 15,000,000,000 µJ: its ResNet-50 job's guess (2 ×
    # 40 s × 200.25 W = 16.02 kJ) is more than its whole guarantee and a guess, so pool/1
    # refuses it (§4.4), no class having earned an estimate yet; the grade-blind quota lets
    # the same guess borrow 1.02 kJ of bb's unspent 5 kJ (its share is 3/4 of that).
    pool1 = cell["policies"]["pool1"]
    assert pool1["borrowed_on_guess_uj"] == 0
    assert pool1["denied"] >= 1
    blind = cell["policies"]["blind"]
    assert blind["borrowed_on_guess_uj"] == 1_020_000_000
    devices = cell["policies"]["devices"]
    assert devices["started"] == 3
    assert devices["spent_uj"] == 8_010_000_000 + 1_500_000_000 + 600_000_000
    report = (out / "evaluation.md").read_text()
    assert "--budgets 10000000000,20000000000" in report
    for name in (
        "evaluation-baselines.png",
        "evaluation-periods.png",
        "evaluation-earned.png",
        "evaluation-utilisation.png",
    ):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--data-dir", "/nonexistent/data"], "no such trace folder"),
        (["--gpu-type", "h100"], "no GPU type 'h100'"),
        (["--seeds", "7"], "no such trace folder"),
    ],
)
def test_bad_input_is_one_line_naming_it(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], words: str
) -> None:
    argv = ["simulate", "--data-dir", str(data), "--out", str(tmp_path / "o"), *args]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert words in err
    assert "Traceback" not in err


def test_a_bad_flag_is_refused_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["simulate", "--gpus", "0"])
    assert caught.value.code == 2
    assert "must be at least 1" in capsys.readouterr().err


def test_help_states_every_default(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # one line per option: no hyphen splits a default
    with pytest.raises(SystemExit) as caught:
        main(["simulate", "--help"])
    assert caught.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert text.startswith("usage: pool simulate")
    missing = []
    for action in build_parser()._actions:
        if not action.option_strings or action.default in (None, False, argparse.SUPPRESS):
            continue
        written = "(default:" in (action.help or "")  # spelled by hand: `6GJ,9GJ,12GJ`
        if not written and f"default: {action.default}" not in text:
            missing.append(action.option_strings[0])
    assert missing == []


def test_the_joulepool_sim_script_is_pool_simulate(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        sim_main(["--gpus", "0"])
    assert caught.value.code == 2
    assert "pool simulate: error: argument --gpus: must be at least 1" in capsys.readouterr().err
    assert sim_main(["--data-dir", "/nonexistent/data", "--out", "/nonexistent/out"]) == 1
    assert capsys.readouterr().err.strip().endswith("no such trace folder")
