"""Checkpoints (c2sp.org/tlog-checkpoint) and their cosignatures (c2sp.org/tlog-cosignature,
cosignature/v1), DESIGN.md §8.

A checkpoint is the text of a signed note:

    <origin>
    <tree size, ASCII decimal, no leading zero>
    <base64 root hash>
    [extension lines, each non-empty]

signed by the steward's Ed25519 key as a signed-note key named by the origin (type 0x01).
A witness adds a cosignature/v1 line (type 0x04): eight bytes of timestamp and an Ed25519
signature over `cosignature/v1`, `time <T>` and the checkpoint text. A kept cosigned
checkpoint is checked with the log's verifier key and each witness's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from joulepool.ledger.keys import KeyPair
from joulepool.ledger.merkle import HASH_SIZE, MAX_TREE_SIZE
from joulepool.ledger.note import (
    ALG_COSIGNATURE_V1,
    ALG_ED25519,
    MAX_NOTE_BYTES,
    TIMESTAMP_SIZE,
    NoteRefused,
    NoteSignature,
    NoteSigner,
    NoteUnverified,
    VerifierKey,
    b64decode,
    b64encode,
    check_note_text,
    cosignature_message,
    open_note,
    parse_note,
    sign_note,
)

_DIGITS: Final = frozenset("0123456789")


class CheckpointRefused(NoteRefused):
    """A checkpoint's text is not the shape c2sp.org/tlog-checkpoint requires."""

    code = "checkpoint_refused"


def _check_line(field_: str, line: str) -> None:
    if not isinstance(line, str) or not line:
        raise CheckpointRefused(field_, "must be a non-empty line")
    for ch in line:
        if ord(ch) < 0x20:
            raise CheckpointRefused(field_, f"contains the control character U+{ord(ch):04X}")


@dataclass(frozen=True)
class Checkpoint:
    """A tree head as c2sp.org/tlog-checkpoint writes it: origin, size, root hash and
    optional extension lines."""

    origin: str
    size: int
    root_hash: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_line("origin", self.origin)
        if isinstance(self.size, bool) or not isinstance(self.size, int):
            raise CheckpointRefused("size", "must be an integer")
        if not 0 <= self.size <= MAX_TREE_SIZE:
            raise CheckpointRefused("size", "must be in [0, 2**64 - 1]")
        if not isinstance(self.root_hash, bytes) or len(self.root_hash) != HASH_SIZE:
            raise CheckpointRefused("root_hash", f"must be {HASH_SIZE} bytes")
        if not isinstance(self.extensions, tuple):
            raise CheckpointRefused("extensions", "must be a tuple of lines")
        for i, line in enumerate(self.extensions):
            _check_line(f"extension line {i + 1}", line)

    def text(self) -> str:
        """The note text, every line newline-terminated (c2sp.org/tlog-checkpoint)."""
        lines = [self.origin, str(self.size), b64encode(self.root_hash), *self.extensions]
        return "".join(line + "\n" for line in lines)

    @classmethod
    def parse(cls, text: str) -> Checkpoint:
        """Read a checkpoint's note text strictly (c2sp.org/tlog-checkpoint, Note text)."""
        if not isinstance(text, str):
            raise CheckpointRefused("checkpoint", "must be text")
        if len(text) > MAX_NOTE_BYTES:
            raise CheckpointRefused("checkpoint", f"is longer than {MAX_NOTE_BYTES} characters")
        if not text.endswith("\n"):
            raise CheckpointRefused("checkpoint", "must end in a newline")
        lines = text[:-1].split("\n")
        if len(lines) < 3:
            raise CheckpointRefused("checkpoint", "needs origin, size and root hash lines")
        origin, size_text, root_text, *extensions = lines
        _check_line("origin", origin)
        if not size_text or not set(size_text) <= _DIGITS or len(size_text) > 20:
            raise CheckpointRefused("size", f"{size_text[:24]!r} is not an ASCII decimal")
        if size_text != "0" and size_text.startswith("0"):
            raise CheckpointRefused("size", f"{size_text!r} has a leading zero")
        size = int(size_text)
        if size > MAX_TREE_SIZE:
            raise CheckpointRefused("size", "is larger than 2**64 - 1")
        try:
            root = b64decode(root_text, "root hash")
        except NoteRefused as exc:
            raise CheckpointRefused("root hash", exc.detail) from None
        if len(root) != HASH_SIZE:
            raise CheckpointRefused("root hash", f"is {len(root)} bytes, not {HASH_SIZE}")
        for i, line in enumerate(extensions):
            _check_line(f"extension line {i + 1}", line)
        return cls(origin, size, root, tuple(extensions))


@dataclass(frozen=True)
class SignedCheckpoint:
    """A checkpoint whose log signature verified, with the cosignatures that verified
    (witness name → timestamp, POSIX seconds) and its note's bytes as received."""

    checkpoint: Checkpoint
    note: bytes
    cosigned_by: tuple[tuple[str, int], ...] = ()


def log_verifier_key(key: KeyPair, origin: str) -> VerifierKey:
    """The steward's Ed25519 signed-note key named by the origin (c2sp.org/signed-note,
    DESIGN.md §8): what `pool keys vkey` publishes."""
    return VerifierKey.ed25519(origin, key.public_key, ALG_ED25519)


def witness_verifier_key(name: str, public_key: bytes) -> VerifierKey:
    """A witness's cosignature/v1 key (type 0x04, c2sp.org/tlog-cosignature)."""
    return VerifierKey.ed25519(name, public_key, ALG_COSIGNATURE_V1)


def sign_checkpoint(checkpoint: Checkpoint, key: KeyPair, name: str | None = None) -> bytes:
    """The signed note of `checkpoint` by the steward's key, named by the origin unless
    told otherwise (c2sp.org/tlog-checkpoint, Signatures)."""
    return sign_note(checkpoint.text(), [NoteSigner(name or checkpoint.origin, key)])


def cosign(checkpoint: Checkpoint, key: KeyPair, name: str, timestamp: int) -> NoteSignature:
    """A witness's cosignature/v1 line on `checkpoint` at `timestamp` (POSIX seconds,
    c2sp.org/tlog-cosignature, Ed25519 signed message)."""
    vkey = witness_verifier_key(name, key.public_key)
    text = check_note_text(checkpoint.text())
    message = cosignature_message(text, timestamp)
    signature = key.signing_key.sign(message).signature
    return NoteSignature(name, vkey.key_hash, timestamp.to_bytes(TIMESTAMP_SIZE, "big") + signature)


def add_signatures(note: bytes, signatures: Sequence[NoteSignature]) -> bytes:
    """The same note with more signature lines after its own (c2sp.org/signed-note)."""
    parse_note(note)
    out = note + "".join(s.line() for s in signatures).encode("utf-8")
    if len(out) > MAX_NOTE_BYTES:
        raise NoteRefused("note", f"is longer than {MAX_NOTE_BYTES} bytes")
    return out


def open_checkpoint(
    note: bytes | str,
    log_key: VerifierKey,
    witnesses: Sequence[VerifierKey] = (),
    *,
    origin: str | None = None,
) -> SignedCheckpoint:
    """Verify a checkpoint note by the log's key and read it (c2sp.org/tlog-checkpoint),
    with the cosignatures of the given witnesses that it carries (c2sp.org/tlog-cosignature).

    The log's signature must be present and valid; a witness's line, if present, must
    verify (a failing one rejects the note, as a known key's bad signature does); lines by
    any other key are ignored. `origin`, when given, must be the checkpoint's.
    """
    if log_key.algorithm != ALG_ED25519:
        raise NoteRefused("log key", "must be an Ed25519 (0x01) signed-note key")
    for w in witnesses:
        if w.algorithm != ALG_COSIGNATURE_V1:
            raise NoteRefused(f"witness key {w.name}", "must be a cosignature/v1 (0x04) key")
    opened = open_note(note, [log_key, *witnesses])
    if not any(key == log_key for key, _ in opened.verified):
        raise NoteUnverified("note", f"no signature by the log's key {log_key.name}")
    checkpoint = Checkpoint.parse(opened.text)
    if origin is not None and checkpoint.origin != origin:
        raise CheckpointRefused("origin", f"is {checkpoint.origin!r}, not the expected {origin!r}")
    cosigned = tuple(
        (key.name, int.from_bytes(sig.signature[:TIMESTAMP_SIZE], "big"))
        for key, sig in opened.verified
        if key.algorithm == ALG_COSIGNATURE_V1
    )
    raw = note.encode("utf-8") if isinstance(note, str) else bytes(note)
    return SignedCheckpoint(checkpoint, raw, cosigned)
