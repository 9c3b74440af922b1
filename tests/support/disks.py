"""Small real disks for full-disk tests: ENOSPC comes from the kernel, never from a mock."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def tmpfs(mount: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (mount's syntax: "256k", "1m") mounted at `mount` for the block.

    Skips the test where mounting is impossible (not root, or not permitted); CI runs as
    root, and fails on any skip.
    """
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (run as root, as CI does)")
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {proc.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> Path:
    """Fill every free block of the disk with a file; return it (deleting it frees the space)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (65536, 4096, 512, 1):
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError:
                    break
    finally:
        os.close(fd)
    return filler
