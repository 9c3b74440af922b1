"""A deployment's configurations over time: the signed statements under `DIR/configs/`
(docs/reliability.md §18; DESIGN.md §3, §4).

    DIR/configs/NNNNNNNN.cose   configuration statement NNNNNNNN, in order, each written
                                whole before the configuration it names decides anything

A statement is written when a configuration is first put in force: `pool init`, a writer's
start with no statement yet or with a `pool.toml` whose digest differs from the last one's,
and every SIGHUP reload that changes the digest. Replicas of one PostgreSQL ledger keep
their own folder: the digest agreement (§8) makes every replica's texts the same, and each
records the length and instant it took a configuration in.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from joulepool.deployment.keys import read_numbered
from joulepool.errors import DiskFull, PoolError, StoreError, no_space
from joulepool.files import fsync_dir, write_atomically
from joulepool.ledger.configs import (
    MAX_CONFIG_STATEMENT_BYTES,
    AppliedConfig,
    ConfigHistory,
    ConfigStatementRefused,
    config_text,
    seal_config,
)

if TYPE_CHECKING:
    from joulepool.deployment.config import Config
    from joulepool.ledger.keys import KeyPair
    from joulepool.ledger.rotation import KeySchedule
    from joulepool.pool import Pool

CONFIGS = "configs"


def read_config_statements(folder: Path) -> list[bytes]:
    """The configuration statements kept in `folder` (a `configs/` folder), in order
    (`read_numbered`; `ConfigStatementRefused` at the position that fails,
    docs/reliability.md §18)."""
    return read_numbered(folder, MAX_CONFIG_STATEMENT_BYTES, ConfigStatementRefused, "statement")


def config_history(folder: Path, keys: KeySchedule) -> ConfigHistory:
    """The deployment's verified configurations (`DIR/configs/`), or
    `ConfigStatementRefused` at the first that fails (docs/reliability.md §18)."""
    return ConfigHistory.verified(keys, read_config_statements(folder / CONFIGS))


def applier(how: str) -> str:
    """Who puts a configuration in force: `how` (`pool init`, `start`, `SIGHUP`), with this
    process's id and user, the only parties a signal or a start can be traced to."""
    return f"{how} (pid {os.getpid()}, user {_user()})"


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"


def record_config(
    folder: Path,
    history: ConfigHistory,
    key: KeyPair,
    config: Config,
    length: int,
    at_ms: int,
    who: str,
) -> AppliedConfig | None:
    """Keep a statement that `config` is in force from ledger length `length` and `at_ms`,
    signed by `key` (the key that seals entry `length`), unless it is the configuration the
    last statement put in force (docs/reliability.md §18). The statement is verified as a
    verifier would before it is written, and written whole; returns it, or None when
    nothing changed."""
    from joulepool.deployment.config import config_digest, config_document

    digest = config_digest(config)
    text = config_text(config_document(config))
    # Replicas of one ledger may share a folder: another may have recorded statements since
    # this process read them, the same configuration among them. Each try reads what is
    # there, and a name is taken only if free, so two never write one position.
    for _ in range(_TRIES):
        _refresh(folder, history)
        last = history.last
        if last is not None and last.digest == digest:
            return None
        from_length, since = length, at_ms
        if last is not None:
            # A clock stepped back never dates a statement before the one it follows.
            since = max(at_ms, last.at_ms)
            from_length = max(length, last.from_length)
        position = len(history.statements)
        raw = seal_config(key, position, from_length, since, text, who)
        trial = ConfigHistory.verified(history.keys, history.statements)
        trial.add(raw)
        if _write_new(folder, position, raw):
            return history.add(raw)
    raise StoreError(
        f"{folder / CONFIGS}: other writers kept taking the next statement's name: the "
        "configuration was not recorded; try again"
    )


_TRIES = 5


def _refresh(folder: Path, history: ConfigHistory) -> None:
    """Take in statements written after those `history` holds (another replica's)."""
    for raw in read_config_statements(folder / CONFIGS)[len(history.statements) :]:
        history.add(raw)


def _write_new(folder: Path, position: int, raw: bytes) -> bool:
    """Write statement `position` whole under a name no one holds yet: False when another
    writer has taken it (the caller reads again), a typed refusal when it cannot write."""
    target = folder / CONFIGS
    path = target / f"{position:08d}.cose"
    tmp = target / f".{path.name}.{os.getpid()}.tmp"
    try:
        if not target.is_dir():
            with contextlib.suppress(FileExistsError):
                target.mkdir(mode=0o755)
            fsync_dir(folder)
        write_atomically(tmp, raw, 0o644)
        try:
            # A hard link fails if the name exists: never replace another's statement.
            os.link(tmp, path)
        except FileExistsError:
            return False
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()
        fsync_dir(target)
    except OSError as exc:
        # Typed, so a start refuses in one line and a reload says its configuration is
        # not on record; the next start or SIGHUP records it, since the digests differ.
        words = f"{path}: the configuration statement cannot be written ({exc.strerror})"
        raise (DiskFull(words) if no_space(exc) else StoreError(words)) from None
    return True


def record_in_pool(folder: Path, pool: Pool, config: Config, who: str) -> AppliedConfig | None:
    """`record_config` for a running writer: at its length and clock, with its key in force,
    into `pool.configs` (docs/reliability.md §18)."""
    history = pool.configs
    if history is None or pool.read_only:
        return None
    return record_config(folder, history, pool.key, config, pool.length, pool.now_ms(), who)


REQUEST = "pool.reload.request"
"""Who asked for the next SIGHUP reload: written by `pool reload DIR` just before it signals,
taken (and removed) by the reload, since a signal does not say who sent it."""

REQUEST_FRESH_NS = 60 * 1_000_000_000


def note_reload_request(folder: Path) -> None:
    """`pool reload DIR`: say who is about to send SIGHUP (docs/reliability.md §18), on the
    system's monotonic clock, which the service shares."""
    doc = {"pid": os.getpid(), "user": _user(), "at_ns": time.monotonic_ns()}
    write_atomically(folder / REQUEST, json.dumps(doc).encode("ascii"), 0o644)


def sighup_sender(folder: Path, started_ns: int) -> str:
    """Who sent the SIGHUP a reload that began at `started_ns` takes in: `pool reload`'s
    note when one was written in the minute before, else the service itself is named
    and the sender is said to be unknown. The note is removed either way."""
    path = folder / REQUEST
    try:
        doc = json.loads(path.read_bytes()[:4096])
        path.unlink()
        pid, user, at = doc["pid"], doc["user"], doc["at_ns"]
        if (
            type(pid) is int
            and type(at) is int
            and isinstance(user, str)
            and 0 <= started_ns - at <= REQUEST_FRESH_NS
        ):
            return (
                f"SIGHUP from pool reload (pid {pid}, user {user[:64]}) "
                f"to pool serve (pid {os.getpid()})"
            )
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return applier("SIGHUP, sender unknown, to pool serve")


RELOAD_LOG = "pool.reload.log"
"""Every reload `pool serve` made, one JSON object a line, appended (docs/reliability.md §18)."""

_TREE_KEY = "entitlements"


def config_diff(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> dict[str, Any]:
    """What changed from configuration document `old` to `new` (`config_document`'s shape;
    docs/reliability.md §18): entitlements added and removed, each changed field of an
    entitlement kept as [old, new], the period as [old, new], and every other key (the
    policies) as [old, new]. Empty when nothing changed; `old` None: nothing was recorded
    before, and `new` is all there is."""
    if old is None:
        return {"recorded": True, "entitlements_added": [e["id"] for e in new[_TREE_KEY]]}
    before = {e["id"]: e for e in old.get(_TREE_KEY, [])}
    after = {e["id"]: e for e in new.get(_TREE_KEY, [])}
    out: dict[str, Any] = {}
    added = [i for i in after if i not in before]
    removed = [i for i in before if i not in after]
    if added:
        out["entitlements_added"] = added
    if removed:
        out["entitlements_removed"] = removed
    changed: dict[str, dict[str, list[Any]]] = {}
    for node, fields in after.items():
        if node not in before:
            continue
        was = before[node]
        moved = {
            k: [was.get(k), fields.get(k)]
            for k in sorted(set(was) | set(fields))
            if was.get(k) != fields.get(k)
        }
        if moved:
            changed[node] = moved
    if changed:
        out["entitlements_changed"] = changed
    if old.get("period") != new.get("period"):
        out["period"] = [_set_only(old.get("period")), _set_only(new.get("period"))]
    policies = {
        k: [old.get(k), new.get(k)]
        for k in sorted((set(old) | set(new)) - {_TREE_KEY, "period"})
        if old.get(k) != new.get(k)
    }
    if policies:
        out["policies"] = policies
    return out


def _set_only(value: object) -> object:
    """A period as pool.toml spells it: the digest's document keeps unset fields as null."""
    if isinstance(value, Mapping):
        return {k: v for k, v in value.items() if v is not None}
    return value


def tokens_diff(old: list[tuple[str, str]], new: list[tuple[str, str]]) -> dict[str, Any]:
    """What changed in `tokens.toml` by token name and scope, never a hash (API.md, Tokens;
    docs/reliability.md §18): names added, removed, and scopes changed as [old, new]."""
    before, after = dict(old), dict(new)
    out: dict[str, Any] = {}
    added = [n for n in after if n not in before]
    removed = [n for n in before if n not in after]
    scoped = {n: [before[n], s] for n, s in after.items() if n in before and before[n] != s}
    if added:
        out["added"] = added
    if removed:
        out["removed"] = removed
    if scoped:
        out["scope_changed"] = scoped
    return out


def log_reload(folder: Path, record: Mapping[str, Any]) -> None:
    """Append one reload's record to `DIR/pool.reload.log` as one line, written in one call
    and synced, so a reader never meets half a line (docs/reliability.md §18)."""
    line = (json.dumps(record, sort_keys=True, ensure_ascii=True) + "\n").encode("ascii")
    fd = os.open(folder / RELOAD_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


MAX_LOG_LINE = 1 << 20


def _well_formed(doc: Mapping[str, Any]) -> bool:
    """A record as `log_reload` writes it: a line missing one of these is not shown as one."""
    return (
        type(doc.get("at_ms")) is int
        and isinstance(doc.get("trigger"), str)
        and isinstance(doc.get("who"), str)
        and type(doc.get("ok")) is bool
        and isinstance(doc.get("message"), str)
        and isinstance(doc.get("config"), dict)
        and isinstance(doc.get("tokens"), dict)
    )


def read_reload_log(folder: Path) -> list[dict[str, Any]]:
    """The reload log's records, oldest first; a line that is not a JSON object (a torn
    last line, an edit) is returned as `{"unreadable": N}` naming its line, never guessed."""
    path = folder / RELOAD_LOG
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise PoolError(f"{path}: cannot read: {exc.strerror}") from None
    out: list[dict[str, Any]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        try:
            if len(raw) > MAX_LOG_LINE:
                raise ValueError("too long")
            doc = json.loads(raw)
            if not isinstance(doc, dict) or not _well_formed(doc):
                raise ValueError("not a reload record")
        except ValueError:
            out.append({"unreadable": number})
            continue
        out.append(doc)
    return out
