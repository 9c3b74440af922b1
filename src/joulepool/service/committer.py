"""Group commit for the event loop: claims and releases from many requests, one fsync.

`pool serve` answers on one asyncio loop. Handing each submission to a worker thread that
then waits on `Pool`'s lock costs a thread switch per request and makes every waiting
thread fight for the interpreter. Instead the handler puts its operation on a queue and
awaits a future; one commit thread takes everything queued, has `Pool.apply` decide it in
arrival order and append it with one fsync, and only then resolves the futures, so no
verdict is sent before its entry is on disk (standard §3, §6.2; DESIGN.md §5).
"""

from __future__ import annotations

import asyncio
import queue
import threading

from joulepool.claim import Claim
from joulepool.errors import PoolError, StoreError
from joulepool.grade import Energy
from joulepool.pool import Decision, Outcome, Pool, Release, ReleaseRequest

MAX_BATCH = 4096
"""At most this many operations in one append, so one batch cannot starve the next."""

_Item = tuple[Claim | ReleaseRequest, "asyncio.Future[Outcome]"]


class Committer:
    """One thread that commits, in batches, what request handlers queue for a pool."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="group-commit", daemon=True)
        self._thread.start()

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
        """Stop the thread once everything queued before this call is committed."""
        self._queue.put(None)
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            stop = False
            while len(batch) < MAX_BATCH:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                batch.append(item)
            try:
                outcomes = self.pool.apply([op for op, _ in batch])
            except Exception as exc:  # a bug must not leave clients waiting forever
                failure = StoreError(f"the commit failed: {exc!r}")
                outcomes = [failure] * len(batch)
            answers = [
                (future, outcome) for (_, future), outcome in zip(batch, outcomes, strict=True)
            ]
            # One wake-up of the loop per batch, not one per request: each costs a write
            # to the loop's self-pipe and a turn of the GIL.
            for loop in {future.get_loop() for future, _ in answers}:
                loop.call_soon_threadsafe(_resolve, [a for a in answers if a[0].get_loop() is loop])
            if stop:
                return


def _resolve(answers: list[tuple[asyncio.Future[Outcome], Outcome]]) -> None:
    for future, outcome in answers:
        # A client that hung up has had its future cancelled; its entry stands all the same.
        if not future.done():
            future.set_result(outcome)
