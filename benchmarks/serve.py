"""Durable admissions per second over loopback HTTP (14). Prints one JSON object.

A real `pool serve` (file store, then PostgreSQL when its server binaries are installed)
takes many concurrent clients, each submitting claims that are admitted; every answer was
fsynced (or committed) before it was sent. The load generator is a separate process.

The framework's floor is measured in the same run, under the same load: a bare FastAPI
application on uvicorn (same parser and loop) that validates the same claim body with
the same model and answers a verdict-shaped JSON, with no token, decision, signature or
disk. `ratio_to_bare` is the file store's admissions per second over the floor's, per
round; rounds alternate floor and service so that both see the same machine.
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
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from joulepool.service.models import ClaimIn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.pg import INSTALL_HINT, PgServer, find_binaries
from tests.support.servers import Deployment, free_port, start_serve

CLIENTS = int(os.environ.get("BENCH_CLIENTS", "64"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "10"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
SNAPSHOT_EVERY = int(os.environ.get("BENCH_SNAPSHOT_EVERY", "1000"))
"""the same load with a state snapshot sealed every this many entries, so
several are written during each round; `p99_snapshotting_ratio` compares the tails."""
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
        f'\n[[entitlement]]\nid = "team-{i}"\nparent = "cluster"\nguarantee_uj = {2**64 - 1}\n'
        f"guarantee_devices = {10**9}\nover_quota_weight = 1\n"
        for i in range(8)
    )
    (folder / "pool.toml").write_text(text)


async def load(
    url: str, token: str, seconds: float, prefix: str = "b", clients: int = CLIENTS
) -> dict[str, Any]:
    """`clients` keep-alive connections, each sending its next claim (ids `<prefix><n>-<i>`)
    as soon as it is answered.

    The requests are written by hand over asyncio streams: an HTTP client library in
    Python costs more CPU per request than the server, and on two cores it would measure
    itself (httpx here topped out near 320 requests/s).
    """
    host, _, port = url.removeprefix("http://").partition(":")
    latencies: list[float] = []
    admitted = 0
    stop = time.perf_counter() + seconds

    async def client(n: int) -> None:
        nonlocal admitted
        reader, writer = await asyncio.open_connection(host, int(port))
        head = (
            f"POST /v1/claims HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer {token}\r\n"
            "content-type: application/json\r\ncontent-length: "
        ).encode()
        i = 0
        try:
            while time.perf_counter() < stop:
                body = json.dumps(
                    {
                        "id": f"{prefix}{n}-{i}",
                        "entitlement": f"team-{n % 8}",
                        "gang_size": 1,
                        "devices_per_member": 1,
                        "estimate": {"uj": 1000, "grade": "HwShunt"},
                    }
                ).encode()
                started = time.perf_counter()
                writer.write(head + str(len(body)).encode() + b"\r\n\r\n" + body)
                status, length = _response_head(await reader.readuntil(b"\r\n\r\n"))
                answer = await reader.readexactly(length)
                latencies.append(time.perf_counter() - started)
                if status == 200 and json.loads(answer)["verdict"] == "admit":
                    admitted += 1
                i += 1
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(client(n) for n in range(clients)))
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "admitted": admitted,
        "elapsed_s": elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
    }


def _response_head(raw: bytes) -> tuple[int, int]:
    lines = raw.split(b"\r\n")
    status = int(lines[0].split()[1])
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return status, int(value)
    raise ValueError(f"no content-length in {raw[:200]!r}")


def metric(url: str, token: str, name: str) -> float:
    headers = {"Authorization": f"Bearer {token}"}  # /metrics needs a token (API.md)
    for line in httpx.get(f"{url}/metrics", headers=headers).text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.split()[-1])
    raise KeyError(name)


def bare_app() -> Any:
    """The framework's floor: FastAPI validating the claim body, no decision, no disk."""
    app = FastAPI()

    @app.post("/v1/claims")
    async def submit(body: ClaimIn) -> JSONResponse:
        return JSONResponse(
            {
                "claim": body.id,
                "verdict": "admit",
                "reserved": body.estimate.model_dump(),
                "devices": body.gang_size * body.devices_per_member,
                "borrowed_uj": 0,
                "seq": 0,
            }
        )

    return app


def run_bare() -> dict[str, Any]:
    """The same load against `bare_app` served by uvicorn as `pool serve` is served."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--bare", str(port)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                httpx.get(f"{url}/openapi.json", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.05)
        figures = load_in_process(url, "none")
    finally:
        proc.kill()
        proc.wait()
    return summary(figures)


def load_in_process(url: str, token: str) -> dict[str, Any]:
    """The load, run in its own process so it does not share the server's interpreter."""
    out = subprocess.run(
        [sys.executable, __file__, "--load", url, token, str(SECONDS)],
        capture_output=True,
        text=True,
        check=True,
    )
    figures: dict[str, Any] = json.loads(out.stdout)
    return figures


def summary(figures: dict[str, Any]) -> dict[str, Any]:
    return {
        "admissions_per_s": round(figures["admitted"] / figures["elapsed_s"]),
        "p50_ms": round(figures["p50_ms"], 2),
        "p99_ms": round(figures["p99_ms"], 2),
        "admitted": figures["admitted"],
    }


def run(extra: tuple[str, ...], folder: Path) -> dict[str, Any]:
    deployment = Deployment.create(folder, tenants=())
    big_tree(folder)
    serve = start_serve(folder, *extra)
    try:
        fsyncs_before = metric(serve.url, deployment.operator, "pool_fsyncs_total")
        figures = load_in_process(serve.url, deployment.operator)
        fsyncs = metric(serve.url, deployment.operator, "pool_fsyncs_total") - fsyncs_before
    finally:
        serve.kill()
    return {
        **summary(figures),
        "fsyncs_per_admission": round(fsyncs / max(1, figures["admitted"]), 4),
    }


def main() -> None:
    if sys.argv[1:2] == ["--load"]:
        print(json.dumps(asyncio.run(load(sys.argv[2], sys.argv[3], float(sys.argv[4])))))
        return
    if sys.argv[1:2] == ["--bare"]:
        import uvicorn

        uvicorn.run(bare_app(), host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
        return
    result: dict[str, Any] = {"clients": CLIENTS, "seconds": SECONDS, "rounds": ROUNDS}
    with tempfile.TemporaryDirectory() as tmp:
        bare, files, snapping = [], [], []
        for n in range(ROUNDS):
            bare.append(run_bare())
            files.append(run((), Path(tmp) / f"file-{n}"))
            every = ("--snapshot-every", str(SNAPSHOT_EVERY))
            snapping.append(run(every, Path(tmp) / f"snap-{n}"))
        ratios = [
            f["admissions_per_s"] / b["admissions_per_s"] for f, b in zip(files, bare, strict=True)
        ]
        result["bare_rounds"] = bare
        result["file_rounds"] = files
        result["ratio_rounds"] = [round(r, 3) for r in ratios]
        result["bare_per_s"] = round(statistics.median(b["admissions_per_s"] for b in bare))
        result["file"] = files[sorted(range(ROUNDS), key=lambda i: ratios[i])[ROUNDS // 2]]
        result["ratio_to_bare"] = round(statistics.median(ratios), 3)
        p99_ratios = [
            s["p99_ms"] / f["p99_ms"] for s, f in zip(snapping, files, strict=True) if f["p99_ms"]
        ]
        result["snapshot_every"] = SNAPSHOT_EVERY
        result["snapshot_rounds"] = snapping
        result["p99_snapshotting_ratio_rounds"] = [round(r, 3) for r in p99_ratios]
        result["p99_snapshotting_ratio"] = round(statistics.median(p99_ratios), 3)
        dsn = os.environ.get("BENCH_POSTGRES_DSN")
        if dsn is not None:
            result["postgres"] = run(("--postgres", dsn), Path(tmp) / "pgd")
        elif (binaries := find_binaries()) is None:
            result["postgres"] = {"skipped": INSTALL_HINT}
        else:
            server = PgServer(*binaries)
            try:
                result["postgres"] = run(("--postgres", server.dsn()), Path(tmp) / "pgd")
            finally:
                server.close()
    if "admissions_per_s" in result.get("postgres", {}):
        # Side by side, measured in one run: what sharing the ledger across replicas costs.
        result["postgres_to_file_ratio"] = round(
            result["postgres"]["admissions_per_s"] / result["file"]["admissions_per_s"], 3
        )
    result["goal"] = {
        "ratio_to_bare_min": 0.8,
        "file_admissions_per_s_min": 2000,
        "file_p99_ms_max": 50,
        "fsyncs_per_admission_max": 0.2,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
