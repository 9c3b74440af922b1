"""Files replaced whole: after a crash a reader finds the old file or the new one, never a
mix, with the mode asked for (key files, token lists, Slurm configuration)."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path


def write_atomically(path: Path, data: bytes, mode: int) -> None:
    """Write `data` to `path` through a temporary file beside it, fsynced, then renamed over
    `path`, and the folder fsynced so the rename lasts. Raises OSError; then `path` is as it
    was and no temporary file is left.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    # O_EXCL: never write through a file (or a link) that someone else put at this name.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        try:
            os.fchmod(fd, mode)  # the umask must not loosen or tighten what was asked
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)


def fsync_dir(folder: Path) -> None:
    """Make a file created, renamed or removed in `folder` survive a crash."""
    fd = os.open(folder if str(folder) else Path("."), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_DSYNC = getattr(os, "RWF_DSYNC", None)


def write_durably(fd: int, data: bytes, offset: int) -> None:
    """Write all of `data` at `offset` and make it durable, as pwrite then fdatasync would.

    Where the kernel has `RWF_DSYNC` (Linux 4.7), write and sync are one system call: a
    thread that gives up the interpreter lock for each call waits to take it back from a
    busy event loop, and the group commit paid that wait twice per append and twice per
    high-water record.
    """
    view = memoryview(data)
    if _DSYNC is not None:
        try:
            while view:
                written = os.pwritev(fd, [view], offset, _DSYNC)
                view, offset = view[written:], offset + written
            return
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL) or len(view) < len(data):
                raise
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written
    os.fdatasync(fd)
