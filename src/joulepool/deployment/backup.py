"""Backups of a deployment, and what restoring one loses (standard §6.1; DESIGN.md §4).

A backup is a deployment folder of its own, consistent at one ledger length: the entries up
to the last whole one when it was taken (it can be taken beside a running `pool serve`), a
high-water record at exactly that length and head, the state snapshots not past it, the
rotation statements, the kept witness receipts, pool.toml, tokens.toml (hashes only) and the
steward's first public key. The secret key is left out unless asked for: a backup is often
kept where the key must not be. The copy is verified (replayed) before it is called done.

Restoring a backup older than what the deployment acknowledged is exactly a rollback: the
acknowledged entries past the backup are lost, and each tenant's usage falls by what they
charged. `restore` says which entries and by how much, and proceeds only when told to
(`accept_loss`); the decision is appended to the deployment's `restore.log`.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from joulepool.deployment.config import CONFIG, KEY, LEDGER, PUBLIC_KEY, TOKENS, WITNESSES
from joulepool.deployment.keys import ROTATIONS
from joulepool.errors import InvalidInput, PoolError, StoreError
from joulepool.files import fsync_dir
from joulepool.ledger.cose import GENESIS, content_address
from joulepool.ledger.rollback import HighWater
from joulepool.ledger.snapshot import SnapshotFolder
from joulepool.stores.claim_index import index_path, open_index
from joulepool.stores.file import FileStore, LedgerLocked, lock_holder
from joulepool.stores.highwater import HighWaterFile, record_path

RESTORE_LOG = "restore.log"


class RestoreWouldLose(PoolError):
    """Restoring would lose acknowledged entries, and `accept_loss` was not given (§6.1)."""

    code = "restore_loses_entries"

    def __init__(self, loss: Loss) -> None:
        super().__init__(loss.sentence())
        self.loss = loss


@dataclass(frozen=True, slots=True)
class Loss:
    """What a restore gives up: acknowledged entries past the backup, and usage (§6.1)."""

    backup_length: int
    acknowledged: int
    entries: list[dict[str, Any]] = field(default_factory=list)
    usage_falls: dict[str, dict[str, int]] = field(default_factory=dict)
    known: bool = True

    @property
    def lost(self) -> int:
        """How many acknowledged entries the restore gives up."""
        return max(0, self.acknowledged - self.backup_length)

    def sentence(self) -> str:
        """The loss in one sentence for people."""
        if not self.lost:
            return "the backup holds everything the deployment acknowledged: nothing is lost"
        what = (
            ", ".join(
                f"{ent} by {f['spent_uj']:,} µJ" for ent, f in sorted(self.usage_falls.items())
            )
            if self.known
            else "unknown (the deployment's own ledger is gone or does not share the backup's "
            "history)"
        )
        return (
            f"the deployment acknowledged {self.acknowledged} entries, the backup holds "
            f"{self.backup_length}: restoring loses entries {self.backup_length} to "
            f"{self.acknowledged - 1}; usage falls: {what or 'nowhere'}"
        )

    def to_json(self) -> dict[str, Any]:
        """The loss as the CLI's `--json` reports it."""
        return {
            "backup_length": self.backup_length,
            "acknowledged": self.acknowledged,
            "lost": self.lost,
            "entries": self.entries,
            "usage_falls": self.usage_falls if self.known else None,
        }


def _copy_file(src: Path, dst: Path, mode: int | None = None) -> None:
    shutil.copyfile(src, dst)
    if mode is not None:
        os.chmod(dst, mode)
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
        out.mkdir(parents=True, mode=0o755)
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
    for name in (CONFIG, PUBLIC_KEY, TOKENS):
        if (folder / name).is_file():
            _copy_file(folder / name, out / name)
    if with_secret_key:
        _copy_file(folder / KEY, out / KEY, 0o600)
    _copy_tree(folder / ROTATIONS, out / ROTATIONS)
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


def loss(backup_folder: Path, folder: Path) -> tuple[Loss, int, bytes]:
    """What restoring `backup_folder` over the deployment `folder` loses (§6.1), and the
    backup's verified length and head."""
    from joulepool.deployment.open import open_pool
    from joulepool.events import Admitted
    from joulepool.ledger.cose import open_envelope
    from joulepool.ledger.entry import event_of

    saved = open_pool(backup_folder, read_only=True)
    try:
        length, head, usage_before = saved.length, saved.head, _usage_of(saved)
    finally:
        saved.close()
    if not (folder / LEDGER).exists():
        high = HighWaterFile.open(record_path(folder / LEDGER), writable=False)
        acknowledged = high.point.length if high is not None else length
        return Loss(length, max(acknowledged, length), known=high is None), length, head
    try:
        current = open_pool(folder, read_only=True)
    except PoolError:
        # The deployment's own ledger does not open: only its record says what was acked.
        high = HighWaterFile.open(record_path(folder / LEDGER), writable=False)
        acknowledged = high.point.length if high is not None else 0
        return Loss(length, max(acknowledged, length), known=False), length, head
    try:
        high_point = current.store.high_water()
        acknowledged = max(current.length, high_point.length if high_point else 0)
        if acknowledged <= length:
            return Loss(length, acknowledged), length, head
        if length > current.length or current.head_at(length) != head:
            return Loss(length, acknowledged, known=False), length, head
        entries = []
        for seq, raw in enumerate(current.entries(length), length):
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
    finally:
        current.close()
    falls = {}
    for ent, figures in after.items():
        before = usage_before.get(ent, {"spent_uj": 0, "held_devices": 0})
        drop = {k: figures[k] - before[k] for k in figures}
        if any(drop.values()):
            falls[ent] = drop
    return Loss(length, acknowledged, entries, falls), length, head


def restore(backup_folder: Path, folder: Path, *, accept_loss: bool = False) -> Loss:
    """Put a backup in place as the deployment `folder` (§6.1).

    Refuses (`RestoreWouldLose`, nothing changed) when the deployment acknowledged entries
    the backup lacks, unless `accept_loss`; then the loss is logged in `restore.log`. The
    folder being replaced is kept beside it as `<folder>.replaced-<time>`, never deleted.
    """
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
    lost, length, head = loss(backup_folder, folder)
    if lost.lost and not accept_loss:
        raise RestoreWouldLose(lost)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    previous_log = b""
    if folder.exists():
        if (folder / RESTORE_LOG).exists():
            previous_log = (folder / RESTORE_LOG).read_bytes()
        aside = folder.with_name(f"{folder.name}.replaced-{stamp}")
        os.rename(folder, aside)
    try:
        shutil.copytree(backup_folder, folder)
    except OSError as exc:
        raise StoreError(f"{folder}: the restore could not copy the backup: {exc}") from None
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
    return lost
