"""`pool simulate` end to end on a tiny data folder, and its refusals of bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from joulepool.cli import main
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
    argv = ["simulate", "--data-dir", str(data), "--gpus", "4", "--budget-uj", "10000000000"]
    code = main([*argv, "--out", str(out), "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["jobs"] == 3
    assert result["left_out_no_size"] == {"zz": 1}
    pool1 = {t["vc"]: t for t in result["policies"]["pool1"]["tenants"]}
    # aa holds 3 of 4 GPUs and 7,500,000,000 µJ. Its ResNet-50 job (40 s × 200.25 W, a
    # model) borrows 510,000,000 µJ of bb's unspent guarantee; its LM job that follows
    # (2 GPUs × 2.5 s × 300 W, a guess) may not borrow and waits.
    aa = pool1["aa"]
    assert (aa["guarantee_devices"], aa["guarantee_uj"]) == (3, 7_500_000_000)
    assert (aa["spent_uj"], aa["borrowed_uj"]) == (8_010_000_000, 510_000_000)
    assert aa["still_queued"] == {"guarantee_exhausted_may_not_borrow": 1}
    assert aa["guesses_refused_borrowing"] == 1
    quota = {t["vc"]: t for t in result["policies"]["devices"]["tenants"]}
    assert quota["aa"]["spent_uj"] == 8_010_000_000 + 1_500_000_000
    assert quota["aa"]["borrowed_uj"] == 0
    report = (out / "evaluation.md").read_text()
    assert "--budget-uj 10000000000" in report
    for name in ("evaluation-utilisation.png", "evaluation-energy.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--data-dir", "/nonexistent/data"], "no such trace folder"),
        (["--gpu-type", "h100"], "no GPU type 'h100'"),
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
