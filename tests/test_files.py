"""Files replaced whole (key files, token lists, Slurm configuration; DESIGN.md §4)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from joulepool.files import write_atomically
from tests.support.disks import fill, tmpfs


@pytest.mark.parametrize("mode", [0o600, 0o644, 0o755])
def test_the_file_has_the_mode_asked_for_whatever_the_umask(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "f"
    old = os.umask(0o077 if mode != 0o600 else 0o000)
    try:
        write_atomically(path, b"data", mode)
    finally:
        os.umask(old)
    assert path.read_bytes() == b"data"
    assert path.stat().st_mode & 0o777 == mode


def test_an_existing_file_is_replaced_whole_and_nothing_is_left_beside_it(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"old" * 1000)
    write_atomically(path, b"new", 0o644)
    assert path.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_a_write_into_a_missing_folder_raises_and_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_atomically(tmp_path / "absent" / "f", b"x", 0o644)
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "disk", "256k") as mount:
        yield mount


def test_a_full_disk_leaves_the_old_file_and_no_temporary_one(small_disk: Path) -> None:
    path = small_disk / "f"
    write_atomically(path, b"old", 0o600)
    filler = fill(small_disk)
    with pytest.raises(OSError, match="No space left"):
        write_atomically(path, b"n" * 100_000, 0o600)
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in small_disk.iterdir()) == ["f", "filler"]
    filler.unlink()
    write_atomically(path, b"n" * 100_000, 0o600)  # room again: it goes through
    assert path.read_bytes() == b"n" * 100_000
