"""What `pool serve` serves: a pool once its ledger is replayed, the tokens, the witnesses'
folder, and the group committer in front of the pool (API.md; DESIGN.md §5).
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from joulepool.acts import DEFAULT_POLICY, RuntimePolicy
from joulepool.errors import ClockFault, InvalidInput, PoolError, StoreError
from joulepool.pool import Pool
from joulepool.reclaim import DEFAULT_IDLE_ACTS, DEFAULT_PREEMPTION, IdleActs, PreemptionPolicy
from joulepool.service.committer import Committer
from joulepool.service.deps import ApiError
from joulepool.service.tokens import TokenBook, scope_problem
from joulepool.service.transparency import PublishedLog, origin_or_none
from joulepool.tree import Tree

if TYPE_CHECKING:
    from joulepool.deployment.actions import ActionLog
    from joulepool.deployment.config import Config
    from joulepool.service.witnessing import Witnessing
    from joulepool.transparency.witness_client import WitnessConfig

log = logging.getLogger("joulepool.serve")
"""The service's log: `pool serve` shows the `joulepool` loggers through uvicorn's config."""


class WitnessFork(PoolError):
    """A C2SP witness holds a checkpoint of this log that its ledger does not extend
    (DESIGN.md §8): `/readyz` answers 503 until `pool serve` is restarted."""

    code = "witness_fork"


def settle_heap() -> None:
    """Move what replay built out of the cyclic collector's sight (`gc.freeze`): the folded
    ledger state lives as long as the service, and a full collection that rescans millions
    of its objects every few passes stalls whatever request triggered it (measured on the
    due acts over 10,000 running claims: every other pass took twice as long)."""
    gc.collect()
    gc.freeze()


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
    # The tree tokens are checked against until the ledger is replayed (then the pool's).
    start_tree: Tree | None = None
    # The last reload's outcome, as Prometheus exports its own (docs/reliability.md §15).
    last_reload_ok: bool = True
    last_reload_success_ms: int | None = None
    # Run when the service stops (the reload thread, the pid file): uvicorn re-raises the
    # signal that stopped it once the lifespan has ended, so nothing after it would run.
    stop_hooks: list[Callable[[], None]] = field(default_factory=list)

    def tree(self) -> Tree:
        """The tree in force, which token scopes are checked against (API.md, Tokens): the
        pool's, or the one read at start while replay runs."""
        pool = self.pool
        if pool is not None:
            return pool.tree
        return self.start_tree if self.start_tree is not None else Tree([])

    def reloaded(self, ok: bool, at_ms: int) -> None:
        """Record a reload's outcome for `/metrics` (docs/reliability.md §15)."""
        self.last_reload_ok = ok
        if ok:
            self.last_reload_success_ms = at_ms

    # The checkpoint origin (DESIGN.md §8), None where pool.toml gives none that can be one.
    origin: str | None = None
    _published: PublishedLog | None = None
    # `[[c2sp_witness]]` in force, and their submitters once the ledger is replayed.
    c2sp_witnesses: tuple[WitnessConfig, ...] = ()
    witnessing: Witnessing | None = None

    # The deployment's claim secret (`deployment.claim_tokens`); None: no claim tokens.
    claim_secret: bytes | None = None
    # `[runtime]` in force and the action log (DESIGN.md §7); None: no log, acts are shown
    # as due but nothing is recorded.
    runtime: RuntimePolicy = DEFAULT_POLICY
    idle_acts: IdleActs = DEFAULT_IDLE_ACTS
    preemption: PreemptionPolicy = DEFAULT_PREEMPTION
    actions: ActionLog | None = None

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
        settle_heap()
        self.committer = Committer(pool)
        self.pool = pool
        self._agree(pool)
        self._index_in_background()
        self._witness()
        log.info("ready: %s, %d entries replayed", pool.store.name, pool.length)

    def _index_in_background(self) -> None:
        """Bring the tile index up to the ledger once, off any request (DESIGN.md §8): the
        first `/checkpoint` after a start then waits for no hash of the whole ledger."""
        if self.origin is None:
            return
        published = self.published()

        def run() -> None:
            try:
                published.follow(published.pool.length)
            except Exception as exc:
                # A cache: the first request that needs it builds it, or answers why not.
                log.warning("tile index not built at start: %s", exc)

        threading.Thread(target=run, name="tile-index", daemon=True).start()

    def _witness(self) -> None:
        """Start submitting checkpoints to the `[[c2sp_witness]]` witnesses (DESIGN.md §8),
        each on its own thread (`service.witnessing`)."""
        if self.witnesses is None:
            return
        from joulepool.service.witnessing import Witnessing

        with self.lock:
            if self.witnessing is None:
                self.witnessing = Witnessing(self.witnesses, self.published)
        self.witnessing.configure(self.c2sp_witnesses)

    def checkpoint_note(self) -> bytes:
        """The newest signed checkpoint with the cosignature lines of every witness that
        cosigned exactly it (c2sp.org/tlog-cosignature; DESIGN.md §8): the tlog convention
        of serving the latest with what it has, plain where no witness has cosigned it yet.
        A follower that wants cosigned checkpoints only polls until one is."""
        from joulepool.ledger.checkpoint import add_signatures

        published = self.published()
        head = published.head()
        witnessing = self.witnessing
        lines = witnessing.signatures_for(head, published.origin) if witnessing else []
        return add_signatures(head.note, lines) if lines else head.note

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

    def _tokens_fit(self, config: Config) -> None:
        """Refuse a tree that drops an entitlement a token in force names (API.md, Tokens):
        that token would act on nothing, and a later tree could give the name to another
        team. Revoke the token first."""
        for name, scope in self.tokens.scopes():
            problem = scope_problem(scope, config.tree)
            if problem is not None:
                raise InvalidInput(
                    "pool.toml",
                    f"the token {name!r} in force: {problem}; revoke it "
                    "(`pool token revoke DIR NAME`) before the tree drops its entitlement",
                )

    def token_clock_ms(self) -> int:
        """The instant a token's `expires` is judged at: the wall clock, never before the
        ledger's last entry (DESIGN.md §3, time faults; docs/reliability.md §15), so a
        clock set back cannot bring an expired token back to life."""
        wall = time.time_ns() // 1_000_000
        pool = self.pool
        return wall if pool is None else max(wall, pool.state.last_at_ms)

    def reload(self, config: Config) -> None:
        """Put a changed pool.toml in force (SIGHUP; docs/reliability.md §8, §15); raises
        `PoolError` and changes nothing if it cannot. A changed [period] is replayed here,
        outside the commit lock, while the old configuration goes on deciding, and put in
        force in one step under it (`Pool.rebuild`, `Pool.reload`). On a store shared by
        replicas, a pool.toml whose digest changed with this reload is recorded as the one
        the ledger is decided under, in the same step, under the commit lock: the other
        replicas decide nothing until they are reloaded with the same file (a replica given
        the file another recorded records the same digest again). A reload that changes
        nothing here records nothing, so a routine SIGHUP never overrides the others."""
        from joulepool.deployment.config import config_digest

        pool = self.pool
        if pool is None:
            raise StoreError(
                "the ledger is not replayed yet (or failed to start): the configuration "
                "was not reloaded; send SIGHUP again once /readyz says ready"
            )
        self._tokens_fit(config)
        digest = config_digest(config)
        store = pool.store
        before: Callable[[], None] | None = None
        shared = store.shared
        if shared is not None and digest != self.config_digest:
            adopt = shared.adopt_config

            def before() -> None:
                adopt(digest)

        # The long part, a replay under a changed [period], runs here, on the reload's own
        # thread, while the configuration in force goes on deciding (§15).
        rebuilt = pool.rebuild(config)
        old = shared.config_digest if shared is not None else None
        try:
            pool.reload(config, before=before, rebuilt=rebuilt)
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
        self.origin = origin_or_none(config)
        if self._published is not None and self.origin is not None:
            self._published.origin = self.origin
        self.c2sp_witnesses = config.witnesses
        self.runtime = config.runtime_policy
        self.idle_acts = config.idle_acts_policy
        self.preemption = config.preemption_policy
        if self.witnessing is not None:
            self.witnessing.configure(config.witnesses)

    def readiness(self) -> dict[str, Any]:
        """/readyz: ready once replayed and while the next write can be expected to
        succeed (the disk has room; PostgreSQL answers, within a bound, and records this
        replica's configuration) and the clock can date an entry (DESIGN.md §3:
        `clock_behind_ledger`, `clock_jump`) and no C2SP witness raised a fork alarm
        (DESIGN.md §8: `witness_fork`). Otherwise `ApiError` 503 naming the cause,
        logged once."""
        pool = self.ready_pool()
        try:
            length = self._check_store(pool)
            # A clock the writer cannot date entries by: every append would be refused.
            fault = pool.clock_fault()
            if fault is not None:
                raise fault
            forks = self.witnessing.alarms() if self.witnessing is not None else {}
            if forks:
                # A witness saw another history of this log: an operator must look before
                # anyone relies on it (DESIGN.md §8; docs/transparency.md, Witnessing).
                raise WitnessFork("; ".join(forks[name] for name in sorted(forks)))
        except (StoreError, ClockFault, WitnessFork) as exc:
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
        for hook in self.stop_hooks:
            hook()
        if self.witnessing is not None:
            self.witnessing.stop()
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

    def published(self) -> PublishedLog:
        """The ledger as a C2SP log (DESIGN.md §8), once replayed; 503 `no_origin` where
        pool.toml gives no origin a checkpoint can carry."""
        pool = self.ready_pool()
        if self.origin is None:
            raise ApiError(
                503,
                "no_origin",
                "the steward's id cannot be a checkpoint origin (a space or '+'); set "
                "[transparency] origin in pool.toml and send SIGHUP",
            )
        with self.lock:
            if self._published is None or self._published.pool is not pool:
                self._published = PublishedLog(pool, self.origin)
            return self._published

    def fresh_pool(self) -> Pool:
        """The pool, caught up with every entry other replicas committed before this read."""
        pool = self.ready_pool()
        pool.catch_up()
        return pool
