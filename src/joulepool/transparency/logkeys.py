"""The log's verifier keys as a tenant holds them, and checkpoints opened by them
(c2sp.org/signed-note, c2sp.org/tlog-checkpoint; DESIGN.md §8).

A tenant may hold several of the steward's keys (one per rotation): a checkpoint verifies
when one of them, named by the checkpoint's origin, signs it, and no known key's line on it
fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

from joulepool.ledger.checkpoint import Checkpoint, CheckpointRefused, SignedCheckpoint
from joulepool.ledger.note import (
    ALG_COSIGNATURE_V1,
    ALG_ED25519,
    TIMESTAMP_SIZE,
    NoteRefused,
    NoteSignatureInvalid,
    NoteUnverified,
    VerifierKey,
    open_note,
)
from joulepool.transparency.errors import BundleMalformed, CheckpointUnverified

MAX_VKEYS: Final = 64
_KINDS: Final = {
    ALG_ED25519: "a log's Ed25519 (0x01) signed-note key",
    ALG_COSIGNATURE_V1: "a witness's cosignature/v1 (0x04) key",
}
# A vkey line is under 200 bytes; a file of MAX_VKEYS of them with comments fits easily.
MAX_VKEY_FILE_BYTES: Final = 64 * 1024


def parse_vkeys(
    text: str, where: str = "vkey", algorithm: int = ALG_ED25519
) -> tuple[VerifierKey, ...]:
    """Ed25519 (0x01) verifier keys, one a line, each alone or after the number of the first
    entry it signs (as `pool keys vkey --all` prints them); blank lines and `#` comments
    skipped (c2sp.org/signed-note, Verifier keys; docs/transparency.md)."""
    keys: list[VerifierKey] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if len(keys) == MAX_VKEYS:
            raise BundleMalformed(where, f"holds more than {MAX_VKEYS} keys")
        # `pool keys vkey --all` writes `<first entry it signs> <vkey>`: the key is what
        # counts here, as any key the steward used may have signed a checkpoint kept.
        first, space, rest = line.partition(" ")
        if space and first.isascii() and first.isdigit():
            line = rest.strip()
        try:
            key = VerifierKey.parse(line)
        except NoteRefused as exc:
            raise BundleMalformed(f"{where} line {number}", exc.detail) from None
        if key.algorithm != algorithm:
            raise BundleMalformed(f"{where} line {number}", f"is not {_KINDS[algorithm]}")
        if key in keys:
            raise BundleMalformed(f"{where} line {number}", "repeats a key given before")
        keys.append(key)
    if not keys:
        raise BundleMalformed(where, "holds no verifier key")
    return tuple(keys)


def load_vkeys(
    value: str, algorithm: int = ALG_ED25519, flag: str = "--vkey"
) -> tuple[VerifierKey, ...]:
    """`--vkey V` (or `--witness-vkey W`): a verifier key itself, or a file of one or more,
    one a line (docs/transparency.md)."""
    if "+" in value and "\n" not in value and not Path(value).exists():
        return parse_vkeys(value, flag, algorithm)
    path = Path(value)
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_VKEY_FILE_BYTES + 1)
    except OSError as exc:
        raise BundleMalformed(
            value, f"is neither a verifier key nor a readable file: {exc.strerror}"
        ) from None
    if len(raw) > MAX_VKEY_FILE_BYTES:
        raise BundleMalformed(value, f"is longer than {MAX_VKEY_FILE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BundleMalformed(value, "is not UTF-8") from None
    return parse_vkeys(text, value, algorithm)


def open_log_checkpoint(
    note: bytes,
    keys: Sequence[VerifierKey],
    where: str = "checkpoint",
    *,
    witnesses: Sequence[VerifierKey] = (),
    quorum: int = 0,
) -> SignedCheckpoint:
    """The checkpoint of `note` if a key in `keys` named by its origin signs it
    (c2sp.org/tlog-checkpoint, Signatures) and at least `quorum` of `witnesses` cosign it
    (c2sp.org/tlog-cosignature); `CheckpointUnverified` if not, or if a known key's line
    fails; `BundleMalformed` if it is no checkpoint note at all."""
    try:
        opened = open_note(note, [*keys, *witnesses])
    except NoteSignatureInvalid as exc:
        raise CheckpointUnverified(f"{where}: {exc.detail}") from None
    except NoteUnverified:
        names = ", ".join(sorted({k.name for k in keys}))
        raise CheckpointUnverified(
            f"{where}: no valid signature by the log key(s) {names}"
        ) from None
    except NoteRefused as exc:
        raise BundleMalformed(where, str(exc)) from None
    try:
        checkpoint = Checkpoint.parse(opened.text)
    except CheckpointRefused as exc:
        raise BundleMalformed(where, str(exc)) from None
    # A key signs for the log its name is: another log's key on this text proves nothing.
    if not any(
        key.algorithm == ALG_ED25519 and key.name == checkpoint.origin for key, _ in opened.verified
    ):
        raise CheckpointUnverified(
            f"{where}: signed, but by no key named by its origin {checkpoint.origin!r}"
        )
    cosigned = tuple(
        (key.name, int.from_bytes(sig.signature[:TIMESTAMP_SIZE], "big"))
        for key, sig in opened.verified
        if key.algorithm == ALG_COSIGNATURE_V1
    )
    if len(cosigned) < quorum:
        have = ", ".join(name for name, _ in cosigned) or "none"
        raise CheckpointUnverified(
            f"{where}: cosigned by {len(cosigned)} of the witnesses given ({have}), "
            f"fewer than the {quorum} required"
        )
    return SignedCheckpoint(checkpoint, bytes(note), cosigned)
