"""Group commit for the event loop: claims and releases from many requests, one fsync.

`pool serve` answers on one asyncio loop. A handler puts its operation on a queue and awaits
a future. Two threads then carry the commit path of DESIGN.md §5: one takes everything
queued and has `Pool.decide` decide it in arrival order; the other has `Pool.persist` append
it with one fsync and only then resolves the futures. So batch N+1 is decided while batch N
syncs, and no verdict is sent before its entry, and every entry it rests on, is durable
(standard §3, §6.2).

Deciding runs in a thread, not on the loop: a decision waits for the commit lock, which a
reader holds while it waits for a settled state, and the loop must never wait.
"""

from __future__ import annotations

import asyncio
import queue
import threading

from joulepool.claim import Claim
from joulepool.errors import PoolError, StoreError
from joulepool.grade import Energy
from joulepool.pool import Batch, Decision, Outcome, Pool, Release, ReleaseRequest

MAX_BATCH = 4096
"""At most this many operations in one append, so one batch cannot starve the next."""

DEPTH = 2
"""Batches decided and not yet durable at once: one syncing, the next decided meanwhile.
A deeper pipeline would only decide smaller batches earlier; the appends are serial."""

_Item = tuple[Claim | ReleaseRequest, "asyncio.Future[Outcome]"]
_Decided = tuple[Batch | None, list["asyncio.Future[Outcome]"], BaseException | None]


class Committer:
    """The one batcher of `pool serve`: the decide and persist threads of a pool."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._decided: queue.SimpleQueue[_Decided | None] = queue.SimpleQueue()
        self._slots = threading.Semaphore(DEPTH)
        self._decider = threading.Thread(target=self._decide, name="decide", daemon=True)
        self._persister = threading.Thread(target=self._persist, name="persist", daemon=True)
        self._decider.start()
        self._persister.start()

    async def submit(self, claim: Claim) -> Decision:
        """Decide a claim (§4); an Admit's entry is durable before this returns."""
        outcome = await self._enqueue(claim)
        assert isinstance(outcome, Decision)
        return outcome

    async def release(self, claim_id: str, actual: Energy) -> Release:
        """Record a claim's end (§6.2); its entry is durable before this returns."""
        outcome = await self._enqueue(ReleaseRequest(claim_id, actual))
        assert isinstance(outcome, Release)
        return outcome

    async def _enqueue(self, op: Claim | ReleaseRequest) -> Outcome:
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self._queue.put((op, future))
        outcome = await future
        if isinstance(outcome, PoolError):
            raise outcome
        return outcome

    def close(self) -> None:
        """Stop both threads once everything queued before this call is committed."""
        self._queue.put(None)
        self._decider.join(timeout=30)
        self._persister.join(timeout=30)

    def _decide(self) -> None:
        while True:
            # A slot first: operations that arrive while two batches are in flight wait
            # in the queue and make the next batch larger, not a third one earlier.
            self._slots.acquire()
            items, stop = self._take()
            if items:
                futures = [future for _, future in items]
                try:
                    batch = self.pool.decide([op for op, _ in items])
                    self._decided.put((batch, futures, None))
                except Exception as exc:  # a bug must not leave clients waiting forever
                    self._decided.put((None, futures, exc))
            else:
                self._slots.release()
            if stop:
                self._decided.put(None)
                return

    def _take(self) -> tuple[list[_Item], bool]:
        first = self._queue.get()
        if first is None:
            return [], True
        batch = [first]
        while len(batch) < MAX_BATCH:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                return batch, True
            batch.append(item)
        return batch, False

    def _persist(self) -> None:
        while True:
            decided = self._decided.get()
            if decided is None:
                return
            batch, futures, failure = decided
            try:
                if batch is None:
                    raise failure or StoreError("nothing was decided")
                outcomes = self.pool.persist(batch)
            except Exception as exc:
                outcomes = [StoreError(f"the commit failed: {exc!r}")] * len(futures)
            finally:
                self._slots.release()
            answer(list(zip(futures, outcomes, strict=True)))


def answer(answers: list[tuple[asyncio.Future[Outcome], Outcome]]) -> None:
    """Resolve futures from a commit thread with one wake-up of each loop per batch, not one
    per request: each costs a write to the loop's self-pipe and a turn of the GIL."""
    for loop in {future.get_loop() for future, _ in answers}:
        loop.call_soon_threadsafe(_resolve, [a for a in answers if a[0].get_loop() is loop])


def _resolve(answers: list[tuple[asyncio.Future[Outcome], Outcome]]) -> None:
    for future, outcome in answers:
        # A client that hung up has had its future cancelled; its entry stands all the same.
        if not future.done():
            future.set_result(outcome)
