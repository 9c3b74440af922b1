"""Reloads that never stop the service (docs/reliability.md §15): SIGHUP, `pool reload DIR`,
and `tokens.toml` watched.

- A SIGHUP only wakes the reload thread; the signal handler reads nothing and replays
  nothing, so the event loop keeps answering. SIGHUPs that arrive while a reload runs are
  coalesced into one more reload after it, of the files as they are when it starts.
- Tokens are their own reload, applied on their own: a refused `pool.toml` never holds a
  revoke back, and a refused `tokens.toml` never holds a tree back. A `tokens.toml` that is
  missing or lists no token while tokens are in force is refused like a malformed one.
- `tokens.toml` is watched (its mtime, size and inode, every `POLL_S`): a change is taken
  in by itself, a revoke within a second, no SIGHUP.
- Every reload is logged in `DIR/pool.reload.log` (JSON lines: when, what started it, the
  outcome, and what changed, tokens by name only; docs/reliability.md §18), and a reload
  that changes the configuration's digest keeps a signed configuration statement under
  `DIR/configs/` (`deployment.configs`), which later reports judge past periods by.
- Every reload's outcome is kept for `/metrics` (`pool_config_last_reload_successful`) and,
  for a SIGHUP, written to `DIR/pool.reload.json` (`STATUS`), which `pool reload DIR` waits
  for; `DIR/pool.serve.pid` (`PID`) names the running service.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from joulepool.errors import InvalidTokens, PoolError
from joulepool.files import write_atomically

if TYPE_CHECKING:
    from joulepool.ledger.configs import AppliedConfig
    from joulepool.service.served import Service

log = logging.getLogger("joulepool.serve")

PID = "pool.serve.pid"
"""The running `pool serve`'s process id, in the deployment folder; removed on exit."""

STATUS = "pool.reload.json"
"""The last SIGHUP reload's outcome, in the deployment folder, replaced whole each time."""

POLL_S = 0.5
"""How often `tokens.toml` is looked at: a revoke is in force within about this long."""

SIGHUP = "SIGHUP"
WATCH = "tokens.toml changed"


@dataclass(frozen=True, slots=True)
class Outcome:
    """One reload: which (the `count`th SIGHUP reload, or a watched change), what started it,
    when (`started_ns` on the system's monotonic clock, which `pool reload` shares), whether
    everything it read was put in force, and the refusal if not."""

    pid: int
    count: int
    trigger: str
    started_ns: int
    done_ms: int
    ok: bool
    message: str

    def to_json(self) -> dict[str, object]:
        """What `STATUS` holds (docs/reliability.md §15)."""
        return asdict(self)


def _named(exc: Exception) -> str:
    """A refusal's words: a `PoolError`'s own; anything else named by its type, so the
    reload thread survives it and `pool reload` still gets an outcome, never a hang."""
    if isinstance(exc, PoolError):
        return str(exc)
    return f"internal_error: {type(exc).__name__}: {exc}"


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _signature(path: Path) -> tuple[int, int, int] | None:
    """What tells a changed `tokens.toml`: (mtime_ns, size, inode), or None when absent."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size, info.st_ino


class Reloader:
    """The reload thread and the `tokens.toml` watcher of one `pool serve` (§15)."""

    def __init__(self, service: Service, folder: Path, say: Callable[[str], None] = _say) -> None:
        self.service = service
        self.folder = folder
        self.say = say
        # A SIGHUP writes a byte here; the reload thread reads whatever is there at once, so
        # signals during a reload make one more. A pipe, not a lock: a handler can interrupt
        # the main thread anywhere, even inside another handler.
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(self._wake_w, False)
        self._stopping = threading.Event()
        # Token reloads from the watcher and from a SIGHUP never interleave.
        self._tokens_lock = threading.Lock()
        self._seen: tuple[int, int, int] | None = None
        self.count = 0
        self.last: Outcome | None = None
        # Each part's last outcome: the files on disk are in force only while both are.
        self._tokens_ok = self._config_ok = True

    # -- threads ---------------------------------------------------------------------------

    def start(self) -> None:
        """Write the pid file and start the reload thread and the watcher (§15)."""
        from joulepool.deployment.config import TOKENS

        self._seen = _signature(self.folder / TOKENS)
        try:
            write_atomically(self.folder / PID, f"{os.getpid()}\n".encode(), 0o644)
        except OSError as exc:
            # Serving matters more than the pid file: SIGHUP and the watcher still work.
            log.error(
                "%s not written (%s): `pool reload DIR` will not find this service",
                self.folder / PID,
                exc.strerror,
            )
        for target, name in ((self._reloads, "reload"), (self._watch, "tokens-watch")):
            threading.Thread(target=target, name=name, daemon=True).start()

    def stop(self) -> None:
        """Stop both threads and remove the pid file, ours only (§15)."""
        self._stopping.set()
        self.request()
        path = self.folder / PID
        with contextlib.suppress(OSError, ValueError):
            if int(path.read_text().strip()) == os.getpid():
                path.unlink()

    def request(self) -> None:
        """SIGHUP: ask for a reload (§15). Safe in a signal handler: one write, no lock."""
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, b"\0")  # a full pipe has a reload waiting already

    def _reloads(self) -> None:
        while True:
            # Every byte written so far is read at once: SIGHUPs from here on, during the
            # reload below, make one more reload after it (coalesced, never one each).
            os.read(self._wake_r, 1 << 16)
            if self._stopping.is_set():
                return
            try:
                self.reload(SIGHUP)
            except Exception as exc:  # the thread outlives whatever one reload meets
                log.error("reload failed: %s: %s", type(exc).__name__, exc)

    def _watch(self) -> None:
        from joulepool.deployment.config import TOKENS

        path = self.folder / TOKENS
        while not self._stopping.wait(POLL_S):
            seen = _signature(path)
            if seen == self._seen:
                continue
            self._seen = seen
            try:
                self.reload(WATCH)
            except Exception as exc:
                log.error("tokens reload failed: %s: %s", type(exc).__name__, exc)

    # -- one reload ------------------------------------------------------------------------

    def reload(self, trigger: str) -> Outcome:
        """Reload the tokens, then on a SIGHUP `pool.toml`, each on its own (§15); record the
        outcome. Tokens refused against the tree in force are tried again once a new tree
        is, since a new token may name an entitlement only the new tree has."""
        started = time.monotonic_ns()
        before = list(self.service.tree())
        from joulepool.deployment.configs import applier, sighup_sender

        in_force = self._recorded()
        scopes = self.service.tokens.scopes()
        who = sighup_sender(self.folder, started) if trigger == SIGHUP else applier(trigger)
        tokens = self._tokens()
        config = None
        if trigger == SIGHUP:
            config = self._config(who)
            if config is None and tokens is not None and list(self.service.tree()) != before:
                tokens = self._tokens()  # a token may name what the new tree adds
            self._config_ok = config is None
        self._tokens_ok = tokens is None
        refusals = [r for r in (tokens, config) if r is not None]
        if trigger == SIGHUP:
            self.count += 1
        outcome = Outcome(
            os.getpid(),
            self.count,
            trigger,
            started,
            time.time_ns() // 1_000_000,
            not refusals,
            "; ".join(refusals) if refusals else "reloaded",
        )
        self.last = outcome
        # A tokens change taken in does not hide a pool.toml still refused, nor the reverse.
        self.service.reloaded(self._tokens_ok and self._config_ok, outcome.done_ms)
        if trigger == SIGHUP:
            try:
                write_atomically(
                    self.folder / STATUS, json.dumps(outcome.to_json()).encode(), 0o644
                )
            except OSError as exc:
                log.error("the reload's outcome could not be written to %s: %s", STATUS, exc)
        self._log(outcome, who, in_force, scopes)
        return outcome

    def _recorded(self) -> AppliedConfig | None:
        """The configuration statement in force, or None before the ledger is replayed."""
        pool = self.service.pool
        return None if pool is None or pool.configs is None else pool.configs.last

    def _log(
        self,
        outcome: Outcome,
        who: str,
        before: AppliedConfig | None,
        scopes: list[tuple[str, str]],
    ) -> None:
        """One line of `DIR/pool.reload.log` (docs/reliability.md §18): when, what started
        it, whether it was taken, and what changed: the configuration put in force against
        the one before (nothing when it was refused or the same), tokens by name only."""
        from joulepool.deployment.configs import config_diff, log_reload, tokens_diff

        after = self._recorded()
        changed: dict[str, object] = {}
        if after is not None and (before is None or after.position != before.position):
            old = None if before is None else json.loads(before.text)
            changed = config_diff(old, json.loads(after.text))
        record: dict[str, object] = {
            "at_ms": outcome.done_ms,
            "trigger": outcome.trigger,
            "who": who,
            "ok": outcome.ok,
            "message": outcome.message,
            "config": changed,
            "tokens": tokens_diff(scopes, self.service.tokens.scopes()),
        }
        if after is not None:
            record["configuration"] = after.to_json()
        try:
            log_reload(self.folder, record)
        except OSError as exc:
            log.error("the reload could not be logged in %s: %s", self.folder, exc.strerror)

    def _tokens(self) -> str | None:
        """Put `tokens.toml` in force, checked against the tree in force; the refusal, or
        None. A file missing or listing no token while tokens are in force is refused:
        it would drop every token, the operator's included."""
        from joulepool.deployment.config import TOKENS
        from joulepool.service.tokens import TokenBook, read_tokens

        path = self.folder / TOKENS
        with self._tokens_lock:
            service = self.service
            try:
                entries = read_tokens(path, service.tree())
                if not entries and len(service.tokens) > 0:
                    state = "missing" if not path.exists() else "lists no token"
                    raise InvalidTokens(
                        str(path),
                        None,
                        f"{state}: that would drop every token in force, the operator's "
                        "included; restart pool serve to run with no tokens",
                    )
            except Exception as exc:
                message = f"reload refused, keeping the old tokens: {_named(exc)}"
                self.say(f"pool serve: error: {message}")
                return message
            service.tokens = TokenBook(entries)
            self.say(f"pool serve: tokens reloaded ({len(entries)} in force)")
            return None

    def _config(self, who: str) -> str | None:
        """Put `pool.toml` in force (`Service.reload`); the refusal, or None."""
        from joulepool.deployment.config import CONFIG, read_config
        from joulepool.deployment.configs import record_in_pool
        from joulepool.deployment.open import put_pending_in_force, say

        try:
            config = read_config(self.folder / CONFIG)
            self.service.reload(config)
        except Exception as exc:
            message = f"reload refused, keeping the old configuration: {_named(exc)}"
            self.say(f"pool serve: error: {message}")
            return message
        pool = self.service.pool
        if pool is not None:
            # The statement follows the switch: entries decided in between (a few at most)
            # precede its from_length though the new tree decided them (§18).
            try:
                applied = record_in_pool(self.folder, pool, config, who)
            except Exception as exc:
                message = (
                    f"configuration reloaded, but its statement was not recorded: {_named(exc)}"
                )
                self.say(f"pool serve: error: {message}")
                return message
            if applied is not None:
                self.say(
                    f"pool serve: configuration {applied.digest.hex()[:12]} recorded as "
                    f"statement {applied.position}"
                )
        self.say("pool serve: configuration reloaded")
        if pool is not None:
            put_pending_in_force(self.folder, pool, say("pool serve"))
        return None


def read_status(folder: Path) -> Outcome | None:
    """The last SIGHUP reload's outcome `pool serve` wrote in `folder`, or None if none is
    there or it cannot be read as one (`pool reload DIR`, docs/reliability.md §15)."""
    try:
        doc = json.loads((folder / STATUS).read_text(encoding="utf-8"))
        return Outcome(
            pid=int(doc["pid"]),
            count=int(doc["count"]),
            trigger=str(doc["trigger"]),
            started_ns=int(doc["started_ns"]),
            done_ms=int(doc["done_ms"]),
            ok=doc["ok"] is True,
            message=str(doc["message"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
