"""The default ledger store: one local file, the entries as a CBOR sequence (DESIGN.md §4, §6).

Appends are written, flushed and fsynced before `append` returns, so a verdict that rests
on an entry is never given before the entry is on disk; then the high-water record beside
the file (`stores.highwater`) is advanced, so what was acknowledged outlives a file cut
short. One writer at a time holds an exclusive lock; a second is refused. On open, bytes
after the last whole entry are a torn write only when they can be the start of one entry
that was never acknowledged (`sequence.not_torn`); anything else is corruption at that
entry's index. Only `recover()` truncates, and only a torn write. An append that fails (a
full disk) is cut back to the last whole entry, so nothing already written is changed by it.

The writer's lock can be taken before the file is read (`LedgerLock`), so a second writer
is refused at once, naming the process that holds it. `ready()` says whether the next
append can be expected to succeed, for a readiness probe: it fails (`DiskFull`) while the
ledger's filesystem has less than `MIN_FREE_BYTES` free, and after an append found no space
until an allocation of that append's size succeeds again (which also sees a full quota).
"""

from __future__ import annotations

import bisect
import fcntl
import itertools
import os
import threading
from array import array
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from joulepool.errors import DiskFull as DiskFull
from joulepool.errors import StoreError, no_space
from joulepool.files import fsync_dir, write_durably
from joulepool.ledger.cose import content_address
from joulepool.ledger.rollback import HighWater
from joulepool.ledger.sequence import LONGEST_SEALED, MAX_ENTRY_BYTES, Tail, not_torn, split
from joulepool.stores.base import EntryOffsets, SharedLedger
from joulepool.stores.highwater import HighWaterFile, record_path
from joulepool.stores.offset_table import (
    EVERY,
    binding,
    bound_table,
    checkpoints,
    find_entry,
    table_path,
    write_table,
)

CHUNK = 4 << 20
MIN_FREE_BYTES = 64 << 10
"""Below this much free space on the ledger's filesystem, `ready()` says the disk is full:
room for about 200 entries, and small enough for the 256 KiB test disk to start ready."""
PROBE_SUFFIX = ".space-probe"


class LedgerLocked(StoreError):
    """Another writer holds the ledger file's lock; `holder` is its pid where Linux says."""

    code = "ledger_locked"

    def __init__(self, detail: str, holder: int | None = None) -> None:
        super().__init__(detail)
        self.holder = holder


def lock_holder(fd: int) -> int | None:
    """The pid holding a flock on the file open at `fd`, from Linux's /proc/locks; None
    where that cannot be told (another system, or the lock went away meanwhile)."""
    st = os.fstat(fd)
    want = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    for line in lines:
        # "1: FLOCK  ADVISORY  WRITE 1234 00:2d:5678 0 EOF"; "1: -> FLOCK ..." is a waiter.
        fields = line.split()
        if len(fields) < 6 or "->" in fields or fields[1] != "FLOCK":
            continue
        try:
            major, minor, inode = fields[5].split(":")
            found = (int(major, 16), int(minor, 16), int(inode))
            pid = int(fields[4])
        except ValueError:
            continue
        if found == want:
            return pid
    return None


def _take_lock(fd: int, path: Path) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = lock_holder(fd)
        who = f"pid {holder}" if holder is not None else "another process"
        raise LedgerLocked(
            f"{path} is locked by another writer ({who}: a running `pool serve` or `pool` "
            "command); only one process may append to a ledger file",
            holder,
        ) from None


class LedgerLock:
    """The writer's lock on a ledger file, taken before the file is read: `pool serve`
    takes it at start, so a second one on the same folder is refused at once (naming the
    holder) instead of replaying in the background and never becoming ready. Handed to
    `FileStore(path, lock=...)`, which then owns it."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            raise StoreError(f"{self.path}: no such ledger file") from None
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot open: {exc.strerror}") from None
        try:
            _take_lock(fd, self.path)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def take(self) -> int:
        """The open, locked descriptor, for a store that from now on owns it."""
        fd, self._fd = self._fd, -1
        if fd < 0:
            raise StoreError(f"{self.path}: this lock was already handed over or released")
        return fd

    def release(self) -> None:
        """Close the descriptor unless a store took it, releasing the lock."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


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
    """Bytes after the last whole entry that no unfinished append could have left."""

    code = "corrupt_ledger"

    def __init__(self, detail: str, index: int | None = None, offset: int | None = None) -> None:
        super().__init__(detail)
        self.index = index
        self.offset = offset


@dataclass(frozen=True, slots=True)
class Recovered:
    """What `recover()` did: the offset it truncated at and how many bytes it removed."""

    offset: int
    removed: int
    entries: int


class FileStore:
    """A ledger file (DESIGN.md §4) with one locked writer, or any number of readers.

    A reader opened while a writer holds the lock names it (`writer_pid`) and reads the
    entries whole when it opened; what follows them is that writer's append in flight
    (`in_flight`), never read and never called damage.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        writer: bool = True,
        create: bool = False,
        lock: LedgerLock | None = None,
        deferred: bool = False,
    ) -> None:
        """Open the ledger file. `deferred` reads nothing yet: the first use scans the whole
        file, unless `resume()` was told first where a state snapshot's length ends, so a
        start from a snapshot reads only the entries after it (DESIGN.md §4)."""
        self.path = Path(path)
        self._writer = writer
        self._fsyncs = 0
        # The last append that found no space, and its size, until one succeeds (`ready()`).
        self._full: tuple[DiskFull, int] | None = None
        flags = os.O_RDWR if writer else os.O_RDONLY
        if create:
            flags |= os.O_CREAT
        if lock is not None:
            if not writer or create:
                raise StoreError(f"{self.path}: a held lock is for opening a writer")
            self._fd = lock.take()
        else:
            try:
                self._fd = os.open(self.path, flags | os.O_CLOEXEC, 0o644)
            except FileNotFoundError:
                raise StoreError(f"{self.path}: no such ledger file") from None
            except OSError as exc:
                raise StoreError(f"{self.path}: cannot open: {exc.strerror}") from None
        self._high: HighWaterFile | None = None
        try:
            if writer:
                if lock is None:
                    _take_lock(self._fd, self.path)
                if create:
                    fsync_dir(self.path.parent)
            self._high = HighWaterFile.open(record_path(self.path), writable=writer)
            if self._high is None and writer and os.fstat(self._fd).st_size == 0:
                # An empty ledger acknowledged nothing yet: its record starts at length 0.
                self._high = HighWaterFile.create(record_path(self.path))
            # A reader beside a running writer (`pool serve`) reads up to the last whole
            # entry: bytes after it are an append in flight, not damage.
            self.writer_pid: int | None = None if writer else lock_holder(self._fd)
            # (first, offsets): the offsets of the entries from index `first` on; those before
            # it nobody has read yet (a start from a snapshot). None before the first scan.
            # Replaced as one value, so a reader never pairs one array with another's first.
            self._view: tuple[int, array[int]] | None = None
            self._size = 0
            self.tail: Tail | None = None
            self.in_flight: Tail | None = None
            self._scan_lock = threading.Lock()
            # The offset table beside the file (`stores.offset_table`), read when first needed.
            self._table: array[int] | None = None
            # Held while appends extend the offsets and while a prefix is joined to them.
            self._grow_lock = threading.Lock()
            if not deferred:
                self._scan_all()
        except BaseException:
            self.close()
            raise

    def _scan_all(self) -> None:
        """Read every entry's offset from the start of the file; for a writer, refuse a torn
        write or damage after the last whole entry (see the module's docstring)."""
        offsets, self._size, tail = self._scan()
        self._view = (0, offsets)
        self.tail = self._classified(tail)
        self.in_flight = None
        if self.writer_pid is not None and self.tail is not None:
            self.in_flight, self.tail = self.tail, None
        if self._writer and self.tail is not None:
            if self.tail.torn:
                raise TornWrite(self.path, self.tail, len(offsets))
            raise self.corruption()
        self._keep_table(offsets)

    def _known(self, index: int = -1) -> tuple[int, array[int]]:
        """(first, offsets): the offsets known, from entry `first` on; read from the file
        first where they do not reach back to entry `index` (or nothing was read yet)."""
        view = self._view
        if view is not None and (index < 0 or index >= view[0]):
            return view
        with self._scan_lock:
            if self._view is None:
                self._scan_all()
            elif 0 <= index < self._view[0]:
                self._scan_prefix()
            assert self._view is not None
            return self._view

    def _scan_prefix(self) -> None:
        """Read the offsets of the entries before the first one known (a start from a
        snapshot read only what followed it): the bytes before it must be exactly that many
        whole entries. Appends go on meanwhile; the prefix is joined to what they extended."""
        assert self._view is not None
        count, known = self._view
        first = int(known[0])
        prefix, end, tail = self._scan(0, first)
        if tail is not None or end != first or len(prefix) != count:
            raise CorruptLedger(
                f"{self.path}: the bytes before entry {count} (offset {first}) are not "
                f"{count} whole entries (read {len(prefix)}, up to byte {end}): the file "
                "changed under a snapshot that was checked against it. Run `pool ledger "
                "verify` and restore the file from a copy that verifies",
                min(len(prefix), count),
                end,
            )
        self._keep_table(prefix)
        with self._grow_lock:
            assert self._view is not None
            prefix.extend(self._view[1])
            self._view = (0, prefix)

    def _loaded_table(self) -> array[int]:
        if self._table is None:
            size = os.fstat(self._fd).st_size
            self._table = bound_table(table_path(self.path), self._fd, size)
        return self._table

    def _keep_table(self, offsets: array[int]) -> None:
        """Write the offset table of `offsets`, read from byte 0, where it differs from the
        one kept: a writer's, since a reader may not write beside the file, and only for a
        ledger long enough that reading to an entry from byte 0 costs more than from it."""
        if not self._writer or len(offsets) <= EVERY:
            return
        table = checkpoints(offsets)
        if table != self._loaded_table():
            bound = binding(self._fd, table, os.fstat(self._fd).st_size)
            write_table(table_path(self.path), table, bound)
            self._table = table

    def proves_head(self, length: int, head: bytes) -> bool:
        """Whether entry `length - 1`, found through the offset table where the offsets
        before a state snapshot were not read (`stores.offset_table`), has the content
        address `head` (§6.1, DESIGN.md §4). False where that cannot be shown so: no table,
        one that does not fit, other bytes, or offsets already known; the caller then reads
        the entry the usual way, so the table costs time, never an answer."""
        view = self._view
        if view is None or not 1 <= length <= view[0]:
            return False
        found = find_entry(self._fd, self._loaded_table(), length - 1, int(view[1][0]))
        if found is None or content_address(found[0]) != head:
            return False
        grown = found[1]
        if grown is not None and self._writer:
            write_table(table_path(self.path), grown, binding(self._fd, grown, int(view[1][0])))
            self._table = grown
        return True

    def resume(self, length: int, start: int, end: int, head: bytes) -> bool:
        """Before the first use: the entry `length - 1`, whose content address is `head`, is
        said to lie at bytes [start, end) (a state snapshot's record of where its length
        ends, DESIGN.md §4). If those bytes are exactly that entry (its address is `head`, so
        by the hash chain everything before it is what the snapshot folded) and everything
        after `end` is whole entries, only those are scanned, and earlier offsets are read
        when first asked for. Otherwise nothing is taken from the hint, and the next use
        scans the whole file: a wrong hint costs time, never a wrong entry."""
        if self._view is not None or length < 1 or not 0 <= start < end:
            return False
        size = os.fstat(self._fd).st_size
        if end > size or end - start > MAX_ENTRY_BYTES:
            return False
        raw = os.pread(self._fd, end - start, start)
        found, tail = split(raw)
        if found != [0] or tail is not None or content_address(raw) != head:
            return False
        offsets, tail_size, tail = self._scan(end)
        if tail is not None:
            return False  # torn, damaged or in flight: the full scan says which
        offsets.insert(0, start)
        self._view, self._size = (length - 1, offsets), tail_size
        return True

    def bounds(self, index: int) -> tuple[int, int]:
        """Where entry `index` lies: its first byte and the byte after its last."""
        return self.offset(index), self._end(index)

    def corruption(self) -> CorruptLedger:
        """The refusal for a tail that is not a torn write, naming its entry and offset."""
        tail, index = self.tail, len(self)
        assert tail is not None
        assert not tail.torn
        return CorruptLedger(
            f"{self.path}: entry {index} at byte offset {tail.offset} is damaged: "
            f"{tail.length} bytes that are not a ledger entry ({tail.detail}); this is not a "
            "torn write, nothing will append to it, and `pool ledger recover` will not "
            "truncate it. Restore the file from a copy that verifies",
            index,
            tail.offset,
        )

    def _classified(self, tail: Tail | None) -> Tail | None:
        """`tail` as the scanner saw it, unless a torn-looking one cannot be a torn write."""
        if tail is None or not tail.torn:
            return tail
        # Read at most one byte past the longest entry: enough to tell it is too long.
        longest = self._longest_entry()
        data = os.pread(self._fd, min(tail.length, longest + 1), tail.offset)
        acknowledged = self._high.point.length if self._high is not None else None
        reason = not_torn(data, longest, len(self._known()[1]), acknowledged, tail.length)
        if reason is None:
            return tail
        return Tail(tail.offset, tail.length, False, reason)

    def _longest_entry(self) -> int:
        """The longest entry this ledger could hold: what joulepool seals, or longer where
        the file already holds a longer entry (one sealed by an older or another writer)."""
        offsets = self._known()[1]
        ends = itertools.chain(offsets[1:], (self._size,))
        return max(LONGEST_SEALED, max(map(int.__sub__, ends, offsets), default=0))

    def _scan(self, base: int = 0, limit: int | None = None) -> tuple[array[int], int, Tail | None]:
        """Offsets of the whole entries from byte `base` on (up to byte `limit`, else the
        end of the file), where they end, and what follows them (None: nothing)."""
        offsets: array[int] = array("Q")
        size = os.fstat(self._fd).st_size if limit is None else limit
        # `base`: the file offset of buf[0]
        buf = b""
        while True:
            at = base + len(buf)
            want = CHUNK if limit is None else min(CHUNK, limit - at)
            chunk = os.pread(self._fd, want, at) if want > 0 else b""
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
        self._known()
        return self._size

    def __len__(self) -> int:
        first, offsets = self._known()
        return first + len(offsets)

    @property
    def name(self) -> str:
        """The ledger file's path."""
        return str(self.path)

    @property
    def shared(self) -> SharedLedger | None:
        """None: the file's lock admits one writer, nobody to agree with (DESIGN.md §6)."""
        return None

    @property
    def offsets(self) -> EntryOffsets:
        """This store itself: entries are bytes at offsets in one file (DESIGN.md §4)."""
        return self

    def high_water(self) -> HighWater | None:
        """The longest (length, head) this ledger acknowledged, or None if it has no record."""
        return self._high.point if self._high is not None else None

    def length_and_high_water(self) -> tuple[int, HighWater | None]:
        """The record, then the length (standard §6.1, docs/reliability.md §16): the file has
        one writer, which extends the ledger before it raises the record, so a length read
        after the record is never below a record a whole ledger holds."""
        high = self.high_water()
        return len(self), high

    def acknowledge(self, point: HighWater) -> None:
        """Write the high-water record as `point`, creating it or lowering it (an operator
        accepting a loss); appends raise it from then on."""
        if not self._writer:
            raise StoreError(f"{self.path} was opened read-only")
        if self._high is None:
            self._high = HighWaterFile.create(record_path(self.path), point)
        else:
            self._high.reset(point)

    def offset(self, index: int) -> int:
        """Byte offset of entry `index`."""
        first, offsets = self._known(index)
        return int(offsets[index - first])

    def _end(self, index: int) -> int:
        self._known(index)
        with self._grow_lock:
            assert self._view is not None
            first, offsets = self._view
            local = index - first + 1
            return int(offsets[local]) if local < len(offsets) else self._size

    def entry(self, index: int) -> bytes:
        """One entry, as stored."""
        count = len(self)
        if not 0 <= index < count:
            raise StoreError(f"{self.path}: no entry {index}; the ledger has {count}")
        start = self.offset(index)
        return os.pread(self._fd, self._end(index) - start, start)

    def entries(self, start: int = 0) -> Iterator[bytes]:
        """Every whole entry from index `start`, read in large chunks."""
        self._known(start)
        with self._grow_lock:
            # One consistent picture: entries appended after it are not yielded.
            assert self._view is not None
            known_from, offsets = self._view
            count, size = len(offsets), self._size
        i = start - known_from
        while i < count:
            first = int(offsets[i])
            # Gather entries up to one chunk's worth, then slice them out of one read: those
            # whose next entry starts within the chunk, and the last if the file ends in it.
            limit = first + CHUNK
            j = bisect.bisect_right(offsets, limit, i + 1, count) - 1
            if j == count - 1 and size <= limit:
                j = count
            j = max(j, i + 1)
            last = int(offsets[j]) if j < count else size
            buf = os.pread(self._fd, last - first, first)
            bounds = [o - first for o in offsets[i:j]]
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
        return list(self.entries(known)) if known < len(self) else []

    def append(self, raws: Sequence[bytes]) -> None:
        """Write `raws` at the end and fsync them before returning (§6.1).

        On failure the file is cut back to its last whole entry and `DiskFull` (or
        `StoreError`) is raised: no partial entry is left and nothing earlier is touched.
        """
        if not self._writer:
            raise StoreError(f"{self.path} was opened read-only")
        if not raws:
            return
        self._known()  # the file read before the first append, whatever the store was told
        data = b"".join(raws)
        try:
            write_durably(self._fd, data, self._size)
            self._fsyncs += 1
        except OSError as exc:
            self._cut_back()
            if no_space(exc):
                full = DiskFull(
                    f"{self.path}: no space left to append {len(raws)} entr"
                    f"{'y' if len(raws) == 1 else 'ies'}; nothing was written"
                )
                self._full = (full, len(data))
                raise full from None
            raise StoreError(
                f"{self.path}: append failed ({exc.strerror}); nothing was written"
            ) from None
        point = HighWater(len(self) + len(raws), content_address(raws[-1]))
        try:
            if self._high is None:
                self._high = HighWaterFile.create(record_path(self.path), point)
            else:
                self._high.advance(point)
        except StoreError as exc:
            # Nothing is acknowledged that the record does not cover: take the entries back.
            self._cut_back()
            if isinstance(exc, DiskFull):
                self._full = (exc, len(data))
            raise
        self._full = None
        with self._grow_lock:
            # The view now, which a prefix read meanwhile may have replaced.
            assert self._view is not None
            offsets = self._view[1]
            pos = self._size
            for raw in raws:
                offsets.append(pos)
                pos += len(raw)
            self._size = pos

    def ready(self, min_free: int = MIN_FREE_BYTES) -> int:
        """The ledger's length, for a readiness probe (DESIGN.md §6), once the next append
        can be expected to succeed; else `DiskFull`: the ledger's filesystem has less than
        `min_free` bytes free, or the last append found no space and an allocation of its
        size still fails (a quota, which statvfs does not show, included). Costs one
        statvfs; the allocation only after a failure, until it succeeds."""
        if not self._writer:
            raise StoreError(f"{self.path} was opened read-only")
        folder = self.path.parent
        try:
            st = os.statvfs(folder)
        except OSError as exc:
            raise StoreError(f"{folder}: cannot check free space: {exc.strerror}") from None
        free = st.f_bavail * st.f_frsize
        if free < min_free:
            raise DiskFull(
                f"{self.path}: only {free} bytes free on its filesystem (under {min_free}); "
                "appends would fail: free some space"
            )
        if self._full is None:
            return len(self)
        failure, size = self._full
        probe = folder / f".{self.path.name}{PROBE_SUFFIX}"
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                os.posix_fallocate(fd, 0, max(size, 1))
            finally:
                os.close(fd)
                os.unlink(probe)
        except OSError as exc:
            if no_space(exc):
                raise DiskFull(
                    f"{failure.detail.removesuffix('; nothing was written')}, and there is still "
                    f"no room for those {size} bytes: free some space"
                ) from None
            raise StoreError(f"{folder}: cannot check free space: {exc.strerror}") from None
        self._full = None
        return len(self)

    def _cut_back(self) -> None:
        try:
            os.ftruncate(self._fd, self._size)
            os.fsync(self._fd)
        except OSError:
            # The bytes past the last whole entry are a torn write; open reports it.
            pass

    def close(self) -> None:
        """Close the file, releasing its lock."""
        if self._high is not None:
            self._high.close()
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
    """Truncate a torn write, and nothing else; None if the file ends in a whole entry (§6.1).

    A torn write is a final fragment that can only be the unfinished start of one entry
    that was never acknowledged (`sequence.not_torn`). Anything else (bytes that no append
    could leave, a tail longer than any entry, a whole entry after the cut, an entry the
    high-water record covers) is refused with `CorruptLedger`, naming the offset, and the
    file is left exactly as it was.
    """
    p = Path(path)
    store = FileStore(p, writer=False)
    try:
        tail, count = store.tail, len(store)
        if tail is not None and not tail.torn:
            raise store.corruption()
    finally:
        store.close()
    if tail is None:
        return None
    fd = os.open(p, os.O_RDWR | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LedgerLocked(f"{p} is locked by a running writer; stop it first") from None
        if os.fstat(fd).st_size != tail.offset + tail.length:
            raise StoreError(f"{p} changed while it was being read; nothing was truncated")
        os.ftruncate(fd, tail.offset)
        os.fsync(fd)
    finally:
        os.close(fd)
    return Recovered(tail.offset, tail.length, count)
