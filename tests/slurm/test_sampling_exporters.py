"""DESIGN.md §7: what the agent reads from exporters, exactly, and how it maps GPUs to jobs.

Exporter text becomes integer µJ from its digits (never through a float): dcgm-exporter's
whole mJ, and node_exporter's RAPL joules, read here from the real Debian
`prometheus-node-exporter` with `--path.sysfs` over a simulated powercap tree. GPUs come
from `scontrol show job -d`'s `GRES=gpu:N(IDX:..)`; a counter reset never makes a figure
go back; a shared GPU is divided by standard §2.5's rule.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from joulepool.attribution import attribute
from joulepool.bridges.slurm.config import BridgeConfigError, read_bridge_config
from joulepool.bridges.slurm.sampling import (
    Counter,
    dcgm_counters,
    divide,
    expand_hostlist,
    fetch_text,
    j_text_to_uj,
    mj_text_to_uj,
    parse_job_detail,
    rapl_counters,
)
from joulepool.errors import InvalidInput
from joulepool.grade import Energy, Grade
from tests.support.servers import free_port
from tests.support.slurm.fake_dcgm import Counters

SCONTROL_D = """JobId=17 JobName=trainer
   UserId=nobody(65534) GroupId=nogroup(65534) MCS_label=N/A
   JobState=RUNNING Reason=None Dependency=(null)
   NodeList=node[1-2]
   TRES=cpu=4,mem=0,node=2,billing=4,gres/gpu=3
     Nodes=node1 CPU_IDs=0-1 Mem=0 GRES=gpu:2(IDX:0-1)
     Nodes=node2 CPU_IDs=0-1 Mem=0 GRES=gpu:a100:1(IDX:3)
"""


def test_design_s7_gpus_per_node_come_from_scontrol_show_job_d() -> None:
    detail = parse_job_detail(SCONTROL_D)
    assert detail.gpus == {"node1": [0, 1], "node2": [3]}
    assert detail.name == "trainer"
    assert expand_hostlist("gpu[01-03,7],login") == ["gpu01", "gpu02", "gpu03", "gpu7", "login"]


@pytest.mark.parametrize(
    "gres",
    [
        "Nodes=n[a-b] CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:0)",
        "Nodes=n1 CPU_IDs=0 Mem=0 GRES=gpu:9(IDX:-)",
        "Nodes=n1 CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:0-999999999999)",
        "Nodes=n[1-999999999999] CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:0)",
    ],
)
def test_design_s7_a_job_detail_that_does_not_parse_is_refused_in_bounded_time(gres: str) -> None:
    with pytest.raises(InvalidInput):
        parse_job_detail(f"JobId=1 JobName=x\n     {gres}\n")


def test_design_s7_dcgm_millijoules_become_exact_microjoules() -> None:
    text = Counters(2, 250, "n1").exposition()
    counters = dcgm_counters(text, "dcgm")
    assert set(counters) == {0, 1} and all(v % 1000 == 0 for v in counters.values())
    assert mj_text_to_uj("9007199254740993", "x") == 9007199254740993000  # past 2**53, exact
    for bad in ("1.5", "-3", "NaN", "+Inf", "9.007199254740993e15", "x", "1e999999999"):
        with pytest.raises(InvalidInput):
            mj_text_to_uj(bad, "x")


def test_design_s7_node_exporter_joules_become_the_microjoules_they_were_printed_from() -> None:
    assert j_text_to_uj("123.456789", "x") == 123_456_789
    assert j_text_to_uj("1.234567890123e+06", "x") == 1_234_567_890_123
    assert j_text_to_uj("0.1", "x") == 100_000  # float64 text, the µJ it stood for
    assert j_text_to_uj("1e-999999999", "x") == 0
    for bad in ("3e+09", "1e999999999"):  # 3e9 J names no single µJ
        with pytest.raises(InvalidInput):
            j_text_to_uj(bad, "x")


def test_design_s7_a_reset_counter_never_makes_the_figure_go_back() -> None:
    c = Counter(base=1000, last=1000)
    assert c.advance(5000) == 4000
    assert c.advance(300) == 4300  # reset to 0, then 300 counted since
    assert c.advance(700) == 4700


@pytest.mark.parametrize("total", [0, 1, 2, 7, 10**12 + 1])
def test_s2_5_the_node_side_division_is_attributes_to_the_microjoule(total: int) -> None:
    occupants = {"12": 1, "9": 1, "30": 1}
    expected = attribute(Energy(total, Grade.HwShunt), occupants)
    for who in occupants:
        assert divide(total, occupants, who) == expected[who].uj


@pytest.fixture(scope="module")
def node_exporter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    binary = shutil.which("prometheus-node-exporter")
    if binary is None:
        pytest.skip("needs prometheus-node-exporter (apt-get install prometheus-node-exporter)")
    sysfs = tmp_path_factory.mktemp("sysfs")
    zones = sysfs / "class" / "powercap"
    for zone, name, uj in (
        ("intel-rapl:0", "package-0", 1_234_567_890_123),
        ("intel-rapl:0:0", "dram", 5_000_001),
        ("intel-rapl:1", "package-1", 42),
    ):
        (zones / zone).mkdir(parents=True)
        (zones / zone / "name").write_text(name + "\n")
        (zones / zone / "energy_uj").write_text(f"{uj}\n")
        (zones / zone / "max_energy_range_uj").write_text("262143328850\n")
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            f"--path.sysfs={sysfs}",
            "--collector.disable-defaults",
            "--collector.rapl",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(url, timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)
        yield url, zones
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_design_s7_node_exporters_rapl_counters_are_read_exactly(
    node_exporter: tuple[str, Path],
) -> None:
    url, zones = node_exporter
    counters = rapl_counters(fetch_text(url), url)
    assert counters == {
        "node_rapl_package_joules_total:0": 1_234_567_890_123,
        "node_rapl_dram_joules_total:0": 5_000_001,
        "node_rapl_package_joules_total:1": 42,
    }
    (zones / "intel-rapl:1" / "energy_uj").write_text("262143328849\n")
    later = rapl_counters(fetch_text(url), url)
    assert later["node_rapl_package_joules_total:1"] == 262_143_328_849


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("sample_every_s = 3601", "pool.sample_every_s"),
        ('sample_every_s = "30"', "pool.sample_every_s"),
        ('dcgm_url = "file:///etc/passwd"', "pool.dcgm_url"),
        ('node_exporter_url = "9100"', "pool.node_exporter_url"),
        ('gpu_state_dir = "relative"', "pool.gpu_state_dir"),
    ],
)
def test_design_s7_bad_sampling_settings_are_refused_naming_the_key(
    tmp_path: Path, line: str, key: str
) -> None:
    path = tmp_path / "pool-bridge.toml"
    path.write_text(f'[pool]\nurl = "https://p.example"\ntoken_file = "/t"\n{line}\n')
    with pytest.raises(BridgeConfigError, match=key.replace(".", r"\.")):
        read_bridge_config(path)


def test_design_s7_sampling_settings_default_to_every_30_s_and_no_exporter(tmp_path: Path) -> None:
    path = tmp_path / "pool-bridge.toml"
    path.write_text('[pool]\nurl = "https://p.example"\ntoken_file = "/t"\n')
    config = read_bridge_config(path)
    assert (config.sample_every_s, config.dcgm_url, config.node_exporter_url) == (30, None, None)
    path.write_text(
        path.read_text() + 'dcgm_url = "http://{node}:9400/metrics"\nsample_every_s = 0\n'
    )
    config = read_bridge_config(path)
    assert (config.sample_every_s, config.dcgm_url) == (0, "http://{node}:9400/metrics")
