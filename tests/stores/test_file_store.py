"""The ledger file store: fsynced appends, one writer, torn writes reported and recovered
only by the documented command, a full disk damaging nothing (DESIGN.md §4, §6)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import cbor2
import pytest

from joulepool.ledger.cose import content_address, envelope_bytes, protected_header
from joulepool.stores.file import (
    CorruptLedger,
    DiskFull,
    FileStore,
    LedgerLocked,
    TornWrite,
    create,
    recover,
)
from tests.support.disks import fill, tmpfs


def entry(i: int, size: int = 40) -> bytes:
    """An entry-shaped item (a COSE_Sign1 envelope): the store never opens it, but tells a
    torn write by that shape. Entry i of the default size is 122 bytes."""
    payload = bytes(cbor2.dumps([i, b"e" * size]))
    return envelope_bytes(protected_header("s"), payload, bytes(64))


def test_append_then_reopen_reads_every_entry_back(tmp_path: Path) -> None:
    path = tmp_path / "ledger.cbor"
    with create(path) as store:
        store.append([entry(0), entry(1)])
        store.append([entry(2)])
        assert len(store) == 3
        assert store.fsyncs == 2
    with FileStore(path, writer=False) as again:
        assert list(again.entries()) == [entry(0), entry(1), entry(2)]
        assert again.entry(1) == entry(1)
        assert list(again.entries(2)) == [entry(2)]
    assert path.read_bytes() == entry(0) + entry(1) + entry(2)


def test_entries_stream_across_chunk_boundaries(tmp_path: Path) -> None:
    path = tmp_path / "ledger.cbor"
    big = [entry(i, 50_000) for i in range(200)]  # ~10 MB, several 4 MiB chunks
    with create(path) as store:
        store.append(big)
    with FileStore(path, writer=False) as again:
        assert len(again) == 200
        assert list(again.entries()) == big


@pytest.mark.parametrize("chunk", [1, 121, 122, 123, 300, 10_000])
def test_entries_are_whole_whatever_the_chunk_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    # Entry i is 122 bytes; a chunk smaller than one entry still yields it whole.
    path = tmp_path / "ledger.cbor"
    many = [entry(i) for i in range(30)]
    with create(path) as store:
        store.append(many)
    monkeypatch.setattr("joulepool.stores.file.CHUNK", chunk)
    with FileStore(path, writer=False) as again:
        assert list(again.entries()) == many
        assert list(again.entries(29)) == many[29:]
        assert list(again.entries(7)) == many[7:]


def test_a_second_writer_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ledger.cbor"
    with create(path), pytest.raises(LedgerLocked, match="locked by another writer"):
        FileStore(path)


def test_a_second_writer_in_another_process_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ledger.cbor"
    code = "import sys; from joulepool.stores.file import FileStore; FileStore(sys.argv[1])"
    with create(path):
        proc = subprocess.run(
            [sys.executable, "-c", code, str(path)],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")},
        )
    assert proc.returncode != 0
    assert "LedgerLocked" in proc.stderr


def test_a_torn_final_entry_is_reported_with_its_offset_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "ledger.cbor"
    whole = entry(0) + entry(1)
    path.write_bytes(whole + entry(2)[:-7])
    with pytest.raises(TornWrite) as info:
        FileStore(path)
    assert info.value.offset == len(whole)
    assert info.value.index == 2
    assert "pool ledger recover" in str(info.value)
    assert path.read_bytes() == whole + entry(2)[:-7]  # left alone
    with FileStore(path, writer=False) as reader:
        assert len(reader) == 2
        assert reader.tail is not None and reader.tail.torn


def test_recover_truncates_the_torn_entry_and_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "ledger.cbor"
    whole = entry(0) + entry(1)
    path.write_bytes(whole + entry(2)[:5])
    done = recover(path)
    assert done is not None
    assert (done.offset, done.removed, done.entries) == (len(whole), 5, 2)
    assert path.read_bytes() == whole
    assert recover(path) is None
    with FileStore(path) as store:
        assert len(store) == 2


def test_recover_refuses_bytes_that_are_no_entry(tmp_path: Path) -> None:
    path = tmp_path / "ledger.cbor"
    path.write_bytes(entry(0) + b"\xfc\x00\x00")
    with pytest.raises(CorruptLedger, match="not a torn write"):
        recover(path)
    assert path.read_bytes() == entry(0) + b"\xfc\x00\x00"
    with pytest.raises(CorruptLedger):
        FileStore(path)


def test_create_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "ledger.cbor"
    path.write_bytes(entry(0))
    with pytest.raises(Exception, match="already exists"):
        create(path)
    assert path.read_bytes() == entry(0)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 1 MiB tmpfs, so that ENOSPC comes from the kernel, not from a mock."""
    with tmpfs(tmp_path / "disk", "1m") as mount:
        yield mount


def test_a_full_disk_refuses_the_append_and_damages_nothing(small_disk: Path) -> None:
    path = small_disk / "ledger.cbor"
    with create(path) as store:
        store.append([entry(i, 1000) for i in range(10)])
        before = path.read_bytes()
        filler = fill(small_disk)  # less than one entry's room is left
        with pytest.raises(DiskFull, match="nothing was written"):
            store.append([entry(100, 50_000)])
        assert len(store) == 10
        assert path.read_bytes() == before
        filler.unlink()
        store.append([entry(11, 1000)])  # space freed: appends again, same store, no restart
        assert len(store) == 11
    with FileStore(path) as again:
        assert list(again.entries())[-1] == entry(11, 1000)
        assert again.tail is None


def thirty_entries(tmp_path: Path) -> tuple[Path, list[bytes], tuple[int, int]]:
    """A ledger file of 30 entries, its entries, and where entry 19 lies (a snapshot at 20)."""
    path = tmp_path / "ledger.cbor"
    many = [entry(i) for i in range(30)]
    with create(path) as store:
        store.append(many)
        return path, many, store.bounds(19)


def _spy_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int]]:
    """Record every (file descriptor, offset, size) read, through the real os.pread."""
    seen: list[tuple[int, int, int]] = []
    real = os.pread

    def pread(fd: int, size: int, offset: int) -> bytes:
        seen.append((fd, offset, size))
        return real(fd, size, offset)

    monkeypatch.setattr("joulepool.stores.file.os.pread", pread)
    return seen


def test_design_s4_resume_reads_only_after_the_snapshot_and_the_rest_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start from a state snapshot reads only the entries after it: the hint
    names entry 19's bytes; nothing before them is read until an older entry is asked for,
    and then the whole file is scanned once and every answer is the same."""
    path, many, (start, end) = thirty_entries(tmp_path)
    seen = _spy_reads(monkeypatch)
    with FileStore(path, deferred=True) as again:
        assert not again.resume(20, start, end, content_address(many[18]))
        assert again.resume(20, start, end, content_address(many[19]))
        assert len(again) == 30
        assert list(again.entries(20)) == many[20:]
        assert again.entry(19) == many[19]
        ledger = [offset for fd, offset, _ in seen if fd == again._fd]
        assert min(ledger) == start
        again.append([entry(30)])
        assert again.entry(30) == entry(30)
        assert again.entry(3) == many[3]  # asks for the past: one scan from byte 0
        assert min(offset for fd, offset, _ in seen if fd == again._fd) == 0
        assert list(again.entries()) == [*many, entry(30)]
        assert len(again) == 31


@pytest.mark.parametrize(
    "hint",
    [
        lambda s, e: (20, s + 1, e),  # not the start of an entry
        lambda s, e: (20, s, e + 1),  # two entries' bytes, or part of one
        lambda s, e: (20, s, e - 1),  # a part of one
        lambda s, e: (20, s, 10**9),  # past the end of the file
        lambda s, e: (0, s, e),  # no entry before length 0
    ],
)
def test_design_s4_a_resume_hint_that_is_not_one_whole_entry_is_not_taken(
    tmp_path: Path, hint: object
) -> None:
    path, many, (start, end) = thirty_entries(tmp_path)
    assert callable(hint)
    length, first, last = hint(start, end)
    with FileStore(path, deferred=True) as again:
        assert not again.resume(length, first, last, content_address(many[19]))
        assert list(again.entries()) == many
        assert len(again) == 30


def test_design_s4_a_resumed_writer_still_refuses_damage_after_the_last_entry(
    tmp_path: Path,
) -> None:
    """The hint never hides a torn write: the scan after it finds one, the hint is not
    taken, and the full scan refuses the file as an ordinary open does."""
    path = tmp_path / "ledger.cbor"
    with create(path) as store:
        store.append([entry(i) for i in range(5)])
        start, end = store.bounds(2)
    with path.open("ab") as f:
        f.write(entry(5)[:-7])
    store = FileStore(path, deferred=True)
    try:
        assert not store.resume(3, start, end, content_address(entry(2)))
        with pytest.raises(TornWrite) as info:
            len(store)
        assert info.value.index == 5
    finally:
        store.close()


def test_design_s4_the_past_read_while_appends_go_on_loses_no_offset(tmp_path: Path) -> None:
    """The offsets before a snapshot are read in the request that first needs them, while
    the writer appends: each append lands once, after the past, whatever the interleaving."""
    import threading

    path = tmp_path / "ledger.cbor"
    many = [entry(i, 2000) for i in range(3000)]  # ~6 MB: the past takes a while to read
    with create(path) as store:
        store.append(many)
        start, end = store.bounds(2999)
    later = [entry(3000 + i) for i in range(400)]
    with FileStore(path, deferred=True) as again:
        assert again.resume(3000, start, end, content_address(many[2999]))

        def appender() -> None:
            for i in range(0, 400, 4):
                again.append(later[i : i + 4])

        thread = threading.Thread(target=appender)
        thread.start()
        assert again.entry(5) == many[5]  # reads the past meanwhile
        seen = list(again.entries(2990))
        thread.join()
        assert seen == [*many[2990:], *later[: len(seen) - 10]]
        assert list(again.entries()) == [*many, *later]
        assert len(again) == 3400


def test_design_s4_a_past_that_changed_under_a_snapshot_is_damage_not_a_guess(
    tmp_path: Path,
) -> None:
    path, many, (start, end) = thirty_entries(tmp_path)
    data = bytearray(path.read_bytes())
    data[len(many[0])] ^= 0xFF  # entry 1 no longer starts as an entry
    path.write_bytes(bytes(data))
    with FileStore(path, writer=False, deferred=True) as again:
        assert again.resume(20, start, end, content_address(many[19]))
        assert list(again.entries(20)) == many[20:]
        with pytest.raises(CorruptLedger, match="are not 19 whole entries"):
            again.entry(1)
