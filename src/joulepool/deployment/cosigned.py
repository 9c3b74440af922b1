"""The latest checkpoint each C2SP witness cosigned, kept beside the ledger as rollback
evidence (DESIGN.md §8 and §6.1; c2sp.org/tlog-witness, c2sp.org/tlog-cosignature).

A kept cosigned checkpoint is evidence exactly like a kept pool-witness/1 receipt: a
witness has said it saw this log at that size with that root, and it will refuse to cosign
any tree that does not extend it. So a ledger shorter than a kept cosigned checkpoint, or
one that differs from it at that size, is refused at start (`ledger.rollback`), and the
file is never discarded, whatever it disagrees with: it is moved aside by an operator, who
has then decided that the history the witness saw is gone (docs/transparency.md,
Witnessing).

Each witness has one file in the deployment's `witnesses/` folder, `NAME-HASH.cosigned`
(NAME the witness's key name with anything but letters, digits, '.', '_' and '-' written
'_'; HASH its key hash in hex), written whole or not at all:

    pool-cosigned/1
    vkey <the witness's verifier key>
    head <hex: the ledger's hash-chain head after the checkpoint's size entries>
    <blank line>
    <the signed checkpoint note, with the witness's cosignature/v1 line>

The head lets a start check the mark as every other mark is checked, by the entry at its
length (`stores.base.refuse_rollback`), without hashing the tree again; it is the same
commitment to the same entries as the checkpoint's root, read from the same ledger when the
cosignature came back.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from joulepool.errors import DiskFull, StoreError, no_space
from joulepool.files import write_atomically
from joulepool.ledger.checkpoint import Checkpoint, CheckpointRefused
from joulepool.ledger.merkle import HASH_SIZE, CompactRange
from joulepool.ledger.note import (
    ALG_COSIGNATURE_V1,
    MAX_NOTE_BYTES,
    TIMESTAMP_SIZE,
    NoteRefused,
    VerifierKey,
    open_note,
)
from joulepool.ledger.rollback import HighWater, LedgerRolledBack, Mark

MAGIC: Final = "pool-cosigned/1"
SUFFIX: Final = ".cosigned"
# The header's three lines and a blank one, each bounded, before a note of at most
# MAX_NOTE_BYTES: a larger file is not one this module wrote.
MAX_FILE_BYTES: Final = MAX_NOTE_BYTES + 4096
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class KeptCosigned:
    """One witness's latest cosigned checkpoint as kept (DESIGN.md §8): the witness's key,
    the checkpoint, the note that carries the cosignature, when the witness cosigned it
    (POSIX seconds, its cosignature's timestamp), and the ledger's head at its size."""

    vkey: VerifierKey
    checkpoint: Checkpoint
    note: bytes
    timestamp: int
    head: bytes
    path: Path

    def mark(self) -> Mark:
        """The point this checkpoint vouches for, as a rollback mark (§6.1)."""
        source = f"the checkpoint C2SP witness {self.vkey.name} cosigned ({self.path.name})"
        return Mark(source, HighWater(self.checkpoint.size, self.head))


def file_name(vkey: VerifierKey) -> str:
    """The file a witness's kept cosigned checkpoint is written to (module docstring)."""
    return f"{_UNSAFE.sub('_', vkey.name)[:96]}-{vkey.key_hash.hex()}{SUFFIX}"


def keep_cosigned(folder: Path, vkey: VerifierKey, note: bytes, head: bytes) -> KeptCosigned:
    """Keep `note`, a checkpoint `vkey` cosigned, as that witness's latest, whole or not at
    all (DESIGN.md §8, §6.1). It is checked first as a start will read it; raises
    `DiskFull` where there is no room, and what was kept before is then unchanged."""
    if not isinstance(head, bytes) or len(head) != HASH_SIZE:
        raise StoreError(f"a cosigned checkpoint's head must be {HASH_SIZE} bytes")
    path = folder / file_name(vkey)
    data = f"{MAGIC}\nvkey {vkey.encode()}\nhead {head.hex()}\n\n".encode("ascii") + note
    kept = _read(data, path)
    if kept.vkey != vkey:
        raise StoreError(f"{path}: the note carries no cosignature by {vkey.name}")
    try:
        folder.mkdir(exist_ok=True)
        write_atomically(path, data, 0o644)
    except OSError as exc:
        if no_space(exc):
            raise DiskFull(f"{path}: no space left to keep the cosigned checkpoint") from None
        raise StoreError(f"{path}: cannot keep the cosigned checkpoint ({exc})") from None
    return kept


def load_cosigned(folder: Path, problems: list[str] | None = None) -> list[KeptCosigned]:
    """Every cosigned checkpoint kept under `folder` (DESIGN.md §8). A file that cannot be
    read, or whose cosignature does not verify under the key it names, vouches for nothing:
    it is left out, named in `problems` where given, and left where it is."""
    if not folder.is_dir():
        return []
    kept: list[KeptCosigned] = []
    for path in sorted(folder.glob("*" + SUFFIX)):
        try:
            with path.open("rb") as fh:
                data = fh.read(MAX_FILE_BYTES + 1)
            if len(data) > MAX_FILE_BYTES:
                raise StoreError(f"{path.name}: longer than {MAX_FILE_BYTES} bytes")
            kept.append(_read(data, path))
        except OSError as exc:
            if problems is not None:
                problems.append(f"{path.name} left out: {exc.strerror or exc}")
        except StoreError as exc:
            if problems is not None:
                problems.append(f"{path.name} left out: {exc.detail}")
    return kept


def cosigned_marks(folder: Path, problems: list[str] | None = None) -> list[Mark]:
    """The points the kept cosigned checkpoints vouch for, as marks a ledger must reach
    (§6.1, DESIGN.md §8). One at size 0 covers no entry."""
    return [k.mark() for k in load_cosigned(folder, problems) if k.checkpoint.size]


def check_roots(
    kept: Iterable[KeptCosigned], length: int, entries: Iterable[bytes], where: str
) -> None:
    """Refuse a ledger of `length` entries whose RFC 9162 root at a kept checkpoint's size
    is not the root the witness cosigned (DESIGN.md §8, §6.1): what `pool ledger verify`
    checks besides the head each mark carries, so a file whose head line was edited to fit
    another history is caught by the part the witness signed. `entries` is read once, as
    far as the largest size asked."""
    wanted = sorted((k for k in kept if 0 < k.checkpoint.size <= length), key=_size)
    if not wanted:
        return
    tree = CompactRange()
    it = iter(entries)
    for k in wanted:
        while tree.size < k.checkpoint.size:
            tree.append(next(it))
        if tree.root() != k.checkpoint.root_hash:
            source = k.mark().source
            raise LedgerRolledBack(
                f"{where}: its tree root after {k.checkpoint.size} entries is not the root "
                f"of {source} (the ledger has {length} entries): its history was rewritten "
                "or replaced by another. Refusing it",
                length,
                k.checkpoint.size,
                source,
            )


def _size(kept: KeptCosigned) -> int:
    return kept.checkpoint.size


def _read(data: bytes, path: Path) -> KeptCosigned:
    """A kept file's parts, each checked; `StoreError` naming the file otherwise."""
    header, sep, note = data.partition(b"\n\n")
    try:
        lines = header.decode("ascii").split("\n") if sep else []
    except UnicodeDecodeError:
        lines = []
    if len(lines) != 3 or lines[0] != MAGIC:
        raise StoreError(f"{path.name}: not a {MAGIC} file")
    if not lines[1].startswith("vkey ") or not lines[2].startswith("head "):
        raise StoreError(f"{path.name}: the header must be its vkey and head lines")
    try:
        vkey = VerifierKey.parse(lines[1][5:])
        head = bytes.fromhex(lines[2][5:])
        if vkey.algorithm != ALG_COSIGNATURE_V1:
            raise NoteRefused("vkey", "is not a cosignature/v1 (0x04) key")
        opened = open_note(note, [vkey])
        checkpoint = Checkpoint.parse(opened.text)
    except ValueError:
        raise StoreError(f"{path.name}: the head is not hex") from None
    except (NoteRefused, CheckpointRefused) as exc:
        raise StoreError(f"{path.name}: {exc}") from None
    if len(head) != HASH_SIZE:
        raise StoreError(f"{path.name}: the head is not {HASH_SIZE} bytes")
    if not opened.verified:
        raise StoreError(f"{path.name}: no cosignature by {vkey.name} verifies")
    signature = opened.verified[0][1].signature
    timestamp = int.from_bytes(signature[:TIMESTAMP_SIZE], "big")
    return KeptCosigned(vkey, checkpoint, bytes(note), timestamp, head, path)
