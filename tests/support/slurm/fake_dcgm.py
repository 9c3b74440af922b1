"""A simulated DCGM exporter for test clusters (TEST ONLY): a real HTTP server on 127.0.0.1.

It serves DCGM exporter's exposition at `/metrics`: one
`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` series per GPU (labels `gpu`, `UUID`, `device`,
`modelName`, `Hostname`), in whole millijoules, advancing at `--watts` per GPU from the
moment it starts, like the simulated RAPL meter. SIGUSR1 resets every counter to 0 (as a
driver reload does to NVML's counter, which DCGM reads), so tests can make a reset happen.

With `--power-file F`, a test sets each GPU's draw while the exporter runs: F, re-read at
every scrape, is a JSON object of GPU index to whole watts (`{"0": 20, "3": 300}`); a GPU it
does not name, or no file, or an unreadable one, draws `--watts`. Power is integrated over
time, so a counter never goes back when the draw changes: each scrape first adds the draw in
force since the last one, then takes the file's.

    python tests/support/slurm/fake_dcgm.py --port 9400 --gpus 4 --watts 250 --ready-file F
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HELP = (
    "# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).\n"
    "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n"
)


def uuid_of(gpu: int) -> str:
    """The simulated GPU's UUID."""
    return f"GPU-00000000-0000-0000-0000-{gpu:012d}"


class Counters:
    """Every GPU's counter: its draw integrated over time since the last reset, in whole mJ."""

    def __init__(
        self, gpus: int, watts: int, hostname: str, power_file: Path | None = None
    ) -> None:
        self.gpus = gpus
        self.watts = watts
        self.hostname = hostname
        self.power_file = power_file
        self.lock = threading.Lock()
        self.t0 = time.monotonic()
        self.joules = [0.0] * gpus
        self.draw = self._read_draw()

    def _read_draw(self) -> list[int]:
        """Each GPU's watts now: the power file's figure, else `--watts`."""
        named: dict[str, object] = {}
        if self.power_file is not None:
            try:
                found = json.loads(self.power_file.read_text())
            except (OSError, ValueError):
                found = {}
            named = found if isinstance(found, dict) else {}
        out = []
        for gpu in range(self.gpus):
            w = named.get(str(gpu), self.watts)
            out.append(w if type(w) is int and w >= 0 else self.watts)
        return out

    def reset(self) -> None:
        """Back to 0, as after a driver reload."""
        with self.lock:
            self.t0 = time.monotonic()
            self.joules = [0.0] * self.gpus

    def advance(self) -> list[int]:
        """Add each GPU's draw since the last call, take the new draw; every counter in mJ."""
        with self.lock:
            now = time.monotonic()
            elapsed = now - self.t0
            self.t0 = now
            for gpu in range(self.gpus):
                self.joules[gpu] += elapsed * self.draw[gpu]
            self.draw = self._read_draw()
            return [int(j * 1000) for j in self.joules]

    def exposition(self) -> str:
        """DCGM exporter's text for every GPU now."""
        counters = self.advance()
        lines = [HELP]
        for gpu in range(self.gpus):
            lines.append(
                f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu="{gpu}",UUID="{uuid_of(gpu)}",'
                f'device="nvidia{gpu}",modelName="NVIDIA H100 80GB HBM3",'
                f'Hostname="{self.hostname}"}} {counters[gpu]}\n'
            )
        return "".join(lines)


def serve(port: int, counters: Counters) -> ThreadingHTTPServer:
    """The exporter's HTTP server on 127.0.0.1:`port` (not yet serving)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/metrics":
                self.send_error(404)
                return
            body = counters.exposition().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    return ThreadingHTTPServer(("127.0.0.1", port), Handler)


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM; SIGUSR1 resets the counters."""
    parser = argparse.ArgumentParser(prog="fake_dcgm", description="simulated DCGM exporter")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--watts", type=int, default=250)
    parser.add_argument("--hostname", default="localhost")
    parser.add_argument("--ready-file", type=Path)
    parser.add_argument("--power-file", type=Path, help="JSON: GPU index to watts, re-read")
    args = parser.parse_args(argv)
    counters = Counters(args.gpus, args.watts, args.hostname, args.power_file)
    server = serve(args.port, counters)
    signal.signal(signal.SIGUSR1, lambda *_: counters.reset())
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    if args.ready_file is not None:
        args.ready_file.touch()
    server.serve_forever(poll_interval=0.1)
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
