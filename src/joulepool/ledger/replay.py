"""Replay: verify a ledger entry by entry and fold it into usage (standard §6.1, §6.4, §6.5).

Every entry is checked at its index in the order DESIGN.md §4 fixes: it decodes as a
COSE_Sign1 (`malformed`); envelope and core re-encode to their own bytes (`non_canonical`);
the kid is the steward (`unknown_signer`); the signature verifies (`bad_signature`); `seq` is
its index (`seq_mismatch`); `prev` is the head before it (`broken_chain`); its fields are the
event's (`malformed`); the event is consistent with what came before (`inconsistent_stream`).
The first failure refuses the whole ledger at its index, with no partial result.

Authenticity (the first four checks) depends on one entry alone, so it can run in other
processes; the chain and the fold run here, in order, as the entries stream past, so memory
holds the folded state and never a list of all entries.
"""

from __future__ import annotations

import gc
import itertools
import multiprocessing
import operator
import os
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from joulepool.errors import LedgerRefused
from joulepool.events import Event
from joulepool.ledger.cbor import CborRefused
from joulepool.ledger.cose import (
    GENESIS,
    Envelope,
    content_address,
    first_forged,
    open_envelope,
    verify_signature,
)
from joulepool.ledger.entry import EntryMalformed, brief, event_of
from joulepool.ledger.fold import LedgerState
from joulepool.ledger.merkle import CompactRange, leaf_hash
from joulepool.ledger.released import ReleasedClaims
from joulepool.ledger.rotation import KeySchedule
from joulepool.periods import NONE, Schedule
from joulepool.tree import Tree

BATCH = 512
MAX_WORKERS = 4
"""Processes `workers=0` asks for at most: past four, the fold in this process is the limit."""
PARALLEL_FROM = 4 * BATCH
"""Entries under which a replay verifies in this process alone: starting workers would cost
more than they save on so few."""


def default_workers() -> int:
    """How many processes verify signatures when a caller leaves it open (`workers=0`,
    §6.5): one per processor this process may run on, at most `MAX_WORKERS`."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity to read on this system
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_WORKERS))


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why one entry failed authentication: a DESIGN.md §4 error name and a sentence."""

    error: str
    detail: str


BAD_SIGNATURE = Refusal("bad_signature", "the signature does not verify under the steward's key")


def authenticate(
    raw: bytes, steward: str, public_key: bytes
) -> tuple[dict[str, Any], bytes] | Refusal:
    """The first four checks of DESIGN.md §4 on one entry: its core and content address."""
    env = _opened(raw, steward)
    if isinstance(env, Refusal):
        return env
    if not verify_signature(env, public_key):
        return BAD_SIGNATURE
    return env.core, content_address(raw)


def _opened(raw: bytes, steward: str) -> Envelope | Refusal:
    """The first three checks of DESIGN.md §4: decodes, canonical, signed by the steward."""
    try:
        env = open_envelope(raw)
    except CborRefused as exc:
        return Refusal(exc.error, exc.detail)
    if env.kid != steward:
        # The kid is hostile text: quoted and cut, so the refusal stays one short line.
        return Refusal("unknown_signer", f"signed by {brief(env.kid)}, not the steward {steward!r}")
    return env


def _verify_batch(job: tuple[list[tuple[bytes, bytes, bytes]], bytes]) -> int | None:
    """The position in the batch of the first signature that fails, or None (§6.5)."""
    parts, public_key = job
    return first_forged(parts, public_key)


_SIGNED_PARTS = operator.attrgetter("protected", "payload", "signature")


class Replayer:
    """A ledger's verified state: head, length, the folded usage (§6.1) and the Merkle
    tree over the entries as stored (DESIGN.md §8: leaf i is entry i's exact bytes).

    The same object serves a replay and a live pool: entries the pool seals itself go
    through `extend()`, which runs the same fold as `feed()` (DESIGN.md §5).
    """

    def __init__(
        self,
        steward: str,
        public_key: bytes | KeySchedule,
        tree: Tree | None = None,
        schedule: Schedule = NONE,
        claims: ReleasedClaims | None = None,
    ) -> None:
        self.steward = steward
        # One key, or the steward's keys over time (DESIGN.md §4, key rotation).
        self.keys = (
            public_key if isinstance(public_key, KeySchedule) else KeySchedule(steward, public_key)
        )
        self.state = LedgerState(tree if tree is not None else Tree([]), schedule, claims)
        self.head = GENESIS
        # Kept beside the head and taken back with it: one right edge, at most 64 hashes.
        self.merkle = CompactRange()

    @property
    def length(self) -> int:
        """Entries verified and folded so far."""
        return self.state.length

    @property
    def public_key(self) -> bytes:
        """The key that must verify the next entry (DESIGN.md §4, key rotation)."""
        return self.keys.key_at(self.state.length)

    def feed(self, raw: bytes) -> Event:
        """Verify the entry at index `length` completely and fold it (DESIGN.md §4)."""
        outcome = authenticate(raw, self.steward, self.public_key)
        if isinstance(outcome, Refusal):
            raise LedgerRefused(self.length, outcome.error, outcome.detail)
        core, address = outcome
        return self.chain(core, address, leaf_hash(raw))

    def chain(self, core: dict[str, Any], address: bytes, leaf: bytes) -> Event:
        """The last four checks, on an authenticated core, then the fold (DESIGN.md §4) and
        the entry's leaf hash `leaf` onto the tree (DESIGN.md §8)."""
        index = self.state.length
        seq = core.get("seq")
        if seq != index or type(seq) is not int:
            raise LedgerRefused(
                index, "seq_mismatch", f"seq is {brief(seq)}, its position is {index}"
            )
        prev = core.get("prev")
        if prev != self.head:
            raise LedgerRefused(
                index, "broken_chain", "prev is not the content address of the entry before"
            )
        try:
            event = event_of(core, self.steward)
        except (EntryMalformed, ValueError) as exc:
            raise LedgerRefused(index, "malformed", str(exc)) from None
        self.state.apply(event)
        self.head = address
        self.merkle.append_hash(leaf)
        return event

    def extend(self, raw: bytes, event: Event) -> None:
        """Fold an entry this process has just sealed at index `length` (no re-verification),
        and add it to the tree (DESIGN.md §8)."""
        self.state.apply(event)
        self.head = content_address(raw)
        self.merkle.append(raw)


def replay(
    entries: Iterable[bytes],
    steward: str,
    public_key: bytes | KeySchedule,
    tree: Tree | None = None,
    *,
    schedule: Schedule = NONE,
    workers: int = 1,
    progress: Callable[[int], None] | None = None,
    start: tuple[LedgerState, bytes, CompactRange] | None = None,
    stops: Mapping[int, Callable[[Replayer], None]] | None = None,
    claims: ReleasedClaims | None = None,
) -> Replayer:
    """Verify every entry and fold the ledger into usage (§6.1, §6.4, §6.5).

    Raises `LedgerRefused(index, error)` at the first failing entry; nothing partial is
    returned. With `workers > 1` the signatures are checked in that many processes; with
    `workers=0` in `default_workers()`, where there are `PARALLEL_FROM` entries or more.
    `public_key` is the steward's one key, or a `KeySchedule` of its verified rotations:
    entry i must verify under the key in force at i, else `bad_signature` (DESIGN.md §4).
    `start` is a state, head and Merkle tree to fold on from (a verified snapshot,
    DESIGN.md §4 and §8): then `entries` are the ledger's from that state's length. `stops` are called, each with the
    replayer, when the fold reaches their lengths (a full verification comparing snapshots).
    `schedule` groups each claim's figures by budget period (DESIGN.md §3). `claims` keeps
    the released claims on disk rather than in memory (a claim index).
    """
    replayer = Replayer(steward, public_key, tree, schedule, claims)
    if start is not None:
        replayer.state, replayer.head, merkle = start
        if merkle.size != replayer.state.length:
            raise ValueError(
                f"a tree of {merkle.size} leaves under a state of {replayer.state.length}"
            )
        replayer.merkle = merkle.copy()
    halts = dict(stops or {})
    if workers <= 0:
        entries, workers = _workers_for(entries)
    with _collector_paused():
        if workers <= 1:
            _replay_serial(replayer, entries, progress, halts)
        else:
            _replay_parallel(replayer, entries, workers, progress, halts)
    if progress is not None:
        progress(replayer.length)
    return replayer


def _workers_for(entries: Iterable[bytes]) -> tuple[Iterable[bytes], int]:
    """The same entries, and `default_workers()`, or 1 where they are fewer than
    `PARALLEL_FROM`: read ahead that far, since not every store gives a length at no cost."""
    workers = default_workers()
    if workers == 1:
        return entries, 1
    source = iter(entries)
    ahead = list(itertools.islice(source, PARALLEL_FROM))
    return itertools.chain(ahead, source), workers if len(ahead) == PARALLEL_FROM else 1


@contextmanager
def _collector_paused() -> Iterator[None]:
    # Replay makes millions of short-lived containers and no reference cycle, while the
    # state it folds grows by an entry at a time; the cyclic collector would walk that
    # state again and again for nothing, at about a tenth of replay's own Python work.
    # Reference counting still frees everything as it goes.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _batches(
    entries: Iterable[bytes], keys: KeySchedule, position: int, stops: Mapping[int, object]
) -> Iterator[tuple[list[bytes], bytes]]:
    """Batches of entries from index `position`, each with the one key that must verify all
    of it: a batch ends where a rotation hands the entries to another key (DESIGN.md §4), and
    at each of `stops`."""
    source = iter(entries)
    ahead = sorted(stops)
    while True:
        change = keys.next_change(position)
        size = BATCH if change is None else min(BATCH, change - position)
        while ahead and ahead[0] <= position:
            ahead.pop(0)
        if ahead:
            size = min(size, ahead[0] - position)
        batch = list(itertools.islice(source, size))
        if not batch:
            return
        yield batch, keys.key_at(position)
        position += len(batch)


def _replay_serial(
    replayer: Replayer,
    entries: Iterable[bytes],
    progress: Callable[[int], None] | None,
    stops: Mapping[int, Callable[[Replayer], None]],
) -> None:
    # In batches, in three passes: open, verify, chain. Interleaved entry by entry, the
    # signature arithmetic and the interpreter keep evicting each other from the CPU's
    # caches, which cost about 4 µs an entry (a tenth of a verification) on top of the work.
    for batch, public_key in _batches(entries, replayer.keys, replayer.length, stops):
        opened, refusal = _open_batch(batch, replayer.steward)
        bad = first_forged(map(_SIGNED_PARTS, opened), public_key)
        _chain_batch(replayer, opened, bad, refusal)
        stop = stops.get(replayer.length)
        if stop is not None:
            stop(replayer)
        if progress is not None:
            progress(replayer.length)


def _chain_batch(
    replayer: Replayer, opened: list[Envelope], bad: int | None, refusal: Refusal | None
) -> None:
    """Chain and fold a batch whose entries before `bad` verified, in order (DESIGN.md §4).

    Entry `bad` failed its signature; `refusal`, if any, is why the entry after the last of
    `opened` failed to open. Every earlier entry is chained first, so a chain failure
    before either is the one reported.
    """
    chain = replayer.chain
    for i, env in enumerate(opened):
        if i == bad:
            raise LedgerRefused(replayer.length, BAD_SIGNATURE.error, BAD_SIGNATURE.detail)
        raw = env.raw
        chain(env.core, content_address(raw), leaf_hash(raw))
    if refusal is not None:
        raise LedgerRefused(replayer.length, refusal.error, refusal.detail)


def _replay_parallel(
    replayer: Replayer,
    entries: Iterable[bytes],
    workers: int,
    progress: Callable[[int], None] | None,
    stops: Mapping[int, Callable[[Replayer], None]],
) -> None:
    # Only the signature check, nine tenths of the work, goes to the workers. Decoding stays
    # here, since the fold needs the core anyway and shipping decoded cores back costs more
    # than decoding; so each entry crosses to a worker and back once, as bytes and a verdict.
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(
        max_workers=workers, mp_context=context, initializer=_own_std_streams
    ) as executor:
        pending: deque[tuple[list[Envelope], Refusal | None, Future[int | None]]] = deque()
        source = _batches(entries, replayer.keys, replayer.length, stops)
        exhausted = False
        while True:
            # Keep a bounded number of batches in flight, so memory stays flat.
            while not exhausted and len(pending) < 2 * workers:
                item = next(source, None)
                if item is None:
                    exhausted = True
                    break
                batch, public_key = item
                opened, refusal = _open_batch(batch, replayer.steward)
                # Only the signed parts travel: pickling a decoded core costs more than it saves.
                parts = list(map(_SIGNED_PARTS, opened))
                future = executor.submit(_verify_batch, (parts, public_key))
                pending.append((opened, refusal, future))
                if refusal is not None:
                    exhausted = True  # nothing after the first refusal can count
            if not pending:
                return
            opened, refusal, future = pending.popleft()
            try:
                _chain_batch(replayer, opened, future.result(), refusal)
            except LedgerRefused:
                for _, _, later in pending:
                    later.cancel()
                raise
            stop = stops.get(replayer.length)
            if stop is not None:
                stop(replayer)
            if progress is not None:
                progress(replayer.length)


def _own_std_streams() -> None:
    # A fork copies only the thread that forked. `pool serve` replays beside its event loop,
    # whose thread may be inside a write to standard error at that instant: the worker would
    # then inherit that stream's lock held by a thread it does not have, and hang for ever
    # in the flush every worker makes on its way out. A worker writes nothing; it is given
    # streams of its own.
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - open until the worker exits
    sys.stderr = sys.stdout


def _open_batch(batch: list[bytes], steward: str) -> tuple[list[Envelope], Refusal | None]:
    """The first three checks of DESIGN.md §4 on each entry, up to the first that fails."""
    opened: list[Envelope] = []
    append = opened.append
    for raw in batch:
        env = _opened(raw, steward)
        if isinstance(env, Refusal):
            return opened, env
        append(env)
    return opened, None
