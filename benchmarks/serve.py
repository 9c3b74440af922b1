"""Durable admissions per second over loopback HTTP (issue 5). Prints one JSON object.

A real `pool serve` (file store, then PostgreSQL when its server binaries are installed)
takes many concurrent clients, each submitting claims that are admitted; every answer was
fsynced (or committed) before it was sent. The load generator is a separate process.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.servers import Deployment, start_serve

CLIENTS = int(os.environ.get("BENCH_CLIENTS", "64"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "10"))
TREE = """
[pool]
steward = "steward"

[[entitlement]]
id = "cluster"
guarantee_uj = 0
guarantee_devices = 0
over_quota_weight = 0
"""


def big_tree(folder: Path) -> None:
    """Teams with guarantees no benchmark run can exhaust, so every claim is admitted."""
    text = TREE + "".join(
        f'\n[[entitlement]]\nid = "team-{i}"\nparent = "cluster"\nguarantee_uj = {10**30}\n'
        f"guarantee_devices = {10**9}\nover_quota_weight = 1\n"
        for i in range(8)
    )
    (folder / "pool.toml").write_text(text)


async def load(url: str, token: str, seconds: float) -> dict[str, Any]:
    latencies: list[float] = []
    admitted = 0
    stop = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, limits=limits, timeout=30
    ) as http:

        async def client(n: int) -> None:
            nonlocal admitted
            i = 0
            while time.perf_counter() < stop:
                body = {
                    "id": f"b{n}-{i}",
                    "entitlement": f"team-{n % 8}",
                    "gang_size": 1,
                    "devices_per_member": 1,
                    "estimate": {"uj": 1000, "grade": "HwShunt"},
                }
                started = time.perf_counter()
                r = await http.post("/v1/claims", json=body)
                latencies.append(time.perf_counter() - started)
                if r.status_code == 200 and r.json()["verdict"] == "admit":
                    admitted += 1
                i += 1

        started = time.perf_counter()
        await asyncio.gather(*(client(n) for n in range(CLIENTS)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "admitted": admitted,
        "elapsed_s": elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
    }


def metric(url: str, name: str) -> float:
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.split()[-1])
    raise KeyError(name)


def run(extra: tuple[str, ...], folder: Path) -> dict[str, Any]:
    deployment = Deployment.create(folder, tenants=())
    big_tree(folder)
    serve = start_serve(folder, *extra)
    try:
        fsyncs_before = metric(serve.url, "pool_fsyncs_total")
        # The load runs in its own process, so it does not share the server's interpreter.
        out = subprocess.run(
            [sys.executable, __file__, "--load", serve.url, deployment.operator, str(SECONDS)],
            capture_output=True,
            text=True,
            check=True,
        )
        figures = json.loads(out.stdout)
        fsyncs = metric(serve.url, "pool_fsyncs_total") - fsyncs_before
    finally:
        serve.kill()
    return {
        "admissions_per_s": round(figures["admitted"] / figures["elapsed_s"]),
        "p50_ms": round(figures["p50_ms"], 2),
        "p99_ms": round(figures["p99_ms"], 2),
        "fsyncs_per_admission": round(fsyncs / max(1, figures["admitted"]), 4),
        "admitted": figures["admitted"],
    }


def main() -> None:
    if sys.argv[1:2] == ["--load"]:
        print(json.dumps(asyncio.run(load(sys.argv[2], sys.argv[3], float(sys.argv[4])))))
        return
    result: dict[str, Any] = {"clients": CLIENTS, "seconds": SECONDS}
    with tempfile.TemporaryDirectory() as tmp:
        result["file"] = run((), Path(tmp) / "file")
        dsn = os.environ.get("BENCH_POSTGRES_DSN")
        if dsn is None:
            try:
                from tests.pg import throwaway_postgres  # type: ignore[attr-defined]
            except ImportError:
                throwaway_postgres = None
            if throwaway_postgres is None:
                result["postgres"] = {
                    "skipped": "no PostgreSQL harness (tests/pg.py) or server binaries"
                }
            else:
                with throwaway_postgres(Path(tmp) / "pg") as pg_dsn:
                    result["postgres"] = run(("--postgres", pg_dsn), Path(tmp) / "pgd")
        else:
            result["postgres"] = run(("--postgres", dsn), Path(tmp) / "pgd")
    result["goal"] = {
        "file_admissions_per_s_min": 2000,
        "file_p99_ms_max": 50,
        "fsyncs_per_admission_max": 0.2,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
