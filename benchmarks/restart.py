"""Restart from a state snapshot against restart by full replay. Prints one JSON object.

For ledgers of 200,000 and 2,000,000 entries (BENCH_RESTART_SIZES overrides, e.g.
"20000,200000"), each with a tail of 10,000 entries after its newest snapshot:

- ready_from_snapshot_s_*: a real `pool serve` from spawn to /readyz answering 200, with the
  snapshot and the claim index beside the ledger (it verifies and folds only the tail): the
  median of BENCH_RESTART_STARTS starts (default 3), the sizes started in turn, each one's
  listed in ready_from_snapshot_starts_s_*;
- full_replay_s_*: the same with the snapshot moved away (it verifies and folds everything);
- ready_from_snapshot_cpu_s_*, full_replay_cpu_s_*: CPU seconds the serving process and
  the workers that verified its ledger used until it was ready (user plus system), the
  figure a busy machine stretches least;
- serve_rss_mb_*: peak resident memory (VmHWM) of that serving process, started from the
  snapshot, once ready;
- verify_rss_mb_*: peak resident memory of `pool ledger verify` over the deployment (a full
  verification from entry 0, duplicates checked through an on-disk index);
- dashboard_built_s_*: from /readyz answering 200 after a start from the snapshot until
  `GET /v1/dashboard` answers 200: the timeline is read from the whole history by a thread
  of its own (docs/reliability.md §16), the dashboard answering 503 `dashboard_building`
  meanwhile; beside it healthz_max_s_*, readyz_max_s_* and dashboard_503_max_s_*, the
  slowest of each answer while it was being built (asked in turn, back to back), and
  dashboard_tries_*. BENCH_RESTART_DASHBOARD=0 leaves these out;
- import_s: what every `pool` command imports before it runs (`import joulepool.cli` and
  building its parser), the best wall time of several fresh interpreters; beside it
  import_cli_module_s (`import joulepool.cli` alone) and python_start_s (`python -c pass`),
  the interpreter's own start, included in both. BENCH_RESTART_SIZES= (empty) measures
  only these.

The ledgers are built once and cached under .cache/bench/ (benchmarks/ledgers.py).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.servers import start_serve, wait_ready

from joulepool.deployment.config import read_config, write_config
from joulepool.deployment.open import open_pool
from joulepool.ledger.cose import content_address
from joulepool.ledger.keys import write_key_file
from joulepool.ledger.rollback import HighWater
from joulepool.ledger.snapshot import STATE_LAYOUT
from joulepool.service.tokens import add_token
from joulepool.stores.claim_index import ClaimIndex, index_path
from joulepool.stores.file import FileStore
from joulepool.stores.highwater import HighWaterFile, record_path
from joulepool.tree import Entitlement, Tree
from ledgers import CACHE, KEY, ledger_file

SIZES = [int(s) for s in os.environ.get("BENCH_RESTART_SIZES", "200000,2000000").split(",") if s]
TAIL = int(os.environ.get("BENCH_RESTART_TAIL", "10000"))
FULL = os.environ.get("BENCH_RESTART_FULL", "1") != "0"
"""BENCH_RESTART_FULL=0 skips the full replay and the full verification (the slow parts)."""
STARTS = int(os.environ.get("BENCH_RESTART_STARTS", "3"))
DASHBOARD = os.environ.get("BENCH_RESTART_DASHBOARD", "1") != "0"
NAMES = {200_000: "200k", 2_000_000: "2m"}


def name(n: int) -> str:
    return NAMES.get(n, str(n))


def deployment(entries: int, root: Path) -> Path:
    """A deployment whose ledger has `entries` entries and a snapshot `TAIL` before its end:
    built once (it takes a full replay) and cached under .cache/bench/ per snapshot state
    layout, then copied for each run."""
    cached = CACHE / f"dep-{entries}-tail{TAIL}-layout{STATE_LAYOUT}"
    if not cached.is_dir():
        building = CACHE / f".building-{cached.name}"
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir(parents=True)
        build(entries, building)
        building.rename(cached)
    # A cached claim index is brought to the schema of the code being measured (a new
    # index is built once here), so no start below pays for that upgrade; one that records
    # no binding to its ledger (DESIGN.md §4) would be rebuilt by a full replay at every
    # start over a fresh copy, so one writer's start binds it here, once.
    index = ClaimIndex(index_path(cached / "ledger.cbor"))
    recorded = index.recorded()
    index.close()
    if recorded is None or not recorded[0]:
        open_pool(cached).close()
    folder = root / f"dep-{entries}"
    shutil.copytree(cached, folder)
    # The fixture's entries are dated when its ledger was generated; a start more than
    # `max_clock_gap` after the last one is a clock_jump (DESIGN.md §3), which measures
    # nothing here, so the copy allows a gap as long as the fixture may be kept.
    config = folder / "pool.toml"
    text = config.read_text(encoding="utf-8")
    config.write_text(text.replace("[pool]\n", "[pool]\nmax_clock_gap = 315360000\n", 1))
    return folder


def build(entries: int, folder: Path) -> None:
    """Write the deployment into the empty `folder`."""
    source = ledger_file(entries)
    write_key_file(folder / "steward.key", KEY)
    write_key_file(folder / "steward.pub", KEY.public())
    (folder / "witnesses").mkdir()
    ents = [Entitlement(f"team-{i:02d}", 10**18, 10**6, 1) for i in range(50)]
    tree = Tree(ents)
    write_config(folder / "pool.toml", KEY.kid, tree)
    add_token(folder / "tokens.toml", "ops", "operator", tree)
    store = FileStore(source, writer=False)
    cut = store.offset(entries - TAIL)
    head = content_address(store.entry(entries - TAIL - 1))
    end_head = content_address(store.entry(entries - 1))
    store.close()
    ledger = folder / "ledger.cbor"
    with source.open("rb") as src, ledger.open("wb") as out:
        shutil.copyfileobj(src, out)
    os.truncate(ledger, cut)
    HighWaterFile.create(record_path(ledger), HighWater(entries - TAIL, head)).close()
    pool = open_pool(folder)  # full replay once: builds the claim index
    pool.seal_snapshot()
    pool.close()
    with source.open("rb") as src, ledger.open("ab") as out:
        src.seek(cut)
        shutil.copyfileobj(src, out)
    high = HighWaterFile.open(record_path(ledger), writable=True)
    assert high is not None
    high.advance(HighWater(entries, end_head))
    high.close()


def starts_in_turn(folders: dict[int, Path]) -> dict[int, tuple[float, float, float, list[float]]]:
    """`serve_ready` `STARTS` times over each folder, one start of each size in turn, so the
    sizes share whatever else the machine is doing; per size, the median wall time, the
    largest resident memory, the median CPU seconds, and every wall time. Each start over a
    folder cuts its claim index back to the snapshot and folds the same tail again."""
    runs: dict[int, list[tuple[float, float, float]]] = {n: [] for n in folders}
    for _ in range(max(1, STARTS)):
        for n, folder in folders.items():
            runs[n].append(serve_ready(folder))
    out = {}
    for n, done in runs.items():
        walls = [ready for ready, _, _ in done]
        out[n] = (
            statistics.median(walls),
            max(rss for _, rss, _ in done),
            statistics.median(cpu for _, _, cpu in done),
            walls,
        )
    return out


def vm_hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def cpu_s(pid: int) -> float:
    """User plus system CPU seconds the process has used, with the children it waited for
    (the workers that verified its ledger): what a start costs whatever else the machine is
    doing, beside the wall time that a shared machine stretches."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def serve_ready(folder: Path) -> tuple[float, float, float]:
    started = time.perf_counter()
    serve = start_serve(folder, wait=False)
    wait_ready(serve, timeout_s=3600)  # a full replay of millions of entries takes minutes
    ready = time.perf_counter() - started
    rss = vm_hwm_mb(serve.proc.pid)
    cpu = cpu_s(serve.proc.pid)
    serve.kill()
    return ready, rss, cpu


def dashboard_after_start(folder: Path) -> dict[str, float]:
    """Start from the snapshot, then ask /healthz, /readyz and /v1/dashboard in turn until
    the dashboard answers 200: how long after ready that took and the slowest of each
    answer meanwhile (docs/reliability.md §16)."""
    import httpx

    token = add_token(
        folder / "tokens.toml",
        f"dash-{time.monotonic_ns()}",
        "operator",
        read_config(folder / "pool.toml").tree,
    )
    serve = start_serve(folder, wait=False)
    try:
        wait_ready(serve, timeout_s=3600)
        ready = time.perf_counter()
        slowest = {"healthz": 0.0, "readyz": 0.0, "dashboard_503": 0.0}
        tries = 0
        auth = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=serve.url, timeout=600) as client:
            while True:
                for probe in ("healthz", "readyz"):
                    asked = time.perf_counter()
                    assert client.get(f"/{probe}").status_code == 200
                    slowest[probe] = max(slowest[probe], time.perf_counter() - asked)
                asked = time.perf_counter()
                answer = client.get("/v1/dashboard", headers=auth)
                took = time.perf_counter() - asked
                tries += 1
                if answer.status_code == 200:
                    built = time.perf_counter() - ready
                    break
                assert answer.json()["error"] == "dashboard_building", answer.text
                slowest["dashboard_503"] = max(slowest["dashboard_503"], took)
                time.sleep(0.05)
    finally:
        serve.kill()
    return {
        "built_s": round(built, 3),
        **{f"{k}_max_s": round(v, 4) for k, v in slowest.items()},
        "tries": tries,
    }


def verify_rss(folder: Path) -> float:
    proc = subprocess.Popen(
        [sys.executable, "-m", "joulepool", "ledger", "verify", str(folder), "--workers", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise RuntimeError(f"pool ledger verify exited {status}")
    return usage.ru_maxrss / 1024


IMPORT_ROUNDS = 7
"""Fresh interpreters per import figure; the best is kept, the one least stretched by load."""


def import_seconds(code: str) -> float:
    """The best wall time of `python -c code` over IMPORT_ROUNDS fresh interpreters."""
    best = float("inf")
    for _ in range(IMPORT_ROUNDS):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        best = min(best, time.perf_counter() - start)
    return round(best, 4)


def main() -> None:
    # A shared machine stretches wall times: its load is reported beside them, and the CPU
    # seconds each start used (`*_cpu_s_*`) are the figure another machine can compare.
    out: dict[str, object] = {"tail_entries": TAIL, "load_average_1m": os.getloadavg()[0]}
    out["import_s"] = import_seconds("import joulepool.cli; joulepool.cli.build_parser()")
    out["import_cli_module_s"] = import_seconds("import joulepool.cli")
    out["python_start_s"] = import_seconds("pass")
    with tempfile.TemporaryDirectory(prefix="bench-restart-") as tmp:
        folders = {n: deployment(n, Path(tmp)) for n in SIZES}
        started = starts_in_turn(folders)
        for n, folder in folders.items():
            ready, rss, cpu, walls = started[n]
            out[f"ready_from_snapshot_s_{name(n)}"] = round(ready, 3)
            out[f"ready_from_snapshot_starts_s_{name(n)}"] = [round(w, 3) for w in walls]
            out[f"ready_from_snapshot_cpu_s_{name(n)}"] = round(cpu, 2)
            out[f"serve_rss_mb_{name(n)}"] = round(rss, 1)
            if DASHBOARD:
                for key, value in dashboard_after_start(folder).items():
                    figure = f"dashboard_{key}" if key in ("built_s", "tries") else key
                    out[f"{figure}_{name(n)}"] = value
            if not FULL:
                print(json.dumps(out), file=sys.stderr, flush=True)
                shutil.rmtree(folder)
                continue
            snaps = folder / "ledger.cbor.snapshots"
            snaps.rename(folder / "aside")
            full, full_rss, full_cpu = serve_ready(folder)
            (folder / "aside").rename(snaps)
            out[f"full_replay_s_{name(n)}"] = round(full, 3)
            out[f"full_replay_cpu_s_{name(n)}"] = round(full_cpu, 2)
            out[f"full_replay_rss_mb_{name(n)}"] = round(full_rss, 1)
            out[f"verify_rss_mb_{name(n)}"] = round(verify_rss(folder), 1)
            shutil.rmtree(folder)
            # Each size as it is done, so a run cut short still shows what it measured.
            print(json.dumps(out), file=sys.stderr, flush=True)
    if len(SIZES) >= 2:
        small, large = name(SIZES[0]), name(SIZES[-1])
        out["snapshot_ready_ratio"] = round(
            float(out[f"ready_from_snapshot_s_{large}"])  # type: ignore[arg-type]
            / float(out[f"ready_from_snapshot_s_{small}"]),  # type: ignore[arg-type]
            3,
        )
        out["rss_ratio"] = round(
            float(out[f"serve_rss_mb_{large}"])  # type: ignore[arg-type]
            / float(out[f"serve_rss_mb_{small}"]),  # type: ignore[arg-type]
            3,
        )
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
