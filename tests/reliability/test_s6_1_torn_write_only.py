"""Standard §6.1: a torn write is only a torn write.

Every single-bit flip of a real ledger, written by `Pool` through the file store, is put
through the surfaces that tell a torn write from damage: opening the file (as `pool serve`
and `pool ledger verify` do), verifying it, and `pool ledger recover`. For each flip:

- `recover` never removes an entry that still verifies under the steward's key (a bare
  ledger file, with no high-water record beside it);
- with the deployment's high-water record beside it, `recover` removes nothing at all,
  since every entry was acknowledged;
- damage before the last entry is never called a torn write, and verification refuses at
  the index of the entry that was flipped.

CI sweeps a ledger of JOULEPOOL_FLIP_ENTRIES entries (16 by default, every bit of it); set it
to 311 for the size of the original finding (docs/reliability.md has the figures of both).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from joulepool.deployment.config import LEDGER, PUBLIC_KEY
from joulepool.deployment.init import init_deployment
from joulepool.deployment.open import open_pool
from joulepool.errors import LedgerRefused, PoolError, StoreError
from joulepool.grade import Energy, Grade
from joulepool.ledger.keys import KeyPair, load_key_file
from joulepool.ledger.replay import Replayer, replay
from joulepool.stores.file import CorruptLedger, FileStore, recover
from joulepool.stores.highwater import record_path
from tests.support.builders import claim
from tests.support.faults import Figures

MJ = 1_000_000_000_000
ENTRIES = int(os.environ.get("JOULEPOOL_FLIP_ENTRIES", "16"))
_figures = Figures("torn_write_only")


@pytest.fixture(scope="module", autouse=True)
def _record_figures() -> Iterator[None]:
    yield
    _figures.record()


def real_ledger(folder: Path, entries: int) -> None:
    """A deployment whose ledger `Pool` wrote: admissions (some with a class) and releases
    over three teams, ids of varying length, as a cluster would leave it."""
    init_deployment(folder, "steward")
    pool = open_pool(folder)
    teams = ("vision", "language", "robotics")
    i = 0
    while pool.length < entries:
        cid = f"job-{i}" + "-x" * (i % 5)
        team = teams[i % 3]
        verdict = pool.submit(claim(cid, team, MJ // (i + 2), class_="train" if i % 2 else None))
        if verdict.seq is not None and pool.length < entries and i % 3 != 1:
            pool.release(cid, Energy(MJ // (i + 3), Grade.HwShunt))
        i += 1
    pool.close()


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A folder in memory where the machine has one: the sweep rewrites a file per flip."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(prefix="joulepool-flips-", dir=shm))
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def spans(data: bytes, starts: list[int]) -> list[tuple[int, int]]:
    ends = [*starts[1:], len(data)]
    return list(zip(starts, ends, strict=True))


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes, list[tuple[int, int]]]:
    folder = tmp_path_factory.mktemp("flips") / "d"
    real_ledger(folder, ENTRIES)
    data = (folder / LEDGER).read_bytes()
    with FileStore(folder / LEDGER, writer=False) as store:
        starts = [store.offset(i) for i in range(len(store))]
    assert len(starts) == ENTRIES
    return folder, data, spans(data, starts)


def each_flip(
    data: bytes, start: int = 0, end: int | None = None
) -> Iterator[tuple[int, int, bytes]]:
    """Every single-bit flip of `data[start:end]`: the byte, the bit, and the damaged bytes."""
    for byte in range(start, len(data) if end is None else end):
        for bit in range(8):
            damaged = bytearray(data)
            damaged[byte] ^= 1 << bit
            yield byte, bit, bytes(damaged)


def owner(entries: list[tuple[int, int]], byte: int) -> int:
    return next(i for i, (a, b) in enumerate(entries) if a <= byte < b)


def test_s6_1_no_bit_flip_makes_recover_remove_a_verified_entry(
    ledger: tuple[Path, bytes, list[tuple[int, int]]], scratch: Path
) -> None:
    folder, data, entries = ledger
    # A bare copy of the ledger file: no high-water record beside it, only its own bytes.
    bare = scratch / "ledger.cbor"
    key = load_key_file(folder / PUBLIC_KEY)
    flips = lost = truncated = refused = 0
    for byte, bit, damaged in each_flip(data):
        flipped_entry = owner(entries, byte)
        bare.write_bytes(damaged)
        flips += 1
        try:
            done = recover(bare)
        except CorruptLedger as exc:
            refused += 1
            assert exc.offset is not None
            assert bare.read_bytes() == damaged, "a refused recover changed the file"
            continue
        if done is None:
            assert bare.read_bytes() == damaged
            continue
        truncated += 1
        # Whatever was cut must hold no entry that still verifies: the only entry it may
        # take is the one whose bytes the flip damaged.
        gone = [i for i, (a, _) in enumerate(entries) if a >= done.offset]
        survivors = [i for i in gone if i != flipped_entry]
        lost += len(survivors)
        assert not survivors, (byte, bit, done, gone)
        assert done.offset >= entries[flipped_entry][0]
        _assert_still_verifies(bare, key)
    _figures.faults_injected += flips
    _figures.entries_lost += lost
    _figures.extra |= {
        "ledger_entries": len(entries),
        "ledger_bytes": len(data),
        "flips_tried": flips,
        "recover_refused": refused,
        "recover_truncated_the_damaged_last_entry": truncated,
        "verified_entries_removed": lost,
    }
    assert lost == 0


def _assert_still_verifies(path: Path, key: KeyPair) -> None:
    with FileStore(path, writer=False) as store:
        assert store.tail is None
        replay(store.entries(), key.kid, key.public_key)


def test_s6_1_with_its_high_water_record_recover_removes_nothing(
    ledger: tuple[Path, bytes, list[tuple[int, int]]], scratch: Path
) -> None:
    folder, data, _ = ledger
    copy = scratch / "ledger.cbor"
    shutil.copyfile(record_path(folder / LEDGER), record_path(copy))
    flips = 0
    for byte, bit, damaged in each_flip(data):
        copy.write_bytes(damaged)
        flips += 1
        try:
            done = recover(copy)
        except CorruptLedger:
            done = None
        assert done is None, (byte, bit, done)
        assert copy.read_bytes() == damaged
    _figures.extra["flips_tried_with_record"] = flips


def test_s6_1_damage_before_the_last_entry_is_refused_at_its_index_never_as_torn(
    ledger: tuple[Path, bytes, list[tuple[int, int]]], scratch: Path
) -> None:
    folder, data, entries = ledger
    key = load_key_file(folder / PUBLIC_KEY)
    copy = scratch / "ledger.cbor"
    # The state after the undamaged entries before j: a flip in entry j leaves them as they
    # were, and a refused entry changes no state, so one replayer serves every flip in j.
    before = Replayer(key.kid, key.public_key)
    checked = 0
    for j, (start, end) in enumerate(entries[:-1]):
        for byte, bit, damaged in each_flip(data, start, end):
            copy.write_bytes(damaged)
            with FileStore(copy, writer=False) as store:
                assert len(store) >= j
                assert store.tail is None or not store.tail.torn, (byte, bit, store.tail)
                if len(store) == j:  # entry j is where the whole entries stop
                    assert store.tail is not None
                    continue
                with pytest.raises(LedgerRefused) as info:
                    before.feed(store.entry(j))
            assert info.value.index == j, (byte, bit, info.value)
            checked += 1
        before.feed(data[start:end])
    _figures.entries_checked += checked


def test_s6_1_a_damaged_deployment_never_starts(
    ledger: tuple[Path, bytes, list[tuple[int, int]]], scratch: Path
) -> None:
    # Start-up (`Pool`, as `pool serve` and `pool admit` open it) on one flip in every
    # entry-header byte and a stride through the rest: it refuses with a typed error.
    folder, data, entries = ledger
    copy = scratch / "d"
    shutil.copytree(folder, copy)
    positions = sorted({a + k for a, _ in entries for k in range(12)} | set(range(0, len(data), 7)))
    for byte in positions:
        damaged = bytearray(data)
        damaged[byte] ^= 0x04
        (copy / LEDGER).write_bytes(damaged)
        with pytest.raises((LedgerRefused, StoreError)) as info:
            open_pool(copy).close()
        assert isinstance(info.value, PoolError)
        assert (copy / LEDGER).read_bytes() == damaged
