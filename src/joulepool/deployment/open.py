"""Opening a deployment folder as a `Pool`: the one place where a pool is wired from its
configuration, keys, kept witness receipts, ledger store, snapshots and claim index (§6.1,
DESIGN.md §4-§5). The CLI, `pool serve`, backups and the tests all open through here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from joulepool.deployment.clock import read_acceptance
from joulepool.deployment.config import CONFIG, KEY, LEDGER, WITNESSES, Config, read_config
from joulepool.deployment.configs import applier, config_history, record_in_pool
from joulepool.deployment.keys import deployment_keys, rotate_pending
from joulepool.deployment.witnesses import kept_marks
from joulepool.errors import PoolError
from joulepool.ledger.keys import KeyPair
from joulepool.ledger.rotation import KeySchedule
from joulepool.ledger.snapshot import SnapshotFolder
from joulepool.pool import SNAPSHOT_EVERY, SNAPSHOT_SECONDS, Pool
from joulepool.stores.base import Store, head_at
from joulepool.stores.claim_index import open_index


def say(who: str) -> Callable[[str], None]:
    """A one-line reporter to standard error, prefixed by the command (`pool`, `pool serve`)."""

    def line(text: str) -> None:
        print(f"{who}: {text}", file=sys.stderr, flush=True)

    return line


def steward_keys(
    folder: Path, config: Config, *, read_only: bool = False
) -> tuple[KeyPair, KeySchedule]:
    """The key in force and the schedule of keys over time (DESIGN.md §4), refused unless
    the key's kid is the steward `pool.toml` names."""
    key, keys = deployment_keys(folder, read_only=read_only)
    if key.kid != config.steward:
        raise PoolError(
            f"{folder / KEY}: the key's kid {key.kid!r} is not the steward {config.steward!r} "
            f"named in {folder / CONFIG}"
        )
    return key, keys


def open_pool(
    folder: Path,
    *,
    config: Config | None = None,
    keys: tuple[KeyPair, KeySchedule] | None = None,
    postgres: str | None = None,
    ledger: str | None = None,
    waits: Mapping[str, float] | None = None,
    config_digest: bytes | None = None,
    lock: Any = None,
    replay_workers: int = 0,
    progress: Callable[[int], None] | None = None,
    read_only: bool = False,
    snapshot_every: int = SNAPSHOT_EVERY,
    snapshot_seconds: float = SNAPSHOT_SECONDS,
    snapshots: bool = True,
    who: str = "pool",
) -> Pool:
    """Open a deployment folder: its tree, its steward key and its ledger (§6.1).

    The ledger is the folder's file, or with `postgres` (a DSN) the ledger named `ledger`
    (by default the steward's identifier) in that database, bounded by `waits`
    (`PostgresStore`'s `lock_timeout_s`, `statement_timeout_s`, `idle_in_transaction_s`) and
    checked in every append against `config_digest`. `config` and `keys`, when the caller
    read them already, are used as given. Kept witness receipts are read at each open: a
    ledger shorter than one is refused. `snapshots=False` replays and verifies the whole
    ledger, whatever snapshots it has. What is replayed is verified in `replay_workers`
    processes; 0, the default, takes one per processor where there is enough to verify
    (`replay.default_workers`).

    `read_only` opens a reader that needs neither the writer's lock nor the secret key, so
    it works while `pool serve` runs; `pool.store.writer_pid` names the writer it read
    beside, if any. A writer puts a key `pool keys rotate` left pending into force.

    A writer watches its clock (DESIGN.md §3): more than the configuration's `max_clock_gap`
    ahead of the last entry at start, or stepped while running, it appends nothing until the
    acceptance `pool ledger accept-clock` keeps in the folder covers the jump.
    """
    report = say(who)
    if config is None:
        config = read_config(folder / CONFIG)
    key, schedule = keys if keys is not None else steward_keys(folder, config, read_only=read_only)
    marks, problems = kept_marks(folder / WITNESSES, config.steward)
    for problem in problems:
        report(f"warning: {folder / WITNESSES}: {problem}")
    store: Any
    if postgres:
        from joulepool.stores.postgres import (
            IDLE_IN_TRANSACTION_S,
            LOCK_TIMEOUT_S,
            STATEMENT_TIMEOUT_S,
            PostgresClaimIndex,
            PostgresSnapshots,
            PostgresStore,
        )

        waited = waits or {}
        store = PostgresStore(
            postgres,
            ledger=ledger or config.steward,
            config_digest=config_digest,
            lock_timeout_s=waited.get("lock_timeout_s", LOCK_TIMEOUT_S),
            statement_timeout_s=waited.get("statement_timeout_s", STATEMENT_TIMEOUT_S),
            idle_in_transaction_s=waited.get("idle_in_transaction_s", IDLE_IN_TRANSACTION_S),
        )
        kept: Any = PostgresSnapshots(store) if snapshots else None
        claims: Any = PostgresClaimIndex(store)
    else:
        from joulepool.stores.file import FileStore

        # Deferred: a start from a snapshot scans only the entries after it (DESIGN.md §4).
        store = FileStore(folder / LEDGER, writer=not read_only, lock=lock, deferred=True)
        kept = SnapshotFolder.beside(folder / LEDGER) if snapshots else None
        claims = open_index(folder / LEDGER, read_only=read_only)
    if claims is not None:
        # A cache bound to this ledger, checked at its first use (DESIGN.md §4).
        claims.bind(key.kid, heads_of(store))
    try:
        pool = Pool(
            config.tree,
            key,
            store,
            idle_policy=config.idle,
            required_evidence=config.required_evidence,
            period=config.period,
            replay_workers=replay_workers,
            progress=progress,
            acknowledged=marks,
            read_only=read_only,
            keys=schedule,
            snapshots=kept,
            snapshot_every=snapshot_every,
            snapshot_seconds=snapshot_seconds,
            claims=claims,
            max_clock_gap_ms=config.clock_gap_ms,
            watch_clock_steps=True,
            accepted_clock=lambda: read_acceptance(folder),
        )
        # Configuration statements are verified like rotation statements: a forged one
        # refuses the open, since it would judge history by a tree never in force (§18).
        pool.configs = config_history(folder, schedule)
    except BaseException:
        store.close()
        raise
    if not read_only:
        put_pending_in_force(folder, pool, report)
        try:
            applied = record_in_pool(folder, pool, config, applier(f"{who} start"))
        except BaseException:
            pool.close()
            raise
        if applied is not None:
            report(
                f"configuration {applied.digest.hex()[:12]} recorded as statement "
                f"{applied.position}, in force from entry {applied.from_length}"
            )
    return pool


def heads_of(store: Store) -> Callable[[int], bytes | None]:
    """The head of `store`'s ledger at a length, or None past its end (DESIGN.md §4)."""

    def head(length: int) -> bytes | None:
        return head_at(store, length) if length <= len(store) else None

    return head


def put_pending_in_force(folder: Path, pool: Pool, report: Callable[[str], None]) -> None:
    """Put a key `pool keys rotate` left pending into force (DESIGN.md §4), reporting the
    step; a pending key that cannot go into force is reported and the old key stays."""
    try:
        from_seq = rotate_pending(folder, pool)
    except PoolError as exc:
        report(f"warning: the pending steward key is not in force: {exc}")
        return
    if from_seq is not None:
        report(f"steward key rotated: the new key seals from entry {from_seq}")
