"""The high-water record of a ledger file: the longest (length, head) it acknowledged (§6.1).

Kept beside the ledger, never inside it, so that a ledger file cut short, or replaced by a
stale copy, cannot also carry away the evidence of what it held. The writer updates it after
each append is fsynced and before any verdict resting on that append is answered, so the
record never runs ahead of the ledger and never lags what a client was told.

Layout: two fixed 128-byte slots, written alternately in place and fsynced. A slot is

    magic (8) | length (8, big-endian) | head (32) | SHA-256 of the preceding 48 bytes (32)

and zero padding. A torn write can damage only the slot being written; the other still holds
the previous record, which is never ahead of the ledger. Reading takes the longest slot that
passes its checksum; a file where none does is refused, never read as "no record".
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Final

from joulepool.errors import DiskFull, StoreError, no_space
from joulepool.files import fsync_dir, write_durably
from joulepool.ledger.cose import GENESIS
from joulepool.ledger.rollback import HighWater, HighWaterUnreadable

MAGIC: Final = b"pool-hw1"
SLOT: Final = 128
_BODY: Final = len(MAGIC) + 8 + 32
SUFFIX: Final = ".hwm"


def record_path(ledger: Path) -> Path:
    """Where the high-water record of the ledger file `ledger` lives: beside it."""
    return ledger.with_name(ledger.name + SUFFIX)


def _slot(point: HighWater) -> bytes:
    body = MAGIC + point.length.to_bytes(8, "big") + point.head
    return (body + hashlib.sha256(body).digest()).ljust(SLOT, b"\0")


def _parse(slot: bytes) -> HighWater | None:
    body, digest = slot[:_BODY], slot[_BODY : _BODY + 32]
    if len(digest) != 32 or not body.startswith(MAGIC) or hashlib.sha256(body).digest() != digest:
        return None
    return HighWater(int.from_bytes(body[8:16], "big"), body[16:48])


class HighWaterFile:
    """An open high-water record: read once, then updated in place after each append."""

    def __init__(self, path: Path, fd: int, point: HighWater, next_slot: int) -> None:
        self.path = path
        self._fd = fd
        self.point = point
        self._next = next_slot

    @classmethod
    def open(cls, path: Path, *, writable: bool) -> HighWaterFile | None:
        """The record at `path`, or None where there is none; refuses an unreadable one."""
        try:
            fd = os.open(path, (os.O_RDWR if writable else os.O_RDONLY) | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"{path}: cannot open the high-water record: {exc.strerror}") from None
        try:
            data = os.pread(fd, 2 * SLOT + 1, 0)
            if len(data) > 2 * SLOT:
                raise HighWaterUnreadable(f"{path}: longer than a high-water record can be")
            slots = [_parse(data[i * SLOT : (i + 1) * SLOT]) for i in (0, 1)]
            found = [(p.length, i, p) for i, p in enumerate(slots) if p is not None]
            if not found:
                raise HighWaterUnreadable(
                    f"{path}: no copy of the high-water record passes its checksum, so what "
                    "this ledger acknowledged is unknown; if the ledger is known to be whole, "
                    "`pool ledger acknowledge` writes the record again"
                )
            _, newest, point = max(found)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, point, 1 - newest)

    @classmethod
    def create(cls, path: Path, point: HighWater | None = None) -> HighWaterFile:
        """A new record at `path` (refusing to replace one), both slots holding `point`."""
        point = point or HighWater(0, GENESIS)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            raise StoreError(
                f"{path} already exists; a high-water record is never replaced"
            ) from None
        except OSError as exc:
            raise StoreError(
                f"{path}: cannot create the high-water record: {exc.strerror}"
            ) from None
        try:
            write_durably(fd, _slot(point) * 2, 0)
            fsync_dir(path.parent)
        except OSError as exc:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise _store_error(path, exc) from None
        return cls(path, fd, point, 0)

    def advance(self, point: HighWater) -> None:
        """Record `point` durably; a point not beyond the current one changes nothing."""
        if point.length <= self.point.length:
            return
        self._write(self._next, point)
        self._next = 1 - self._next

    def reset(self, point: HighWater) -> None:
        """Record `point` in both slots, even below the current one (an accepted loss)."""
        self._write(0, point)
        self._write(1, point)

    def _write(self, slot: int, point: HighWater) -> None:
        try:
            write_durably(self._fd, _slot(point), slot * SLOT)
        except OSError as exc:
            raise _store_error(self.path, exc) from None
        self.point = point

    def close(self) -> None:
        """Close the record's file."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _store_error(path: Path, exc: OSError) -> StoreError:
    if no_space(exc):
        return DiskFull(f"{path}: no space left to write the high-water record")
    return StoreError(f"{path}: writing the high-water record failed ({exc.strerror})")
