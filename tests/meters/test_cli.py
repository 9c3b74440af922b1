"""`pool meter list` and `pool meter read`, through argparse and `register` as `pool` wires them."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence

import pytest
from prometheus_client import CollectorRegistry

from joulepool.cli.meter_cmd import format_uw, register
from joulepool.errors import PoolError
from joulepool.meters import DCGM_ENERGY
from tests.meters.conftest import CounterFamily, PowercapTree, ServeRegistry


def main(argv: Sequence[str]) -> int:
    """What `joulepool.cli.main` does with a registered command group."""
    parser = argparse.ArgumentParser(prog="pool")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(list(argv))
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except PoolError as exc:
        print(f"pool: {exc.code}: {exc}", file=sys.stderr)
        return 1


def test_list_json_shows_zones_and_why_nvml_is_missing(
    powercap: PowercapTree, capsys: pytest.CaptureFixture[str]
) -> None:
    powercap.zone("intel-rapl:0", "package-0", 10)
    powercap.zone("intel-rapl:0:0", "core", 5, max_range_uj="garbage")
    assert main(["meter", "list", "--powercap-root", str(powercap.root), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["meters"]
    by_name = {m["name"]: m for m in out}
    assert by_name["rapl:intel-rapl:0"] == {
        "name": "rapl:intel-rapl:0",
        "kind": "rapl",
        "grade": "HwShunt",
        "available": True,
        "resolution_uj": 62,
        "reason": None,
        "detail": f"package-0 at {powercap.root}/intel-rapl:0",
    }
    assert by_name["rapl:intel-rapl:0:0"]["available"] is False
    assert by_name["rapl:intel-rapl:0:0"]["reason"] == "invalid_value"
    nvml = [m for m in out if m["kind"] == "nvml"]
    assert nvml
    assert all(m["available"] or m["reason"] for m in nvml)


def test_list_of_a_host_without_powercap_says_why(
    powercap: PowercapTree, capsys: pytest.CaptureFixture[str]
) -> None:
    root = powercap.root / "absent"
    assert main(["meter", "list", "--powercap-root", str(root), "--no-nvml"]) == 0
    out = capsys.readouterr().out
    assert "rapl" in out
    assert "missing_device" in out
    assert "powercap" in out


def test_list_with_an_exporter_and_an_unreachable_one(
    serve_registry: ServeRegistry,
    closed_port_url: str,
    powercap: PowercapTree,
    capsys: pytest.CaptureFixture[str],
) -> None:
    registry = CollectorRegistry()
    family = CounterFamily(DCGM_ENERGY, "Total energy consumption since boot (in mJ).")
    family.set({"gpu": "0", "UUID": "GPU-1234", "device": "nvidia0"}, 99)
    registry.register(family)
    url = serve_registry(registry)
    argv = ["meter", "list", "--powercap-root", str(powercap.root), "--no-nvml", "--json"]
    assert main([*argv, "--prometheus", url, "--prometheus", closed_port_url]) == 0
    out = json.loads(capsys.readouterr().out)["meters"]
    by_name = {m["name"]: m for m in out}
    assert by_name["dcgm:GPU-1234"]["available"] is True
    assert by_name["dcgm:GPU-1234"]["grade"] == "HwShunt"
    assert by_name["dcgm:GPU-1234"]["resolution_uj"] == 1000
    assert by_name[closed_port_url]["reason"] == "unreachable"


def test_list_grades_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["meter", "list", "--grades"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| source |")
    assert "| Estimator |" in out


def test_read_json_gives_readings_and_the_power_between(
    powercap: PowercapTree, capsys: pytest.CaptureFixture[str]
) -> None:
    powercap.zone("intel-rapl:0", "package-0", 777)
    argv = ["meter", "read", "rapl:intel-rapl:0", "--powercap-root", str(powercap.root)]
    assert main([*argv, "--interval", "0.01", "--count", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["meter"] == "rapl:intel-rapl:0"
    assert out["grade"] == "HwShunt"
    assert [r["counter_uj"] for r in out["readings"]] == [777, 777, 777]
    assert len(out["intervals"]) == 2
    for step in out["intervals"]:
        assert step["uj"] == 0
        assert step["span_us"] >= 10_000
        assert step["mean_uw"] == 0
        assert step["grade"] == "HwShunt"


def test_read_table(powercap: PowercapTree, capsys: pytest.CaptureFixture[str]) -> None:
    powercap.zone("intel-rapl:0", "package-0", 777)
    argv = ["meter", "read", "rapl:intel-rapl:0", "--powercap-root", str(powercap.root)]
    assert main([*argv, "--interval", "0"]) == 0
    out = capsys.readouterr().out
    assert "rapl:intel-rapl:0" in out
    assert "0.000000 W" in out


def test_read_of_an_unavailable_meter_exits_non_zero_with_the_reason(
    powercap: PowercapTree, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["meter", "read", "rapl:intel-rapl:0", "--powercap-root", str(powercap.root)]
    assert main([*argv, "--count", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        "pool: meter_unavailable: meter 'rapl:intel-rapl:0' unavailable (missing_device)"
    )


def test_read_of_a_dcgm_gpu_through_its_exporter(
    serve_registry: ServeRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    registry = CollectorRegistry()
    family = CounterFamily(DCGM_ENERGY, "Total energy consumption since boot (in mJ).")
    family.set({"gpu": "0", "UUID": "GPU-1234"}, 123)
    registry.register(family)
    url = serve_registry(registry)
    assert (
        main(["meter", "read", "dcgm:GPU-1234", "--prometheus", url, "--count", "1", "--json"]) == 0
    )
    assert json.loads(capsys.readouterr().out)["readings"][0]["counter_uj"] == 123_000
    assert main(["meter", "read", "dcgm:GPU-9", "--prometheus", url, "--count", "1"]) == 1
    assert "(not_found)" in capsys.readouterr().err
    assert main(["meter", "read", "dcgm:GPU-1234", "--count", "1"]) == 1
    assert "--prometheus" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra",
    [
        ["--interval", "soon"],
        ["--interval", "-1"],
        ["--interval", "0.0000001"],
        ["--interval", "NaN"],
        ["--count", "0"],
        ["--timeout-ms", "0"],
    ],
)
def test_bad_options_are_typed_errors(
    powercap: PowercapTree, capsys: pytest.CaptureFixture[str], extra: list[str]
) -> None:
    argv = ["meter", "read", "rapl:intel-rapl:0", "--powercap-root", str(powercap.root)]
    assert main([*argv, *extra]) == 1
    assert capsys.readouterr().err.startswith("pool: invalid_input: ")


@pytest.mark.parametrize("name", ["bogus", "tdp:gpu0", "rapl:../../etc", "nvml:gpu zero"])
def test_names_that_name_no_meter_are_invalid_input(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["meter", "read", name, "--count", "1"]) == 1
    assert capsys.readouterr().err.startswith("pool: invalid_input: ")


def test_format_uw_is_exact() -> None:
    assert format_uw(12_500_000) == "12.500000 W"
    assert format_uw(1) == "0.000001 W"
    assert format_uw(None) == "-"
