"""The ledger as a C2SP log (DESIGN.md §8): what keeping the tree costs, and what publishing
it costs at size. Prints one JSON object.

- admissions_per_s_tree, admissions_per_s_no_tree, tree_cost_ratio: one admission and one
  release per `Pool.apply` (the worst case: the tree's right edge is kept for every
  batch), over a ledger in memory so no fsync hides the cost; the same process runs the two
  in alternating rounds (BENCH_TLOG_ROUNDS, default 5), "no tree" with the tree's append and
  state made no-ops, and reports each one's best round (tree_cost_ratio_median: the
  medians'). tree_cost_ratio_batch_32: the same with 32 operations a batch, as `pool
  serve`'s committer groups them under load. Goal: ratio >= 0.95.
- tiles_s_<N>: `pool ledger tiles DIR OUT` over a deployment of N entries (argument 1,
  default 2,000,000; its ledger from benchmarks/ledgers.py, or BENCH_TLOG_DEPLOYMENT, a
  deployment folder to copy), a real process, spawn to exit; tiles_files_<N> the files it
  wrote. Goal at 2,000,000: under 60 s.
- index_follow_s_<N>: the tile index `pool serve` keeps, brought from 0 to N entries (its
  first /checkpoint after a start); inclusion_proof_us / consistency_proof_us: the median
  time of one proof at that size, from the index (reads of 256 entries included), and
  inclusion_proof_hashes / consistency_proof_hashes and their bytes as JSON;
  level0_tile_us / entry_bundle_us: the median time to produce a full level-0 tile or entry
  bundle from a cold read of its 256 entries.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from joulepool.claim import Claim
from joulepool.grade import Energy, Grade
from joulepool.ledger.merkle import CompactRange, consistency_proof, inclusion_proof
from joulepool.ledger.tile_index import TileIndex
from joulepool.pool import Pool, ReleaseRequest
from joulepool.stores.file import FileStore
from joulepool.stores.memory import MemoryStore
from joulepool.tree import Entitlement, Tree

ROUNDS = int(os.environ.get("BENCH_TLOG_ROUNDS", "5"))
PER_ROUND = int(os.environ.get("BENCH_TLOG_ADMISSIONS", "3000"))
PROOFS = 200
BATCH = 32


def _admissions_per_s(pool: Pool, first: int, batch: int) -> float:
    begin = time.perf_counter()
    for at in range(first, first + PER_ROUND, batch):
        ids = range(at, at + batch)
        pool.apply(
            [Claim(f"c{i}", f"team-{i % 50:02d}", 1, 1, Energy(1_000, Grade.HwShunt)) for i in ids]
        )
        pool.apply([ReleaseRequest(f"c{i}", Energy(900, Grade.HwShunt)) for i in ids])
    return PER_ROUND / (time.perf_counter() - begin)


def _no_append(_range: CompactRange, _leaf: bytes) -> None:
    return None


def _no_state(_range: CompactRange) -> tuple[int, tuple[bytes, ...]]:
    return (0, ())


class _NoTree:
    """The tree's per-entry and per-batch work made no-ops, for the baseline rounds."""

    def __enter__(self) -> None:
        self.append, self.state = CompactRange.append, CompactRange.state
        setattr(CompactRange, "append", _no_append)  # noqa: B010 - a patch for the baseline
        setattr(CompactRange, "state", _no_state)  # noqa: B010

    def __exit__(self, *_: object) -> None:
        setattr(CompactRange, "append", self.append)  # noqa: B010
        setattr(CompactRange, "state", self.state)  # noqa: B010


def tree_cost(batch: int) -> tuple[list[float], list[float]]:
    """Admissions per second with and without the tree, `ROUNDS` alternating rounds each."""
    from joulepool.ledger.keys import KeyPair

    key = KeyPair.from_seed("steward", bytes(range(32)))
    tree = Tree([Entitlement(f"team-{i:02d}", 10**18, 10**6, 1) for i in range(50)])
    with_tree: list[float] = []
    without: list[float] = []
    at = 0
    for _ in range(ROUNDS):
        for kept in (True, False):
            pool = Pool(tree, key, MemoryStore())
            if kept:
                with_tree.append(_admissions_per_s(pool, at, batch))
            else:
                with _NoTree():
                    without.append(_admissions_per_s(pool, at, batch))
            at += PER_ROUND
    return with_tree, without


def tree_costs() -> dict[str, float]:
    with_tree, without = tree_cost(1)
    batched_with, batched_without = tree_cost(BATCH)
    return {
        "admissions_per_s_tree": round(max(with_tree), 1),
        "admissions_per_s_no_tree": round(max(without), 1),
        "tree_cost_ratio": round(max(with_tree) / max(without), 3),
        "tree_cost_ratio_median": round(
            statistics.median(with_tree) / statistics.median(without), 3
        ),
        f"tree_cost_ratio_batch_{BATCH}": round(max(batched_with) / max(batched_without), 3),
    }


def deployment(entries: int, root: Path) -> Path:
    """A deployment of `entries` entries: BENCH_TLOG_DEPLOYMENT copied, else the restart
    benchmark's fixture (built once, with a snapshot near its end)."""
    given = os.environ.get("BENCH_TLOG_DEPLOYMENT")
    folder = root / "dep"
    if given:
        shutil.copytree(given, folder)
        config = folder / "pool.toml"
        text = config.read_text(encoding="utf-8")
        if "max_clock_gap" not in text:
            config.write_text(text.replace("[pool]\n", "[pool]\nmax_clock_gap = 315360000\n", 1))
        return folder
    import restart

    return restart.deployment(entries, root)


def tiles(entries: int, root: Path) -> dict[str, float]:
    folder = deployment(entries, root)
    out = root / "tiles"
    begin = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "joulepool", "ledger", "tiles", str(folder), str(out), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    took = time.perf_counter() - begin
    if done.returncode != 0:
        raise SystemExit(f"pool ledger tiles failed: {done.stderr}{done.stdout}")
    report = json.loads(done.stdout)
    n = report["size"]
    store = FileStore(folder / "ledger.cbor", writer=False)
    try:
        index = TileIndex(lambda s, c: list(itertools.islice(store.entries(s), c)))
        begin = time.perf_counter()
        index.follow(store.entries(0), n)
        follow_s = time.perf_counter() - begin
        rng = random.Random(7)
        inc, con = [], []
        inc_len = con_len = 0
        for _ in range(PROOFS):
            leaf = rng.randrange(n)
            t0 = time.perf_counter()
            proof = inclusion_proof(leaf, n, index)
            inc.append(time.perf_counter() - t0)
            inc_len = max(inc_len, len(proof))
            old = rng.randrange(1, n)
            t0 = time.perf_counter()
            proof = consistency_proof(old, n, index)
            con.append(time.perf_counter() - t0)
            con_len = max(con_len, len(proof))
        tile_s, bundle_s = [], []
        for _ in range(PROOFS):
            t = rng.randrange(n // 256)
            index._leaves.clear()  # a cold read each time, as for a mirror's first fetch
            t0 = time.perf_counter()
            assert index.tile(0, t, 256) is not None
            tile_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            assert index.entry_bundle(t, 256) is not None
            bundle_s.append(time.perf_counter() - t0)
    finally:
        store.close()
    label = {2_000_000: "2m"}.get(n, str(n))
    b64 = 44 + 3  # one base64 hash in a JSON list: 44 characters, quotes and a comma
    return {
        f"tiles_s_{label}": round(took, 2),
        f"tiles_files_{label}": report["files"],
        f"index_follow_s_{label}": round(follow_s, 2),
        "level0_tile_us": round(statistics.median(tile_s) * 1e6, 1),
        "entry_bundle_us": round(statistics.median(bundle_s) * 1e6, 1),
        "inclusion_proof_us": round(statistics.median(inc) * 1e6, 1),
        "inclusion_proof_hashes": inc_len,
        "inclusion_proof_json_bytes": inc_len * b64,
        "consistency_proof_us": round(statistics.median(con) * 1e6, 1),
        "consistency_proof_hashes": con_len,
        "consistency_proof_json_bytes": con_len * b64,
    }


def main() -> None:
    entries = int(sys.argv[1]) if len(sys.argv) > 1 else 2_000_000
    out: dict[str, object] = {}
    out |= tree_costs()
    if entries:
        with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
            out |= tiles(entries, Path(tmp))
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
