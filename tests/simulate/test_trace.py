"""Reading traces and VC sizes: exact integer times, and typed errors naming the line."""

from __future__ import annotations

from pathlib import Path

import pytest

from joulepool_sim.errors import SimulationInputError
from joulepool_sim.trace import read_trace, read_vc_sizes
from tests.simulate.helpers import trace_line


def test_jobs_come_in_arrival_order_with_exact_microseconds(tmp_path: Path) -> None:
    (tmp_path / "b.trace").write_text(trace_line("LM (batch size 20)", 10, "1.0000005", 1))
    (tmp_path / "a.trace").write_text(
        trace_line("LM (batch size 20)", 7, "2.000000", 4) + trace_line("X", 3, "1.0000005", 2)
    )
    jobs = read_trace(tmp_path)
    assert [(j.id, j.arrival_us) for j in jobs] == [
        ("a:2", 1_000_001),  # 1.0000005 s rounds up to the next whole microsecond
        ("b:1", 1_000_001),
        ("a:1", 2_000_000),
    ]
    assert jobs[2].gpus == 4
    assert jobs[2].total_steps == 7


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("LM\tcmd\t-n\t1\t10\t0.0\n", "expected 7 tab-separated fields, found 6"),
        (trace_line("LM", 10, "-1.0", 1), "arrival_time_s must not be negative"),
        (trace_line("LM", 10, "soon", 1), "arrival_time_s must be a decimal number"),
        (trace_line("LM", 0, "1.0", 1), "total_steps must be at least 1"),
        (trace_line("LM", 10, "1.0", 0), "scale_factor must be at least 1"),
        (trace_line("LM", 10, "1.0", "2.5"), "scale_factor must be a whole number"),
        (trace_line(" ", 10, "1.0", 1), "job_type is empty"),
    ],
)
def test_a_malformed_line_is_refused_naming_file_and_line(
    tmp_path: Path, line: str, words: str
) -> None:
    (tmp_path / "vc.trace").write_text(trace_line("LM", 5, "0.0", 1) + line)
    with pytest.raises(SimulationInputError) as caught:
        read_trace(tmp_path)
    assert f"vc.trace:2: {words}" in str(caught.value)


def test_a_missing_or_empty_trace_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SimulationInputError, match="no such trace folder"):
        read_trace(tmp_path / "nowhere")
    with pytest.raises(SimulationInputError, match=r"holds no \*\.trace files"):
        read_trace(tmp_path)


def test_vc_sizes_are_read_and_bad_rows_refused(tmp_path: Path) -> None:
    path = tmp_path / "vc.csv"
    path.write_text("vc,node num\na,32\nb,8\n")
    assert read_vc_sizes(path) == {"a": 32, "b": 8}
    path.write_text("vc,node num\na,32\na,8\n")
    with pytest.raises(SimulationInputError, match=r"vc.csv:3: VC 'a' appears twice"):
        read_vc_sizes(path)
    path.write_text("vc,nodes\na,32\n")
    with pytest.raises(SimulationInputError, match="expected the header"):
        read_vc_sizes(path)
    with pytest.raises(SimulationInputError, match="cannot read the VC sizes"):
        read_vc_sizes(tmp_path / "missing.csv")
