"""A deployment's steward keys over time: the trust anchor, the rotation statements and the
key in force (DESIGN.md §4, "key rotation").

On disk, in a deployment folder:

- `steward.pub`: the trust anchor, the steward's first public key; it never changes.
- `rotations/NNNNNNNN.cose`: the rotation statements, in order (the number is the
  statement's position), each written atomically before the key it names signs anything.
- `steward.key`: the secret key in force now.
- `steward.key.next`: a new key that `pool keys rotate` made and that is not in force yet.

Putting a pending key in force happens under the ledger's writer lock, at the ledger's
length: the statement (signed by the outgoing key, `from_seq` = that length) is made
durable first, then `steward.key` is replaced by the incoming key and the pending file goes.
A crash between the two leaves a statement whose key is `steward.key.next`; the next start
finishes the swap. Nothing else ever replaces `steward.key`.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from joulepool.errors import KeyFileError, PoolError
from joulepool.files import fsync_dir, write_atomically
from joulepool.ledger.keys import KeyPair, load_key_file, write_key_file
from joulepool.ledger.rotation import KeySchedule, RotationRefused, seal_rotation

if TYPE_CHECKING:
    from joulepool.pool import Pool

ROTATIONS = "rotations"
NEXT_KEY = "steward.key.next"
_NAME = re.compile(r"^[0-9]{8}\.cose$")
MAX_STATEMENT_BYTES = 4096


def read_numbered(
    folder: Path, max_bytes: int, refuse: Callable[[int, str], PoolError], what: str
) -> list[bytes]:
    """The signed statements kept in `folder` as `NNNNNNNN.cose`, in order; none if it does
    not exist. A file of another name, a gap in the numbering, or one over `max_bytes` refuses
    the whole set: `refuse(position, why)` (DESIGN.md §4, docs/reliability.md §18)."""
    if not folder.is_dir():
        return []
    names = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
    out: list[bytes] = []
    for position, name in enumerate(names):
        if not _NAME.match(name) or int(name[:8]) != position:
            raise refuse(
                position, f"{folder / name}: expected {position:08d}.cose, statements in order"
            )
        path = folder / name
        try:
            if path.stat().st_size > max_bytes:
                raise refuse(position, f"{path}: larger than any {what}")
            out.append(path.read_bytes())
        except OSError as exc:
            raise refuse(position, f"{path}: cannot read: {exc.strerror}") from None
    return out


def read_statements(folder: Path) -> list[bytes]:
    """The rotation statements kept in `folder` (a `rotations/` folder), in order
    (`read_numbered`; `RotationRefused` at the position that fails, DESIGN.md §4)."""
    return read_numbered(folder, MAX_STATEMENT_BYTES, RotationRefused, "rotation statement")


def key_schedule(folder: Path, anchor: KeyPair) -> KeySchedule:
    """The deployment's verified key schedule: `anchor` (its `steward.pub`) and every
    statement under `rotations/` (DESIGN.md §4); `RotationRefused` if one fails."""
    return KeySchedule.verified(anchor.kid, anchor.public_key, read_statements(folder / ROTATIONS))


def statements_for(ledger: Path, anchor: KeyPair, given: Path | None = None) -> KeySchedule:
    """The key schedule of a ledger file: the statements in `given` (a `rotations/` folder),
    else in the `rotations/` beside the file (DESIGN.md §4)."""
    folder = given if given is not None else ledger.parent / ROTATIONS
    return KeySchedule.verified(anchor.kid, anchor.public_key, read_statements(folder))


def write_statement(folder: Path, position: int, raw: bytes) -> None:
    """Keep statement `position` durably under `folder/rotations/` before it is in force."""
    target = folder / ROTATIONS
    if not target.is_dir():
        target.mkdir(mode=0o755)
        fsync_dir(folder)
    path = target / f"{position:08d}.cose"
    if path.exists():
        raise PoolError(f"{path} exists; a rotation statement is never overwritten")
    write_atomically(path, raw, 0o644)


def write_statements(folder: Path, statements: list[bytes]) -> None:
    """Write `statements` as a `rotations/`-shaped folder (`NNNNNNNN.cose` in order), each
    file whole or not at all; for exports and backups that travel without the deployment."""
    folder.mkdir(mode=0o755, parents=True, exist_ok=True)
    for old in folder.iterdir():
        if _NAME.match(old.name):  # a replaced export's statements: none may outlive it
            old.unlink()
    for position, raw in enumerate(statements):
        write_atomically(folder / f"{position:08d}.cose", raw, 0o644)
    fsync_dir(folder)


def key_in_force(folder: Path, schedule: KeySchedule) -> KeyPair:
    """The secret key that must seal the next entry: `steward.key`, or a pending key whose
    statement was already written when a crash stopped the swap (which this finishes)."""
    key = load_key_file(folder / "steward.key", require_secret=True)
    if key.public_key == schedule.current_key:
        return key
    pending = folder / NEXT_KEY
    if pending.exists():
        incoming = load_key_file(pending, require_secret=True)
        if incoming.public_key == schedule.current_key:
            _swap(folder, incoming)
            return incoming
    raise KeyFileError(
        f"{folder / 'steward.key'} is not the key the rotation statements put in force "
        f"(public {schedule.current_key.hex()}); restore the key in force, or the "
        "rotation statements, from a backup"
    )


def _swap(folder: Path, incoming: KeyPair) -> None:
    write_key_file(folder / "steward.key", incoming, overwrite=True)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(folder / NEXT_KEY)
    fsync_dir(folder)


def pending_key(folder: Path) -> KeyPair | None:
    """The key `pool keys rotate` made and that is not in force yet, if any."""
    path = folder / NEXT_KEY
    return load_key_file(path, require_secret=True) if path.exists() else None


def put_in_force(
    folder: Path, schedule: KeySchedule, outgoing: KeyPair, incoming: KeyPair, length: int
) -> bytes:
    """Rotate from `outgoing` to `incoming` at ledger length `length` (DESIGN.md §4): the
    statement is sealed, verified as a verifier would, and made durable, then `steward.key`
    is replaced. The caller holds the ledger's writer lock, so no entry falls between.
    Returns the statement. Refuses (changing nothing) when no entry was sealed since the
    last rotation, since `from_seq` must move forward."""
    last = schedule.last_from_seq
    if last is not None and length <= last:
        raise PoolError(
            f"no entry has been sealed since the last rotation (from entry {last}); a "
            "rotation takes effect from the next entry, so the pending key waits for one"
        )
    raw = seal_rotation(outgoing, length, incoming.public_key)
    trial = KeySchedule.verified(schedule.steward, schedule.first_key, schedule.statements)
    trial.add(raw)
    write_statement(folder, len(schedule.statements), raw)
    schedule.add(raw)
    _swap(folder, incoming)
    return raw


def deployment_keys(folder: Path, *, read_only: bool = False) -> tuple[KeyPair, KeySchedule]:
    """The key a deployment seals with (its public half only, for a reader) and its
    verified key schedule, from the anchor `steward.pub` and `rotations/` (DESIGN.md §4)."""
    anchor = load_key_file(folder / "steward.pub")
    schedule = key_schedule(folder, anchor)
    if read_only:
        return KeyPair(anchor.kid, schedule.current_key, None), schedule
    return key_in_force(folder, schedule), schedule


def rotate_pending(folder: Path, pool: Pool) -> int | None:
    """Put the pending key (`steward.key.next`) in force in a running pool, from its next
    entry (DESIGN.md §4): at start, and on SIGHUP in `pool serve`. Returns the statement's
    `from_seq`, or None when no key is pending; raises `PoolError` (nothing changed) when
    no entry was sealed since the last rotation."""
    incoming = pending_key(folder)
    if incoming is None:
        return None
    if incoming.kid != pool.steward:
        raise KeyFileError(
            f"{folder / NEXT_KEY}: its kid {incoming.kid!r} is not the steward {pool.steward!r}"
        )

    def put(length: int) -> KeyPair:
        put_in_force(folder, pool.keys, pool.key, incoming, length)
        return incoming

    return pool.rotate_key(put, incoming.public_key)
