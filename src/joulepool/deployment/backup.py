"""Backups of a deployment, and what restoring one loses (standard §6.1; DESIGN.md §4).

A backup is a deployment folder of its own, consistent at one ledger length: the entries up
to the last whole one when it was taken (it can be taken beside a running `pool serve`), a
high-water record at exactly that length and head, the state snapshots not past it, the
rotation statements, the kept witness receipts, pool.toml, tokens.toml (hashes only) and the
steward's first public key. The secret key (and with it the claim secret, under which
running jobs' claim tokens are derived) is left out unless asked for: a backup is often
kept where the key must not be. The copy is verified (replayed) before it is called done.

What a restore loses is decided by history, not by length: the backup and the deployment
agree on a common prefix (their heads at the same length), and every entry the deployment
acknowledged past that prefix (in its ledger, or only in its high-water record) is lost,
whether the backup stops there (an older backup: exactly a rollback) or goes on with other
entries (a fork). Each tenant's usage falls by what the lost entries charged. `restore`
says which entries and by how much, and proceeds only when told to (`accept_loss`); the
decision is appended to the deployment's `restore.log`. A backup of another steward (another
identifier, or another first key) is never restored over a deployment, consent or not.

Secrets keep their modes: the backup folder is its owner's only, `tokens.toml` and the
steward key are 0600 in the backup and in the restored deployment.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from joulepool.deployment.claim_tokens import CLAIM_SECRET
from joulepool.deployment.config import (
    CONFIG,
    KEY,
    LEDGER,
    PUBLIC_KEY,
    TOKENS,
    WITNESSES,
    read_config,
)
from joulepool.deployment.keys import ROTATIONS
from joulepool.errors import InvalidInput, PoolError, StoreError
from joulepool.files import fsync_dir
from joulepool.ledger.cose import GENESIS, content_address
from joulepool.ledger.keys import KeyPair, load_key_file
from joulepool.ledger.rollback import HighWater
from joulepool.ledger.snapshot import SnapshotFolder
from joulepool.stores.base import head_at
from joulepool.stores.claim_index import index_path, open_index
from joulepool.stores.file import FileStore, LedgerLocked, lock_holder
from joulepool.stores.highwater import HighWaterFile, record_path
from joulepool.units import energy_text

RESTORE_LOG = "restore.log"


class RestoreWouldLose(PoolError):
    """Restoring would lose acknowledged entries, and `accept_loss` was not given (§6.1)."""

    code = "restore_loses_entries"

    def __init__(self, loss: Loss) -> None:
        super().__init__(loss.sentence())
        self.loss = loss


@dataclass(frozen=True, slots=True)
class Steward:
    """Whose a deployment is: the steward's identifier and first public key (DESIGN.md §4,
    key rotation: the trust anchor `steward.pub`); the key is None where only pool.toml
    names the steward."""

    id: str
    first_key: bytes | None

    def same(self, other: Steward) -> bool:
        """Whether `other` is this steward: the same identifier and, where both are known,
        the same first key."""
        if self.id != other.id:
            return False
        return (
            self.first_key is None or other.first_key is None or (self.first_key == other.first_key)
        )

    def describe(self) -> str:
        """The steward for people: its identifier and its first key's first 16 hex digits."""
        key = self.first_key.hex()[:16] if self.first_key is not None else "unknown"
        return f"{self.id!r} (first key {key})"


class RestoreOtherSteward(PoolError):
    """The backup is another steward's: refused whatever the consent (§6.1, DESIGN.md §4)."""

    code = "restore_other_steward"

    def __init__(self, backup: Path, theirs: Steward, folder: Path, ours: Steward) -> None:
        super().__init__(
            f"{backup} is a backup of steward {theirs.describe()}, {folder} is the deployment "
            f"of steward {ours.describe()}: a restore never puts one steward's ledger in place "
            "of another's, with --accept-loss or without; restore it to a new folder instead"
        )
        self.theirs, self.ours = theirs, ours


@dataclass(frozen=True, slots=True)
class Loss:
    """What a restore gives up: acknowledged entries past the history the backup shares
    with the deployment (`common` entries), and the usage they charged (§6.1)."""

    backup_length: int
    acknowledged: int
    common: int
    entries: list[dict[str, Any]] = field(default_factory=list)
    usage_falls: dict[str, dict[str, int]] = field(default_factory=dict)
    known: bool = True

    @property
    def lost(self) -> int:
        """How many acknowledged entries the restore gives up."""
        return max(0, self.acknowledged - self.common)

    @property
    def forked(self) -> bool:
        """Whether the backup goes on past the shared history with entries of its own."""
        return bool(self.lost) and self.common < self.backup_length

    def sentence(self) -> str:
        """The loss in one sentence for people."""
        if not self.lost:
            return "the backup holds everything the deployment acknowledged: nothing is lost"
        what = (
            ", ".join(
                f"{ent} by {energy_text(f['spent_uj'])}"
                for ent, f in sorted(self.usage_falls.items())
            )
            if self.known
            else "unknown (the deployment's own ledger is gone or does not share the backup's "
            "history)"
        )
        fork = (
            f"the backup is not an extension of what the deployment acknowledged: they share "
            f"the first {self.common} entries, then the backup holds other ones; "
            if self.forked
            else ""
        )
        return (
            f"{fork}the deployment acknowledged {self.acknowledged} entries, the backup holds "
            f"{self.backup_length}: restoring loses entries {self.common} to "
            f"{self.acknowledged - 1}; usage falls: {what or 'nowhere'}"
        )

    def to_json(self) -> dict[str, Any]:
        """The loss as the CLI's `--json` reports it."""
        return {
            "backup_length": self.backup_length,
            "acknowledged": self.acknowledged,
            "common_length": self.common,
            "forked": self.forked,
            "lost": self.lost,
            "entries": self.entries,
            "usage_falls": self.usage_falls if self.known else None,
        }


@dataclass(frozen=True, slots=True)
class Restored:
    """A restore done: its loss, what came back, and what the operator still has to do."""

    loss: Loss
    secret_key: bool
    tokens: bool
    to_do: list[str]

    def to_json(self) -> dict[str, Any]:
        """The restore as the CLI's `--json` reports it."""
        return {
            **self.loss.to_json(),
            "secret_key_restored": self.secret_key,
            "tokens_restored": self.tokens,
            "to_do": self.to_do,
        }


def _copy_file(src: Path, dst: Path, mode: int | None = None) -> None:
    shutil.copyfile(src, dst)
    os.chmod(dst, mode if mode is not None else stat.S_IMODE(src.stat().st_mode))
    with open(dst, "rb") as fh:
        os.fsync(fh.fileno())


def _copy_tree(src: Path, dst: Path, keep: Any = None) -> None:
    if not src.is_dir():
        return
    dst.mkdir(mode=0o755)
    for path in sorted(src.iterdir()):
        if path.is_file() and not path.name.startswith(".") and (keep is None or keep(path)):
            _copy_file(path, dst / path.name)
    fsync_dir(dst)


def backup(folder: Path, out: Path, *, with_secret_key: bool = False) -> dict[str, Any]:
    """Copy the deployment `folder` to `out`, consistent at one ledger length (§6.1).

    Works beside a running writer: it copies the entries whole when it opened the ledger.
    The copy is replayed and verified before this returns; `out` must not exist.
    """
    from joulepool.deployment.open import open_pool

    if out.exists():
        raise InvalidInput(str(out), "exists; a backup is written to a new folder")
    if not (folder / LEDGER).is_file():
        raise InvalidInput(str(folder), f"not a deployment: it has no {LEDGER}")
    store = FileStore(folder / LEDGER, writer=False)
    try:
        out.mkdir(parents=True, mode=0o700)
        # The umask can only narrow mkdir's mode; a backup holds token hashes and maybe the
        # secret key, so it is its owner's whatever the umask.
        os.chmod(out, 0o700)
        length = len(store)
        head = content_address(store.entry(length - 1)) if length else GENESIS
        target = out / LEDGER
        with open(target, "wb") as fh:
            for raw in store.entries():
                fh.write(raw)
            fh.flush()
            os.fsync(fh.fileno())
        # The record at exactly the copied length: what this copy acknowledges.
        HighWaterFile.create(record_path(target), HighWater(length, head)).close()
        # The restored copy then starts from its snapshot, instead of rebuilding the index
        # by a replay of the whole ledger.
        index = open_index(folder / LEDGER, read_only=True)
        if index is not None:
            try:
                index.copy_to(index_path(target), length, head)
            finally:
                index.close()
    finally:
        store.close()
    for name in (CONFIG, PUBLIC_KEY):
        if (folder / name).is_file():
            _copy_file(folder / name, out / name)
    if (folder / TOKENS).is_file():
        # `pool serve` refuses a tokens file others can read; so does a backup of one.
        _copy_file(folder / TOKENS, out / TOKENS, 0o600)
    if with_secret_key:
        _copy_file(folder / KEY, out / KEY, 0o600)
        if (folder / CLAIM_SECRET).is_file():
            # Running jobs' claim tokens stay valid after a restore only with the same secret.
            _copy_file(folder / CLAIM_SECRET, out / CLAIM_SECRET, 0o600)
    _copy_tree(folder / ROTATIONS, out / ROTATIONS)
    # The configurations in force over the ledger it copies (docs/reliability.md §18); one
    # applied after its last entry belongs to a history the backup does not hold.
    from joulepool.deployment.configs import CONFIGS, config_history
    from joulepool.deployment.keys import deployment_keys

    kept = {
        f"{a.position:08d}.cose"
        for a in config_history(folder, deployment_keys(folder, read_only=True)[1]).applied
        if a.from_length <= length
    }
    _copy_tree(folder / CONFIGS, out / CONFIGS, lambda p: p.name in kept)
    _copy_tree(folder / WITNESSES, out / WITNESSES)
    snaps = SnapshotFolder.beside(folder / LEDGER)
    _copy_tree(
        snaps.folder,
        SnapshotFolder.beside(target).folder,
        lambda p: p.name.split(".")[0].isdigit() and int(p.name.split(".")[0]) <= length,
    )
    fsync_dir(out)
    # A backup that does not verify is not a backup: replayed from entry 0, no snapshot.
    copy = open_pool(out, read_only=True, snapshots=False)
    try:
        verified = copy.length
    finally:
        copy.close()
    return {
        "backup": str(out),
        "length": verified,
        "head_hex": head.hex(),
        "secret_key": with_secret_key,
        "files": sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()),
    }


def _usage_of(pool: Any) -> dict[str, dict[str, int]]:
    usage = pool.state.usage
    return {
        ent: {"spent_uj": usage.of(ent).spent_uj, "held_devices": usage.of(ent).held_devices}
        for ent in usage.ids()
    }


def steward_of(folder: Path) -> Steward | None:
    """Whose deployment `folder` is (DESIGN.md §4): from its trust anchor `steward.pub`,
    else from the steward its pool.toml names; None when it holds neither."""
    if (folder / PUBLIC_KEY).is_file():
        anchor = load_key_file(folder / PUBLIC_KEY)
        return Steward(anchor.kid, anchor.public_key)
    if (folder / CONFIG).is_file():
        try:
            return Steward(read_config(folder / CONFIG).steward, None)
        except PoolError:
            return None
    return None


def _shared(current: Any, saved: Any, upto: int) -> int:
    # Two hash chains that part never meet again, so the lengths at which the heads agree
    # are exactly 0..k: a bisection finds k.
    if current.head_at(upto) == saved.head_at(upto):
        return upto
    agree, differ = 0, upto
    while differ - agree > 1:
        mid = (agree + differ) // 2
        if current.head_at(mid) == saved.head_at(mid):
            agree = mid
        else:
            differ = mid
    return agree


def _usage_at(folder: Path, current: Any, length: int) -> dict[str, dict[str, int]]:
    """The deployment's usage after its first `length` entries: a replay of that prefix,
    under the deployment's own pool.toml and key schedule, in a folder of its own."""
    from joulepool.deployment.open import open_pool

    if length == 0:
        return {}
    with tempfile.TemporaryDirectory(prefix="pool-restore-") as scratch:
        prefix = Path(scratch)
        with open(prefix / LEDGER, "wb") as fh:
            for seq, raw in enumerate(current.entries()):
                if seq >= length:
                    break
                fh.write(raw)
        # A ledger without its record is refused as possibly cut short; this one is cut
        # on purpose, at exactly this length and head.
        HighWaterFile.create(
            record_path(prefix / LEDGER), HighWater(length, current.head_at(length))
        ).close()
        schedule = current.keys
        keys = (KeyPair(current.steward, schedule.current_key, None), schedule)
        then = open_pool(
            prefix,
            config=read_config(folder / CONFIG),
            keys=keys,
            read_only=True,
            snapshots=False,
        )
        try:
            return _usage_of(then)
        finally:
            then.close()


def _record(folder: Path) -> HighWater | None:
    high = HighWaterFile.open(record_path(folder / LEDGER), writable=False)
    if high is None:
        return None
    try:
        return high.point
    finally:
        high.close()


def loss(backup_folder: Path, folder: Path) -> tuple[Loss, int, bytes]:
    """What restoring `backup_folder` over the deployment `folder` loses (§6.1), and the
    backup's verified length and head.

    The backup loses nothing only when it extends what the deployment acknowledged: its
    head at the deployment's length is the deployment's head, and at the high-water
    record's length the record's head. Anything else loses the acknowledged entries past
    the history the two share.
    """
    from joulepool.deployment.open import open_pool

    saved = open_pool(backup_folder, read_only=True)
    try:
        length, head = saved.length, saved.head
        try:
            current = open_pool(folder, read_only=True) if (folder / LEDGER).exists() else None
        except PoolError:
            current = None
        if current is None:
            return _loss_unopened(saved, folder), length, head
        try:
            return _loss_against(saved, current, folder), length, head
        finally:
            current.close()
    finally:
        saved.close()


class _Entries:
    """A ledger file read as stored, for its heads only: one that does not open as a
    deployment (no record, damage further on) still shows the history it begins with."""

    def __init__(self, store: FileStore) -> None:
        self.store = store

    def head_at(self, length: int) -> bytes:
        return head_at(self.store, length)


def _loss_unopened(saved: Any, folder: Path) -> Loss:
    # No ledger to open: its record and whatever whole entries its file still holds say
    # what was acknowledged; no entry past the shared history can be named for certain.
    length = saved.length
    point = _record(folder)
    present, common = 0, 0
    if (folder / LEDGER).is_file():
        try:
            store = FileStore(folder / LEDGER, writer=False)
        except (PoolError, OSError):
            store = None
        if store is not None:
            try:
                present = len(store)
                common = _shared(_Entries(store), saved, min(present, length))
            except (PoolError, OSError):
                present, common = 0, 0
            finally:
                store.close()
    acknowledged = max(present, point.length if point is not None else 0)
    if common == present and point is not None and point.length > present:
        if point.length <= length and saved.head_at(point.length) == point.head:
            common = point.length
        elif point.length > length:
            # Nothing on file contradicts the backup up to its length, and nothing past it
            # can be compared: the loss is counted from there, its entries unknown.
            common = length
    elif common == present and (point is None or point.length <= present):
        common = acknowledged
    if common >= acknowledged:
        return Loss(length, acknowledged, acknowledged)
    return Loss(length, acknowledged, common, known=False)


def _loss_against(saved: Any, current: Any, folder: Path) -> Loss:
    from joulepool.events import Admitted
    from joulepool.ledger.cose import open_envelope
    from joulepool.ledger.entry import event_of

    length, present = saved.length, current.length
    common = _shared(current, saved, min(present, length))
    point = current.store.high_water()
    acknowledged = max(present, point.length if point is not None else 0)
    known = True
    if common == present and acknowledged > present and point is not None:
        # Acknowledged past the ledger still here: the backup keeps those entries only if
        # it has the record's head at the record's length.
        if point.length <= length and saved.head_at(point.length) == point.head:
            common = point.length
        else:
            known = False
    if common >= acknowledged:
        return Loss(length, acknowledged, acknowledged)
    entries = []
    for seq, raw in enumerate(current.entries(common), common):
        event = event_of(open_envelope(raw).core, current.steward)
        row: dict[str, Any] = {
            "seq": seq,
            "event": event.to_json()["event"],
            "claim": event.claim,
        }
        if isinstance(event, Admitted):
            row["entitlement"] = event.entitlement
        entries.append(row)
    after = _usage_of(current)
    before = _usage_of(saved) if common == length else _usage_at(folder, current, common)
    falls = {}
    for ent, figures in after.items():
        then = before.get(ent, {"spent_uj": 0, "held_devices": 0})
        drop = {k: figures[k] - then.get(k, 0) for k in figures}
        if any(drop.values()):
            falls[ent] = drop
    return Loss(length, acknowledged, common, entries, falls, known)


def _refuse_in_use(folder: Path) -> None:
    if folder.exists() and (folder / LEDGER).exists():
        fd = os.open(folder / LEDGER, os.O_RDONLY | os.O_CLOEXEC)
        try:
            holder = lock_holder(fd)
        finally:
            os.close(fd)
        if holder is not None:
            raise LedgerLocked(
                f"{folder / LEDGER} is in use by pid {holder}; stop it first", holder
            )


def _left_to_do(folder: Path) -> tuple[bool, bool, list[str]]:
    key, tokens = (folder / KEY).is_file(), (folder / TOKENS).is_file()
    to_do = []
    if not key:
        to_do.append(
            f"put the steward key in force back as {folder / KEY}, mode 0600: the backup "
            "holds none, and until it is there nothing can be admitted or released"
        )
    if tokens:
        to_do.append(
            f"tokens.toml was restored as the backup had it: a token revoked since works "
            f"again; check `pool token list {folder}`"
        )
    else:
        to_do.append(
            f"the backup holds no tokens.toml: issue tokens with `pool token add {folder} "
            "--scope ...` before `pool serve`"
        )
    return key, tokens, to_do


def restore(backup_folder: Path, folder: Path, *, accept_loss: bool = False) -> Restored:
    """Put a backup in place as the deployment `folder` (§6.1, DESIGN.md §4).

    Refuses, changing nothing: a backup of another steward (`RestoreOtherSteward`, whatever
    `accept_loss` says); one that is not an extension of what the deployment acknowledged
    (`RestoreWouldLose`) unless `accept_loss`, and then the loss is logged in `restore.log`.
    The folder being replaced is kept beside it as `<folder>.replaced-<time>`, never
    deleted. The secrets come back 0600, and the result says what is left to do.
    """
    _refuse_in_use(folder)
    ours = steward_of(folder) if folder.is_dir() else None
    theirs = steward_of(backup_folder)
    if ours is not None and theirs is not None and not ours.same(theirs):
        raise RestoreOtherSteward(backup_folder, theirs, folder, ours)
    lost, length, head = loss(backup_folder, folder)
    if lost.lost and not accept_loss:
        raise RestoreWouldLose(lost)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    previous_log = b""
    mode = None
    if folder.exists():
        mode = stat.S_IMODE(folder.stat().st_mode)
        if (folder / RESTORE_LOG).exists():
            previous_log = (folder / RESTORE_LOG).read_bytes()
        aside = folder.with_name(f"{folder.name}.replaced-{stamp}")
        os.rename(folder, aside)
    try:
        shutil.copytree(backup_folder, folder)
    except OSError as exc:
        raise StoreError(f"{folder}: the restore could not copy the backup: {exc}") from None
    # A backup's secrets may have been made readable by others since (copied by other
    # means, modes changed); `pool serve` and the key loader refuse such modes, so a
    # restore puts them right rather than leave a deployment that cannot start.
    for secret in (TOKENS, KEY, CLAIM_SECRET):
        if (folder / secret).is_file():
            os.chmod(folder / secret, 0o600)
    if mode is not None:
        os.chmod(folder, mode)
    for path in folder.rglob("*"):
        if path.is_file():
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
    record = {
        "at": stamp,
        "backup": str(backup_folder),
        "restored_length": length,
        "head_hex": head.hex(),
        "accepted_loss": bool(lost.lost),
        **lost.to_json(),
    }
    with open(folder / RESTORE_LOG, "wb") as fh:
        fh.write(previous_log + json.dumps(record, sort_keys=True).encode() + b"\n")
        fh.flush()
        os.fsync(fh.fileno())
    fsync_dir(folder)
    key, tokens, to_do = _left_to_do(folder)
    return Restored(lost, key, tokens, to_do)
