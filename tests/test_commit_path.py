"""The commit path split into decide and persist (DESIGN.md §5; standard §3, §6.1, §6.2).

A batch is decided on top of earlier batches whose appends are still under way. The failure
rule pinned here: no outcome is given before its decision and every decision it rests on are
durable; when an append fails, its batch and every batch decided on top of it are taken back
and refused, none acknowledged; the store is read again before the next decision; and the
pool's state is then exactly a replay of its ledger. The failures are real: ENOSPC from a
full tmpfs, or a real ledger file whose append reports a failure after writing.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from joulepool.admission import Admit, Queue
from joulepool.claim import Claim
from joulepool.errors import ClaimError, DiskFull, PoolError, StoreError
from joulepool.grade import Energy, Grade
from joulepool.ledger.merkle import root_of
from joulepool.ledger.replay import replay
from joulepool.pool import Decision, Outcome, Pool, Release, ReleaseRequest
from joulepool.service.committer import Committer
from joulepool.stores.file import FileStore
from tests.support.builders import team_tree
from tests.support.disks import fill, tmpfs
from tests.support.ledgers import STEWARD

H = Grade.HwShunt
NOW = 1_764_000_000_000


def claim(cid: str, ent: str = "a", uj: int = 100, devices: int = 1) -> Claim:
    return Claim(cid, ent, 1, devices, Energy(uj, H))


def pool_over(store: FileStore) -> Pool:
    return Pool(team_tree(gd=2), STEWARD, store, clock=lambda: NOW)


def same_as_replay(pool: Pool) -> None:
    """The live state is exactly what a replay of the ledger on disk gives."""
    again = replay(pool.store.entries(), STEWARD.kid, STEWARD.public_key, pool.tree)
    assert (pool.length, pool.head) == (again.length, again.head)
    for ent in ("a", "b", "c"):
        assert pool.usage_of(ent) == again.state.usage.of(ent)
    assert pool.state.open_claims() == again.state.open_claims()
    # The Merkle tree (DESIGN.md §8) is taken back with the state: it covers the file as is.
    assert pool.merkle_head() == (again.merkle.size, root_of(pool.store.entries()))


class WrittenButRefused(FileStore):
    """A real ledger file whose `fail_on`-th append writes and fsyncs its entries and then
    reports failure: what a PostgreSQL COMMIT whose answer was lost looks like."""

    fail_on = 0
    calls = 0

    def append(self, raws: Sequence[bytes]) -> None:
        self.calls += 1
        super().append(raws)
        if self.calls == self.fail_on:
            raise StoreError("the answer to the append was lost")


def test_a_failed_append_refuses_its_batch_and_every_batch_decided_on_it(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", "256k") as disk:
        pool = pool_over(FileStore(disk / "ledger.cbor", create=True))
        try:
            assert isinstance(pool.apply([claim("c1")])[0], Decision)
            # Batch 2 admits c2 (the team's last device) and releases c1; batch 3, decided
            # while 2 is not yet written, rests on both: c3 takes the device c1 freed, c4
            # queues on the one c2 holds, and c2 is released.
            # Team b's claims come and go only to make the batch outgrow the page the file
            # ends in, so the full disk refuses it.
            churn = [
                op
                for i in range(40)
                for op in (claim(f"b{i}", "b"), ReleaseRequest(f"b{i}", Energy(1, H)))
            ]
            second = pool.decide([claim("c2"), ReleaseRequest("c1", Energy(50, H)), *churn])
            third = pool.decide([claim("c3"), claim("c4"), ReleaseRequest("c2", Energy(60, H))])
            c3, c4, c2_released = third.outcomes
            assert isinstance(c3, Decision) and isinstance(c3.verdict, Admit)
            assert isinstance(c4, Decision) and isinstance(c4.verdict, Queue)
            assert isinstance(c2_released, Release) and c2_released.seq == 84
            filler = fill(disk)
            refused = pool.persist(second) + pool.persist(third)
            assert all(isinstance(o, DiskFull) for o in refused), refused
            assert len(pool.store) == 1
            same_as_replay(pool)
            assert pool.claim_state("c1") is not None and pool.claim_state("c1").running  # type: ignore[union-attr]
            assert pool.claim_state("c2") is None
            filler.unlink()
            # Nothing refused was spent: the same ids are decided afresh.
            again = pool.apply([claim("c2"), claim("c3"), ReleaseRequest("c1", Energy(50, H))])
            assert [type(o) for o in again] == [Decision, Decision, Release]
            assert [o.seq for o in again] == [1, None, 2]  # type: ignore[union-attr]
            assert isinstance(again[1], Decision) and isinstance(again[1].verdict, Queue)
            same_as_replay(pool)
        finally:
            pool.close()


def test_the_store_is_read_again_after_a_failure_before_the_next_decision(
    tmp_path: Path,
) -> None:
    store = WrittenButRefused(tmp_path / "ledger.cbor", create=True)
    store.fail_on = 2
    pool = pool_over(store)
    try:
        pool.apply([claim("c1")])
        second = pool.decide([claim("c2")])
        third = pool.decide([ReleaseRequest("c2", Energy(5, H))])
        assert all(isinstance(o, StoreError) for o in pool.persist(second))
        assert all(isinstance(o, StoreError) for o in pool.persist(third))
        # The refused batch's entry did reach the file: the next decision sees it, and no
        # entry on disk is ever decided twice.
        (dup,) = pool.apply([claim("c2")])
        assert isinstance(dup, ClaimError) and dup.code == "claim_exists"
        assert len(store) == 2
        same_as_replay(pool)
    finally:
        pool.close()


def test_nothing_resting_on_a_failed_append_is_acknowledged_through_the_pipeline(
    tmp_path: Path,
) -> None:
    """Many concurrent submissions through the service's batcher; one append in the middle
    fails while the next batch is decided on top of it. Every acknowledged Admit is in the
    ledger, nothing refused is, and the state is a replay of the file."""
    store = SlowThenRefused(tmp_path / "ledger.cbor", create=True)
    pool = Pool(team_tree(g=10**12, gd=10**6), STEWARD, store, clock=lambda: NOW)
    store.pool = pool

    async def run() -> list[Outcome | PoolError]:
        committer = Committer(pool)

        async def one(i: int) -> Outcome | PoolError:
            await asyncio.sleep(0.001 * (i % 50))
            try:
                return await committer.submit(claim(f"k{i}", "abc"[i % 3]))
            except PoolError as exc:
                return exc

        try:
            return list(await asyncio.gather(*(one(i) for i in range(400))))
        finally:
            committer.close()

    try:
        outcomes = asyncio.run(run())
        assert store.depth_at_failure >= 2, "no batch was decided on top of the failing one"
        refused = [o for o in outcomes if isinstance(o, PoolError)]
        admitted = {o.claim: o.seq for o in outcomes if isinstance(o, Decision)}
        assert refused and all(isinstance(o, StoreError) for o in refused)
        assert len(refused) + len(admitted) == 400
        again = replay(store.entries(), STEWARD.kid, STEWARD.public_key, pool.tree)
        assert sorted(again.state.open_claims()) == sorted(admitted)
        for cid, seq in admitted.items():
            assert again.state.open_claim(cid) is not None
            assert again.state.open_claim(cid).seq == seq  # type: ignore[union-attr]
        same_as_replay(pool)
    finally:
        pool.close()


class SlowThenRefused(FileStore):
    """A real ledger file whose third append waits until a later batch has been decided on
    top of it, then fails before writing anything."""

    pool: Pool | None = None
    calls = 0
    depth_at_failure = 0

    def append(self, raws: Sequence[bytes]) -> None:
        self.calls += 1
        if self.calls == 3:
            assert self.pool is not None
            for _ in range(500):
                self.depth_at_failure = len(self.pool._pending)
                if self.depth_at_failure >= 2:
                    break
                time.sleep(0.002)
            raise StoreError("the disk went away")
        super().append(raws)


def test_a_reader_never_sees_a_decision_that_is_not_durable(tmp_path: Path) -> None:
    pool = pool_over(FileStore(tmp_path / "ledger.cbor", create=True))
    try:
        batch = pool.decide([claim("c1")])
        seen: list[int] = []
        reader = threading.Thread(target=lambda: seen.append(pool.length))
        reader.start()
        reader.join(timeout=0.2)
        assert reader.is_alive() and not seen  # it waits for the append
        pool.persist(batch)
        reader.join(timeout=10)
        assert seen == [1]
    finally:
        pool.close()


@pytest.mark.parametrize("fail", [False, True])
def test_apply_is_decide_then_persist(tmp_path: Path, fail: bool) -> None:
    store = WrittenButRefused(tmp_path / "ledger.cbor", create=True)
    store.fail_on = 1 if fail else 0
    pool = pool_over(store)
    try:
        (outcome,) = pool.apply([claim("c1")])
        assert isinstance(outcome, StoreError) == fail
        # A reader sees what was acknowledged; the next decision reads the store again.
        assert pool.length == (0 if fail else 1)
        (again,) = pool.apply([claim("c2")])
        assert isinstance(again, Decision) and again.seq == 1
        same_as_replay(pool)
    finally:
        pool.close()
