"""DCGM exporter and Kepler over real HTTP on loopback, exposition by prometheus-client (§2.3)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge

from joulepool.errors import InvalidInput
from joulepool.grade import Energy, Grade
from joulepool.meters import (
    DCGM_ENERGY,
    DcgmMeter,
    KeplerMeter,
    MeterUnavailable,
    UnavailableReason,
    discover_prometheus,
    energy_between,
)
from tests.meters.conftest import CounterFamily, ServeRegistry, ServeText

GPU0 = {
    "gpu": "0",
    "UUID": "GPU-3877938d-024c-c46b-5268-cd86ad37f0d7",
    "device": "nvidia0",
    "modelName": "NVIDIA H200",
    "Hostname": "node-a",
    "DCGM_FI_DRIVER_VERSION": "550.54.15",
}
GPU1 = {**GPU0, "gpu": "1", "UUID": "GPU-aa7c2b5e-0d1e-4f3b-9c55-0123456789ab", "device": "nvidia1"}


def dcgm_registry() -> tuple[CollectorRegistry, CounterFamily]:
    registry = CollectorRegistry()
    family = CounterFamily(DCGM_ENERGY, "Total energy consumption since boot (in mJ).")
    registry.register(family)
    return registry, family


def test_dcgm_counter_in_mj_becomes_exact_uj(serve_registry: ServeRegistry) -> None:
    registry, family = dcgm_registry()
    family.set(GPU0, 123_456_789_012)  # printed by prometheus-client as 1.23456789012e+11
    family.set(GPU1, 7)
    url = serve_registry(registry)
    meter = DcgmMeter(url, GPU0["UUID"])
    before = meter.read()
    assert before.meter == f"dcgm:{GPU0['UUID']}"
    assert before.counter_uj == 123_456_789_012_000
    assert before.grade is Grade.HwShunt
    assert before.resolution_uj == 1000
    family.set(GPU0, 123_456_790_512)
    after = meter.read()
    assert energy_between(before, after) == Energy(1_500_000, Grade.HwShunt)
    assert DcgmMeter(url, "1").read().counter_uj == 7_000


def test_dcgm_text_exactly_as_the_exporter_writes_it(serve_text: ServeText) -> None:
    # dcgm-exporter types the family `counter` without `_total` and prints integers.
    labels = ",".join(f'{k}="{v}"' for k, v in GPU0.items())
    body = (
        f"# HELP {DCGM_ENERGY} Total energy consumption since boot (in mJ).\n"
        f"# TYPE {DCGM_ENERGY} counter\n"
        f"{DCGM_ENERGY}{{{labels}}} 9007199254740993\n"
    )
    url = serve_text(body.encode(), 200)
    # 2**53 + 1 mJ: a float cannot hold it, the text can, and the reading keeps it.
    assert DcgmMeter(url, GPU0["UUID"]).read().counter_uj == (2**53 + 1) * 1000


def test_dcgm_value_printed_from_a_float_beyond_2_53_is_refused(
    serve_registry: ServeRegistry,
) -> None:
    registry, family = dcgm_registry()
    family.set(GPU0, float(2**53 + 2))
    url = serve_registry(registry)
    with pytest.raises(MeterUnavailable) as info:
        DcgmMeter(url, GPU0["UUID"]).read()
    assert info.value.reason is UnavailableReason.invalid_value
    assert "2**53" in str(info.value)


@pytest.mark.parametrize("value", [1.5, float("nan"), float("inf"), -3.0])
def test_dcgm_value_that_is_not_a_whole_non_negative_mj_is_refused(
    serve_registry: ServeRegistry, value: float
) -> None:
    registry, family = dcgm_registry()
    family.set(GPU0, value)
    url = serve_registry(registry)
    with pytest.raises(MeterUnavailable) as info:
        DcgmMeter(url, GPU0["UUID"]).read()
    assert info.value.reason is UnavailableReason.invalid_value


def test_dcgm_copies_of_one_gpu_agree_or_are_refused(serve_registry: ServeRegistry) -> None:
    registry, family = dcgm_registry()
    # dcgm-exporter repeats a GPU's series for each pod it maps to it.
    family.set({**GPU0, "pod": "a", "namespace": "ml"}, 5_000)
    family.set({**GPU0, "pod": "b", "namespace": "ml"}, 5_000)
    url = serve_registry(registry)
    assert DcgmMeter(url, GPU0["UUID"]).read().counter_uj == 5_000_000
    family.set({**GPU0, "pod": "b", "namespace": "ml"}, 5_001)
    with pytest.raises(MeterUnavailable) as info:
        DcgmMeter(url, GPU0["UUID"]).read()
    assert info.value.reason is UnavailableReason.invalid_value


def test_dcgm_gpu_not_exported_is_not_found(serve_registry: ServeRegistry) -> None:
    registry, family = dcgm_registry()
    family.set(GPU0, 1)
    url = serve_registry(registry)
    with pytest.raises(MeterUnavailable) as info:
        DcgmMeter(url, "GPU-00000000-0000-0000-0000-000000000000").read()
    assert info.value.reason is UnavailableReason.not_found


def test_dcgm_counter_reset_by_a_driver_reload_is_unavailable(
    serve_registry: ServeRegistry,
) -> None:
    registry, family = dcgm_registry()
    family.set(GPU0, 900_000)
    url = serve_registry(registry)
    meter = DcgmMeter(url, GPU0["UUID"])
    before = meter.read()
    family.set(GPU0, 12)
    with pytest.raises(MeterUnavailable) as info:
        energy_between(before, meter.read())
    assert info.value.reason is UnavailableReason.counter_reset


def kepler_registry() -> tuple[CollectorRegistry, Counter, Counter, Counter]:
    registry = CollectorRegistry()
    pod_cpu = Counter(
        "kepler_pod_cpu_joules_total",
        "Energy consumption of cpu at pod level in joules",
        ["pod_id", "pod_name", "pod_namespace", "state", "zone"],
        registry=registry,
    )
    container_gpu = Counter(
        "kepler_container_gpu_joules_total",
        "Energy consumption of gpu at container level in joules",
        ["container_id", "container_name", "runtime", "gpu", "vendor", "state", "pod_id"],
        registry=registry,
    )
    pod_gpu = Counter(
        "kepler_pod_gpu_joules_total",
        "Energy consumption of gpu at pod level in joules",
        ["pod_id", "pod_name", "pod_namespace", "gpu", "vendor", "state"],
        registry=registry,
    )
    return registry, pod_cpu, container_gpu, pod_gpu


POD = {"pod_id": "7f3c", "pod_name": "trainer-0", "pod_namespace": "ml"}


def test_kepler_pod_figure_is_model_based_and_exact_to_the_uj(
    serve_registry: ServeRegistry,
) -> None:
    registry, pod_cpu, _, _ = kepler_registry()
    # Kepler holds whole µJ and prints them / 1e6 as a float.
    pod_cpu.labels(**POD, state="running", zone="package").inc(1_234_567_891 / 1e6)
    pod_cpu.labels(**POD, state="running", zone="dram").inc(5.0)
    url = serve_registry(registry)
    meter = KeplerMeter(url, "kepler_pod_cpu_joules_total", {**POD, "zone": "package"})
    first = meter.read()
    assert first.counter_uj == 1_234_567_891
    assert first.grade is Grade.ModelBased
    pod_cpu.labels(**POD, state="running", zone="package").inc(0.25)
    assert energy_between(first, meter.read()) == Energy(250_000, Grade.ModelBased)


def test_kepler_container_gpu_series(serve_registry: ServeRegistry) -> None:
    registry, _, container_gpu, _ = kepler_registry()
    ids = {"container_id": "c0ffee", "container_name": "train", "runtime": "containerd"}
    container_gpu.labels(**ids, gpu="0", vendor="nvidia", state="running", pod_id="7f3c").inc(42)
    url = serve_registry(registry)
    meter = KeplerMeter(url, "kepler_container_gpu_joules_total", {"container_id": "c0ffee"})
    reading = meter.read()
    assert reading.counter_uj == 42_000_000
    assert reading.grade is Grade.ModelBased


def test_kepler_selector_naming_two_series_is_ambiguous(serve_registry: ServeRegistry) -> None:
    registry, pod_cpu, _, _ = kepler_registry()
    pod_cpu.labels(**POD, state="running", zone="package").inc(1)
    pod_cpu.labels(**POD, state="running", zone="core").inc(1)
    url = serve_registry(registry)
    with pytest.raises(MeterUnavailable) as info:
        KeplerMeter(url, "kepler_pod_cpu_joules_total", POD).read()
    assert info.value.reason is UnavailableReason.invalid_value
    assert "zone" in str(info.value)


def test_kepler_restart_resets_its_counters_and_is_unavailable(
    serve_registry: ServeRegistry,
) -> None:
    registry, pod_cpu, _, _ = kepler_registry()
    pod_cpu.labels(**POD, state="running", zone="package").inc(100)
    url = serve_registry(registry)
    meter = KeplerMeter(url, "kepler_pod_cpu_joules_total", {**POD, "zone": "package"})
    before = meter.read()
    pod_cpu.clear()
    pod_cpu.labels(**POD, state="running", zone="package").inc(3)
    with pytest.raises(MeterUnavailable) as info:
        energy_between(before, meter.read())
    assert info.value.reason is UnavailableReason.counter_reset


def test_kepler_metric_must_be_one_it_exports() -> None:
    with pytest.raises(InvalidInput):
        KeplerMeter("http://127.0.0.1:1/metrics", "kepler_node_cpu_joules_total", POD)
    with pytest.raises(InvalidInput):
        KeplerMeter("http://127.0.0.1:1/metrics", "kepler_pod_cpu_joules_total", {})


def test_an_endpoint_nobody_listens_on_is_unreachable(closed_port_url: str) -> None:
    with pytest.raises(MeterUnavailable) as info:
        DcgmMeter(closed_port_url, "0").read()
    assert info.value.reason is UnavailableReason.unreachable
    assert closed_port_url in str(info.value)


def test_an_endpoint_answering_an_error_status_is_unreachable(serve_text: ServeText) -> None:
    url = serve_text(b"overloaded", 503)
    with pytest.raises(MeterUnavailable) as info:
        DcgmMeter(url, "0").read()
    assert info.value.reason is UnavailableReason.unreachable
    assert "503" in str(info.value)


def test_an_exposition_that_does_not_parse_is_invalid(serve_text: ServeText) -> None:
    url = serve_text(f'{DCGM_ENERGY}{{gpu="0" 12\n'.encode(), 200)
    with pytest.raises(MeterUnavailable) as info:
        DcgmMeter(url, "0").read()
    assert info.value.reason is UnavailableReason.invalid_value


def test_label_values_with_braces_and_quotes_do_not_confuse_the_value(
    serve_text: ServeText,
) -> None:
    body = f'{DCGM_ENERGY}{{gpu="0",modelName="odd }} \\"name\\" 99"}} 1234 1700000000000\n'
    url = serve_text(body.encode(), 200)
    assert DcgmMeter(url, "0").read().counter_uj == 1_234_000


def test_discovery_lists_every_gpu_and_series_from_one_scrape(
    serve_registry: ServeRegistry,
) -> None:
    registry, family = dcgm_registry()
    family.set(GPU0, 10)
    family.set(GPU1, 20)
    _, pod_cpu, _, pod_gpu = kepler_registry()
    pod_cpu.labels(**POD, state="running", zone="package").inc(1)
    pod_gpu.labels(**POD, gpu="0", vendor="nvidia", state="running").inc(2)
    registry.register(_Both(pod_cpu, pod_gpu))
    other = Gauge("unrelated_metric", "not energy", registry=registry)
    other.set(1)
    url = serve_registry(registry)
    scraped, meters = discover_prometheus(url)
    names = sorted(m.name for m in meters)
    assert names == sorted(
        [
            f"dcgm:{GPU0['UUID']}",
            f"dcgm:{GPU1['UUID']}",
            "kepler:kepler_pod_cpu_joules_total{pod_id=7f3c,pod_name=trainer-0,pod_namespace=ml,zone=package}",
            "kepler:kepler_pod_gpu_joules_total{gpu=0,pod_id=7f3c,pod_name=trainer-0,pod_namespace=ml,vendor=nvidia}",
        ]
    )
    for meter in meters:
        assert meter.reading_from(scraped).read_at_us == scraped.read_at_us


class _Both:
    """Re-exposes two counters from another registry in this one."""

    def __init__(self, *counters: Counter) -> None:
        self.counters = counters

    def collect(self):  # type: ignore[no-untyped-def]
        for c in self.counters:
            yield from c.collect()
