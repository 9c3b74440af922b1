"""What `pool serve` serves: a pool once its ledger is replayed, the tokens, the witnesses'
folder, and the group committer in front of the pool (API.md; DESIGN.md §5).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from joulepool.errors import ClockFault, PoolError, StoreError
from joulepool.pool import Pool
from joulepool.service.committer import Committer
from joulepool.service.deps import ApiError
from joulepool.service.tokens import TokenBook

if TYPE_CHECKING:
    from joulepool.deployment.config import Config

log = logging.getLogger("joulepool.serve")
"""The service's log: `pool serve` shows the `joulepool` loggers through uvicorn's config."""


@dataclass
class Service:
    """What the application serves: a pool once replay is done, the tokens, the folder.

    `config_digest` is the digest of the pool.toml this replica decides under
    (`deployment.config_digest`); a store shared by replicas checks it in every append.
    """

    opener: Callable[[], Pool]
    tokens: TokenBook
    witnesses: Path | None = None
    pool: Pool | None = None
    committer: Committer | None = None
    failure: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    config_digest: bytes | None = None
    # pool.toml's `max_device_power_w`: the release ceiling (`plausibility`).
    max_device_power_w: int | None = None
    # The code /readyz last answered 503 with, so a change is logged once, not every probe.
    unready: str | None = None
    stopping: bool = False
    # The deployment's claim secret (`deployment.claim_tokens`); None: no claim tokens.
    claim_secret: bytes | None = None

    def claim_token(self, claim_id: str) -> str | None:
        """Claim `claim_id`'s own token, or None when claim tokens are off (API.md "Run time")."""
        from joulepool.deployment.claim_tokens import claim_token

        return None if self.claim_secret is None else claim_token(self.claim_secret, claim_id)

    def is_claim_token(self, claim_id: str, token: str) -> bool:
        """Whether `token` is claim `claim_id`'s own token (API.md "Run time")."""
        from joulepool.deployment.claim_tokens import is_claim_token

        return self.claim_secret is not None and is_claim_token(self.claim_secret, claim_id, token)

    def start(self) -> None:
        """Replay the ledger (§6.1); only then is the service ready. A store that cannot be
        reached (PostgreSQL down) is tried again, every few seconds, until it can."""
        delay = 0.5
        while True:
            try:
                pool = self.opener()
            except PoolError as exc:
                failure = f"{exc.code}: {exc}"
                if failure != self.failure:
                    log.error("not ready: %s", failure)
                self.failure = failure
                if exc.code == "store_unavailable" and not self.stopping:
                    time.sleep(delay)
                    delay = min(5.0, delay * 2)
                    continue
                return
            except Exception as exc:
                # Whatever went wrong, the service must say it will never be ready, not hang
                # on "still being replayed" with the replay thread gone.
                self.failure = f"internal_error: start-up failed: {type(exc).__name__}: {exc}"
                log.error("not ready: %s", self.failure)
                return
            break
        if self.stopping:
            pool.close()
            return
        self.failure = None
        self.committer = Committer(pool)
        self.pool = pool
        self._agree(pool)
        log.info("ready: %s, %d entries replayed", pool.store.name, pool.length)

    def _agree(self, pool: Pool) -> None:
        """On a shared store, record this replica's configuration, or learn it differs."""
        shared = pool.store.shared
        if shared is None or shared.config_digest is None:
            return
        try:
            shared.agree_config()
        except StoreError as exc:
            # Not fatal: /readyz keeps asking, and every append checks again.
            log.error("%s: %s", exc.code, exc)

    def reload(self, config: Config) -> None:
        """Put a changed pool.toml in force (SIGHUP); raises `PoolError` and changes nothing
        if it cannot. On a store shared by replicas, a pool.toml whose digest changed with
        this reload is recorded as the one the ledger is decided under, in the same step,
        under the commit lock: the other replicas decide nothing until they are reloaded
        with the same file (docs/reliability.md). A reload that changes nothing here
        records nothing, so a routine SIGHUP never overrides the other replicas."""
        from joulepool.deployment.config import config_digest

        pool = self.pool
        if pool is None:
            raise StoreError(
                "the ledger is not replayed yet (or failed to start): the configuration "
                "was not reloaded; send SIGHUP again once /readyz says ready"
            )
        digest = config_digest(config)
        store = pool.store
        before: Callable[[], None] | None = None
        shared = store.shared
        if shared is not None and digest != self.config_digest:
            adopt = shared.adopt_config

            def before() -> None:
                adopt(digest)

        old = shared.config_digest if shared is not None else None
        try:
            pool.reload(config, before=before)
        except BaseException:
            if shared is not None and shared.config_digest != old:
                # Recorded, but not put in force here: decide nothing rather than decide
                # under the old tree with the new digest.
                shared.config_digest = old
            raise
        if before is not None:
            log.warning(
                "configuration %s recorded for %s: replicas with another pool.toml decide "
                "nothing until reloaded with this one",
                digest.hex(),
                store.name,
            )
        self.config_digest = digest
        self.max_device_power_w = config.max_device_power_w

    def readiness(self) -> dict[str, Any]:
        """/readyz: ready once replayed and while the next write can be expected to
        succeed (the disk has room; PostgreSQL answers, within a bound, and records this
        replica's configuration) and the clock can date an entry (DESIGN.md §3:
        `clock_behind_ledger`, `clock_jump`). Otherwise `ApiError` 503 naming the cause,
        logged once."""
        pool = self.ready_pool()
        try:
            length = self._check_store(pool)
            # A clock the writer cannot date entries by: every append would be refused.
            fault = pool.clock_fault()
            if fault is not None:
                raise fault
        except (StoreError, ClockFault) as exc:
            if exc.code != self.unready:
                log.error("not ready: %s: %s", exc.code, exc)
                self.unready = exc.code
            raise ApiError(503, exc.code, str(exc)) from None
        if self.unready is not None:
            log.warning("ready again: %s", pool.store.name)
            self.unready = None
        # Where this process's fold began: the snapshot it started from, 0 for a full replay.
        return {"status": "ready", "length": length, "started_from": pool.started_from}

    def _check_store(self, pool: Pool) -> int:
        """Raise the `StoreError` that would make the next write fail; else the length."""
        return pool.store.ready()

    def ready_committer(self) -> Committer:
        """The group committer, or 503 while replay runs (or after it failed)."""
        self.ready_pool()
        assert self.committer is not None
        return self.committer

    def stop(self) -> None:
        """Commit what is queued, then release the store."""
        self.stopping = True
        if self.committer is not None:
            self.committer.close()
        if self.pool is not None:
            self.pool.close()

    def ready_pool(self) -> Pool:
        """The pool, or 503 while replay runs (or after it failed)."""
        if self.pool is None:
            detail = self.failure or "the ledger is still being replayed"
            raise ApiError(503, "not_ready", detail)
        return self.pool

    def fresh_pool(self) -> Pool:
        """The pool, caught up with every entry other replicas committed before this read."""
        pool = self.ready_pool()
        pool.catch_up()
        return pool
