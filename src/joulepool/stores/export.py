"""Export any store as a ledger file: its entries as one CBOR sequence (DESIGN.md §4, §6).

Every store exports the same bytes, so `pool ledger verify` can check a ledger kept in
PostgreSQL (or in memory) exactly as it checks a local file. The file appears whole or not
at all: it is written beside its destination, fsynced, then linked into place, and an
existing file is never replaced unless the caller asks.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path

from joulepool.errors import StoreError
from joulepool.files import fsync_dir
from joulepool.ledger.sequence import INCOMPLETE, StructureError, item_end
from joulepool.stores.base import Store

WRITE_BUFFER = 1 << 20


def export_ledger(store: Store, path: str | os.PathLike[str], *, overwrite: bool = False) -> int:
    """Write `store`'s entries to `path` as a ledger file; return how many (DESIGN.md §4).

    Each entry must be exactly one CBOR item, or the file would read back with different
    entry boundaries; one that is not is refused by index and no file is left. Raises
    `StoreError` if `path` exists and `overwrite` is false, or if writing fails.
    """
    target = Path(path)
    if not overwrite and target.exists():
        raise StoreError(f"{target} already exists; pass overwrite to replace it")
    folder = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=folder)
    except OSError as exc:
        raise StoreError(f"{target}: cannot write in {folder}: {exc.strerror}") from None
    tmp = Path(tmp_name)
    try:
        count = 0
        try:
            with os.fdopen(fd, "wb", buffering=WRITE_BUFFER) as out:
                for raw in store.entries():
                    _check_one_item(raw, count)
                    out.write(raw)
                    count += 1
                out.flush()
                os.fsync(out.fileno())
            tmp.chmod(0o644)
            _place(tmp, target, overwrite=overwrite)
            fsync_dir(folder)
        except OSError as exc:
            raise StoreError(f"{target}: export failed: {exc.strerror or exc}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return count


def _check_one_item(raw: bytes, index: int) -> None:
    try:
        end = item_end(raw, 0, len(raw))
    except StructureError as exc:
        raise StoreError(
            f"entry {index} is not a CBOR item ({exc}); nothing was exported"
        ) from None
    if end == INCOMPLETE or end != len(raw):
        what = "incomplete" if end == INCOMPLETE else f"{len(raw) - end} bytes longer than one item"
        raise StoreError(
            f"entry {index} is not exactly one CBOR item ({what}); a ledger file of it would "
            "read back with different entries, so nothing was exported"
        )


def _place(tmp: Path, target: Path, *, overwrite: bool) -> None:
    if overwrite:
        tmp.replace(target)
        return
    # A hard link fails if the name exists, so a file created meanwhile is never clobbered.
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise StoreError(f"{target} already exists; pass overwrite to replace it") from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EXDEV):
            raise
        # A filesystem without hard links: the check above is the best it allows.
        if target.exists():
            raise StoreError(f"{target} already exists; pass overwrite to replace it") from None
        tmp.replace(target)
        return
    tmp.unlink()
