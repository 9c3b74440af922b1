"""The GPU Prolog/Epilog's decisions, without Slurm (§2.3, §2.5, §2.7).

Readings come from a simulated DCGM exporter (a real HTTP server on 127.0.0.1); the
parsing of what slurmd and sacct hand over is checked with hostile input.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from joulepool.bridges.slurm.gpu import NodeFigure, epilog, gpu_energy, parse_job_gpus, prolog
from joulepool.bridges.slurm.jobs import GPU_ENTRY, weakest
from joulepool.errors import InvalidInput
from joulepool.grade import Energy, Grade
from joulepool.meters import DcgmMeter, Reading
from tests.support.servers import free_port


@pytest.fixture
def exporter(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    ready = tmp_path / "ready"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).parents[1] / "support" / "slurm" / "fake_dcgm.py"),
            "--port",
            str(port),
            "--gpus",
            "3",
            "--watts",
            "200",
            "--ready-file",
            str(ready),
        ]
    )
    try:
        deadline = time.monotonic() + 10
        while not ready.exists():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/metrics", proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_s2_3_slurm_job_gpus_is_parsed_strictly() -> None:
    assert parse_job_gpus("") == []
    assert parse_job_gpus("0,2") == ["0", "2"]
    for bad in ("0,0", "a", "0;rm -rf /", "-1", "0,,1"):
        with pytest.raises(InvalidInput, match="SLURM_JOB_GPUS"):
            parse_job_gpus(bad)


def test_s2_3_whole_gpus_keep_the_meter_grade_between_prolog_and_epilog(
    tmp_path: Path, exporter: tuple[str, subprocess.Popen[bytes]]
) -> None:
    url, _ = exporter
    prolog(7, ["0", "2"], tmp_path, url, source="dcgm")
    time.sleep(1.0)
    figure = epilog(7, ["0", "2"], tmp_path, url)
    assert figure.energy is not None and figure.energy.grade is Grade.HwShunt
    # Two GPUs at 200 W for at least a second: 400 J at least, in whole mJ.
    assert figure.energy.uj >= 400_000_000 and figure.energy.uj % 1000 == 0
    assert GPU_ENTRY.match(figure.entry())
    assert not list(tmp_path.glob("7.*"))


def test_s2_7_a_counter_reset_gives_no_figure_never_zero(
    tmp_path: Path, exporter: tuple[str, subprocess.Popen[bytes]]
) -> None:
    url, proc = exporter
    time.sleep(0.5)
    prolog(8, ["1"], tmp_path, url)
    proc.send_signal(signal.SIGUSR1)
    time.sleep(0.1)
    figure = epilog(8, ["1"], tmp_path, url)
    assert figure == NodeFigure(8, 1, None, "counter_reset", run=0)
    assert figure.entry() == "pool-gpu:8=none/counter_reset/1"


def test_s6_2_each_run_of_a_requeued_job_publishes_an_entry_naming_its_run(
    tmp_path: Path, exporter: tuple[str, subprocess.Popen[bytes]]
) -> None:
    """The Prolog keeps the run (SLURM_JOB_RESTART_COUNT at the start); the Epilog tags the
    entry with it, so a later run's figure is never confused with an earlier run's."""
    url, _ = exporter
    # The first run, ended by a requeue: the Epilog's count already says 1; the run is 0.
    prolog(30, ["0"], tmp_path, url, "n1", source="dcgm", run=0)
    first = epilog(30, ["0"], tmp_path, url, "n1", restarts=1)
    assert first.run == 0 and first.energy is not None
    entry = GPU_ENTRY.match(first.entry())
    assert entry is not None and entry.group(6) is None and "@" not in first.entry()
    # The second run, with its own Prolog.
    prolog(30, ["0"], tmp_path, url, "n1", source="dcgm", run=1)
    second = epilog(30, ["0"], tmp_path, url, "n1", restarts=1)
    entry = GPU_ENTRY.match(second.entry())
    assert entry is not None and entry.group(6) == "1" and entry.group(3) == "HwShunt"
    # A run slurmd gave no Prolog (started again within the credential's life on this node).
    bare = epilog(30, ["0"], tmp_path, url, "n1", restarts=1)
    assert bare.entry() == "pool-gpu:30=none/no_start_reading/1@1"
    # A start reading kept by the previous version names no run: untagged, as it was.
    prolog(31, ["0"], tmp_path, url, "n1", source="dcgm", run=2)
    state = tmp_path / "31.n1.json"
    record = json.loads(state.read_text())
    del record["run"]
    state.write_text(json.dumps(record))
    old = epilog(31, ["0"], tmp_path, url, "n1", restarts=2)
    assert old.run is None and old.energy is not None and "@" not in old.entry()
    for bad in (
        "pool-gpu:30=5/HwShunt/1@",
        "pool-gpu:30=5/HwShunt/1@x",
        "pool-gpu:30=5/HwShunt/1@1@2",
    ):
        assert GPU_ENTRY.match(bad) is None


def test_s2_7_missing_start_or_unreachable_exporter_gives_the_reason(tmp_path: Path) -> None:
    assert epilog(9, ["0"], tmp_path, "http://127.0.0.1:9/metrics").reason == "no_start_reading"
    prolog(10, ["0"], tmp_path, f"http://127.0.0.1:{free_port()}/metrics", source="dcgm")
    figure = epilog(10, ["0"], tmp_path, f"http://127.0.0.1:{free_port()}/metrics")
    assert (figure.energy, figure.reason) == (None, "unreachable")
    assert oct(os.stat(tmp_path).st_mode & 0o777) == "0o700"


def test_s2_7_gpus_that_changed_between_prolog_and_epilog_give_no_figure(
    tmp_path: Path, exporter: tuple[str, subprocess.Popen[bytes]]
) -> None:
    url, _ = exporter
    prolog(11, ["0"], tmp_path, url)
    assert epilog(11, ["0", "1"], tmp_path, url).reason == "gpus_changed"


def test_s2_5_a_shared_gpu_is_split_by_attribute_and_is_model_based() -> None:
    meter = DcgmMeter("http://127.0.0.1:1/metrics", "0")
    a = Reading(meter.name, 1_000_000, 10, Grade.HwShunt, 1000)
    b = Reading(meter.name, 4_000_000, 20, Grade.HwShunt, 1000)
    whole = gpu_energy("12", {meter.name: a}, {meter.name: b})
    assert whole == Energy(3_000_000, Grade.HwShunt)
    # Job 12 holds 1 of the GPU's 3 shards, job 13 the other 2.
    shared = gpu_energy("12", {meter.name: a}, {meter.name: b}, {meter.name: {"12": 1, "13": 2}})
    assert shared == Energy(1_000_000, Grade.ModelBased)


def test_s2_3_a_sum_is_graded_by_its_weakest_part() -> None:
    assert weakest("HwShunt", "HwShunt") == "HwShunt"
    assert weakest("HwShunt", "ModelBased") == "ModelBased"
    assert weakest("Estimator", "HwShunt", "ModelBased") == "Estimator"


@pytest.mark.gpu
def test_s2_3_on_a_gpu_node_the_prolog_and_epilog_read_nvml(tmp_path: Path) -> None:
    """Where NVML reads GPU 0, the node side uses it (not DCGM) and charges HwShunt."""
    from joulepool.bridges.slurm.gpu import choose_source
    from joulepool.meters import MeterUnavailable

    try:
        source = choose_source(["0"], None)
    except MeterUnavailable as exc:
        pytest.skip(f"no NVML GPU here: {exc.reason.value}: {exc.explanation}")
    assert source == "nvml"
    prolog(21, ["0"], tmp_path, None, "gpunode")
    time.sleep(1.0)
    figure = epilog(21, ["0"], tmp_path, None, "gpunode")
    assert figure.energy is not None, figure.reason
    assert figure.energy.grade is Grade.HwShunt and figure.energy.uj % 1000 == 0


@pytest.mark.gpu
def test_s2_3_nvml_is_chosen_only_where_it_reads_every_gpu_of_the_job(
    exporter: tuple[str, subprocess.Popen[bytes]],
) -> None:
    """A job whose GPUs NVML reads only in part is read through DCGM, not refused."""
    from joulepool.bridges.slurm.gpu import choose_source
    from joulepool.meters import MeterUnavailable

    url, _ = exporter
    try:
        assert choose_source(["0"], None) == "nvml"
    except MeterUnavailable as exc:
        pytest.skip(f"no NVML GPU here: {exc.reason.value}: {exc.explanation}")
    assert choose_source(["0"], url) == "nvml"
    # No node has 1,000 GPUs, so NVML cannot see this one; DCGM (the exporter) is used.
    assert choose_source(["0", "999"], url) == "dcgm"
