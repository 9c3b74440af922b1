"""The default ledger store: one local file, the entries as a CBOR sequence (DESIGN.md §4, §6).

Appends are written, flushed and fsynced before `append` returns, so a verdict that rests
on an entry is never given before the entry is on disk. One writer at a time holds an
exclusive lock; a second is refused. On open, an incomplete final entry (a torn write) is
reported with its byte offset and left alone: only `recover()` truncates it, and nothing
else. An append that fails (a full disk) is cut back to the last whole entry, so nothing
already written is changed by it.
"""

from __future__ import annotations

import bisect
import errno
import fcntl
import itertools
import os
from array import array
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from joulepool.errors import StoreError
from joulepool.files import fsync_dir
from joulepool.ledger.sequence import MAX_ENTRY_BYTES, Tail, split

CHUNK = 4 << 20


class LedgerLocked(StoreError):
    """Another writer holds the ledger file's lock."""

    code = "ledger_locked"


class TornWrite(StoreError):
    """The file ends in an incomplete entry; `pool ledger recover` truncates it."""

    code = "torn_write"

    def __init__(self, path: Path, tail: Tail, index: int) -> None:
        super().__init__(
            f"{path}: entry {index} at byte offset {tail.offset} is incomplete ({tail.length} "
            f"bytes, a torn write); run `pool ledger recover {path}` to truncate it"
        )
        self.offset = tail.offset
        self.index = index


class CorruptLedger(StoreError):
    """Bytes in the file are not a CBOR item at all: no write could have produced them."""

    code = "corrupt_ledger"


class DiskFull(StoreError):
    """An append could not be written; the file was cut back to its last whole entry."""

    code = "disk_full"


@dataclass(frozen=True, slots=True)
class Recovered:
    """What `recover()` did: the offset it truncated at and how many bytes it removed."""

    offset: int
    removed: int
    entries: int


class FileStore:
    """A ledger file (DESIGN.md §4) with one locked writer, or any number of readers."""

    def __init__(
        self, path: str | os.PathLike[str], *, writer: bool = True, create: bool = False
    ) -> None:
        self.path = Path(path)
        self._writer = writer
        self._fsyncs = 0
        flags = os.O_RDWR if writer else os.O_RDONLY
        if create:
            flags |= os.O_CREAT
        try:
            self._fd = os.open(self.path, flags | os.O_CLOEXEC, 0o644)
        except FileNotFoundError:
            raise StoreError(f"{self.path}: no such ledger file") from None
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot open: {exc.strerror}") from None
        try:
            if writer:
                try:
                    fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise LedgerLocked(
                        f"{self.path} is locked by another writer (a running `pool serve` or "
                        "`pool` command); only one process may append to a ledger file"
                    ) from None
                if create:
                    fsync_dir(self.path.parent)
            self._offsets, self._size, self.tail = self._scan()
            if writer and self.tail is not None:
                if self.tail.torn:
                    raise TornWrite(self.path, self.tail, len(self._offsets))
                raise CorruptLedger(
                    f"{self.path}: bytes at offset {self.tail.offset} are not a ledger entry "
                    f"({self.tail.detail}); this is not a torn write and nothing will append to it"
                )
        except BaseException:
            os.close(self._fd)
            raise

    def _scan(self) -> tuple[array[int], int, Tail | None]:
        offsets: array[int] = array("Q")
        size = os.fstat(self._fd).st_size
        base = 0  # the file offset of buf[0]
        buf = b""
        while True:
            chunk = os.pread(self._fd, CHUNK, base + len(buf))
            buf += chunk
            eof = not chunk or base + len(buf) >= size
            found, tail = split(buf)
            offsets.extend(base + o for o in found)
            if tail is None:
                base += len(buf)
                buf = b""
                if eof:
                    return offsets, base, None
                continue
            if tail.torn and not eof and tail.length <= MAX_ENTRY_BYTES:
                # An entry straddles the chunk boundary: read on from its start.
                base += tail.offset
                buf = buf[tail.offset :]
                continue
            at = base + tail.offset
            return offsets, at, Tail(at, size - at, tail.torn, tail.detail)

    @property
    def fsyncs(self) -> int:
        """How many fsyncs this store has made."""
        return self._fsyncs

    @property
    def size(self) -> int:
        """Bytes of whole entries."""
        return self._size

    def __len__(self) -> int:
        return len(self._offsets)

    def offset(self, index: int) -> int:
        """Byte offset of entry `index`."""
        return int(self._offsets[index])

    def _end(self, index: int) -> int:
        return int(self._offsets[index + 1]) if index + 1 < len(self._offsets) else self._size

    def entry(self, index: int) -> bytes:
        """One entry, as stored."""
        if not 0 <= index < len(self._offsets):
            raise StoreError(f"{self.path}: no entry {index}; the ledger has {len(self._offsets)}")
        start = int(self._offsets[index])
        return os.pread(self._fd, self._end(index) - start, start)

    def entries(self, start: int = 0) -> Iterator[bytes]:
        """Every whole entry from index `start`, read in large chunks."""
        count = len(self._offsets)
        i = start
        while i < count:
            first = int(self._offsets[i])
            # Gather entries up to one chunk's worth, then slice them out of one read: those
            # whose next entry starts within the chunk, and the last if the file ends in it.
            limit = first + CHUNK
            j = bisect.bisect_right(self._offsets, limit, i + 1) - 1
            if j == count - 1 and self._size <= limit:
                j = count
            j = max(j, i + 1)
            last = self._end(j - 1)
            buf = os.pread(self._fd, last - first, first)
            bounds = [o - first for o in self._offsets[i:j]]
            bounds.append(last - first)
            for a, b in itertools.pairwise(bounds):
                yield buf[a:b]
            i = j

    @contextmanager
    def writing(self) -> Iterator[FileStore]:
        """The file's lock is held for the store's lifetime: nothing to catch up on."""
        if not self._writer:
            raise StoreError(f"{self.path} was opened read-only")
        yield self

    def unseen(self, known: int) -> list[bytes]:
        """Nothing: the lock makes this the only writer."""
        return list(self.entries(known)) if known < len(self._offsets) else []

    def append(self, raws: Sequence[bytes]) -> None:
        """Write `raws` at the end and fsync them before returning (§6.1).

        On failure the file is cut back to its last whole entry and `DiskFull` (or
        `StoreError`) is raised: no partial entry is left and nothing earlier is touched.
        """
        if not self._writer:
            raise StoreError(f"{self.path} was opened read-only")
        if not raws:
            return
        data = b"".join(raws)
        try:
            written = 0
            while written < len(data):
                written += os.pwrite(self._fd, data[written:], self._size + written)
            os.fdatasync(self._fd)
            self._fsyncs += 1
        except OSError as exc:
            self._cut_back()
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFull(
                    f"{self.path}: no space left to append {len(raws)} entr"
                    f"{'y' if len(raws) == 1 else 'ies'}; nothing was written"
                ) from None
            raise StoreError(
                f"{self.path}: append failed ({exc.strerror}); nothing was written"
            ) from None
        pos = self._size
        for raw in raws:
            self._offsets.append(pos)
            pos += len(raw)
        self._size = pos

    def _cut_back(self) -> None:
        try:
            os.ftruncate(self._fd, self._size)
            os.fsync(self._fd)
        except OSError:
            # The bytes past the last whole entry are a torn write; open reports it.
            pass

    def close(self) -> None:
        """Close the file, releasing its lock."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> FileStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def create(path: str | os.PathLike[str]) -> FileStore:
    """Create an empty ledger file, refusing to overwrite one (DESIGN.md §4)."""
    p = Path(path)
    if p.exists():
        raise StoreError(f"{p} already exists; a ledger is never overwritten")
    return FileStore(p, create=True)


def recover(path: str | os.PathLike[str]) -> Recovered | None:
    """Truncate an incomplete final entry, and nothing else; None if there is none.

    Refuses bytes that are no entry at all, or a tail longer than any entry could be:
    truncating those could discard whole entries, which is not recovering a torn write.
    """
    p = Path(path)
    store = FileStore(p, writer=False)
    try:
        tail, count = store.tail, len(store)
    finally:
        store.close()
    if tail is None:
        return None
    if not tail.torn:
        raise CorruptLedger(
            f"{p}: bytes at offset {tail.offset} are not an entry ({tail.detail}); this is not "
            "a torn write, and recover truncates only an incomplete final entry"
        )
    if tail.length > MAX_ENTRY_BYTES:
        raise CorruptLedger(
            f"{p}: the incomplete tail at offset {tail.offset} is {tail.length} bytes, longer "
            "than any entry; refusing to truncate what may be more than one entry"
        )
    fd = os.open(p, os.O_RDWR | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LedgerLocked(f"{p} is locked by a running writer; stop it first") from None
        os.ftruncate(fd, tail.offset)
        os.fsync(fd)
    finally:
        os.close(fd)
    return Recovered(tail.offset, tail.length, count)
