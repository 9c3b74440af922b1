"""Real things for the meter tests: powercap trees on disk and exporters on loopback."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

# The most common max_energy_range_uj on Intel servers: 0xFFFFFFFF raw units of 2**-14 J,
# scaled and floored by the kernel.
INTEL_MAX_RANGE_UJ = 262143328850


class PowercapTree:
    """A powercap class directory written into a folder, laid out as the kernel does."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def zone(
        self,
        zone: str,
        name: str,
        energy_uj: int | str,
        max_range_uj: int | str | None = INTEL_MAX_RANGE_UJ,
    ) -> Path:
        """Write one zone: its name, its counter and (unless None) its range."""
        path = self.root / zone
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o755)
        (path / "name").write_text(f"{name}\n")
        self.set_energy(zone, energy_uj)
        if max_range_uj is not None:
            (path / "max_energy_range_uj").write_text(f"{max_range_uj}\n")
        return path

    def set_energy(self, zone: str, energy_uj: int | str) -> None:
        """Overwrite a zone's counter, as the hardware advancing would."""
        (self.root / zone / "energy_uj").write_text(f"{energy_uj}\n")


@pytest.fixture
def powercap() -> Iterator[PowercapTree]:
    """A powercap root in a folder others can traverse, so a dropped-privilege read sees it."""
    root = Path(tempfile.mkdtemp(prefix="powercap-"))
    root.chmod(0o755)
    try:
        yield PowercapTree(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


class CounterFamily(Collector):
    """A counter family whose samples carry exactly the exporter's name, as DCGM exporter's do.

    prometheus-client's own `Counter` would append `_total`; dcgm-exporter does not.
    """

    def __init__(self, name: str, documentation: str) -> None:
        self.name = name
        self.documentation = documentation
        self.series: dict[tuple[tuple[str, str], ...], float] = {}

    def set(self, labels: Mapping[str, str], value: float) -> None:
        self.series[tuple(sorted(labels.items()))] = value

    def collect(self) -> Iterable[Metric]:
        metric = Metric(self.name, self.documentation, "counter")
        for labels, value in self.series.items():
            metric.add_sample(self.name, dict(labels), value)
        yield metric


ServeRegistry = Callable[[CollectorRegistry], str]


class _Switch(Collector):
    """Collects whichever registry the current test serves."""

    def __init__(self) -> None:
        self.target: CollectorRegistry | None = None

    def collect(self) -> Iterable[Metric]:
        if self.target is not None:
            yield from self.target.collect()


@pytest.fixture(scope="session")
def _exporter() -> Iterator[tuple[str, _Switch]]:
    # One prometheus-client HTTP server for the session: its shutdown waits out a poll.
    switch = _Switch()
    registry = CollectorRegistry()
    registry.register(switch)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    yield f"http://127.0.0.1:{server.server_port}/metrics", switch
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


@pytest.fixture
def serve_registry(_exporter: tuple[str, _Switch]) -> Iterator[ServeRegistry]:
    """Serve a registry with prometheus-client's own HTTP server on loopback; yields its URL."""
    url, switch = _exporter

    def serve(registry: CollectorRegistry) -> str:
        switch.target = registry
        return url

    yield serve
    switch.target = None


ServeText = Callable[[bytes, int], str]


@pytest.fixture
def serve_text() -> Iterator[ServeText]:
    """Serve fixed bytes with a status on loopback (for verbatim or broken exporters)."""
    servers = []

    def serve(body: bytes, status: int = 200) -> str:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        servers.append((server, thread))
        return f"http://127.0.0.1:{server.server_address[1]}/metrics"

    yield serve
    for server, thread in servers:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def closed_port_url() -> str:
    """A loopback URL on which nothing listens: a port bound, then released."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"


def running_as_root() -> bool:
    return os.geteuid() == 0
