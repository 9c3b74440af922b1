"""Signed notes (c2sp.org/signed-note) with Ed25519 keys, DESIGN.md §8.

A signed note is UTF-8 text ending in a newline, a blank line, then one or more lines

    — <key name> <base64(4-byte key hash || signature)>

with the em dash U+2014. A key is named by `(name, key hash)`, the hash being the first
four bytes of SHA-256(name || 0x0A || algorithm || public key), and is published as a
verifier key, `<name>+<hex key hash>+<base64(algorithm || public key)>`. Two algorithms
are known here: 0x01, an Ed25519 signature over the note text, and 0x04, a timestamped
Ed25519 cosignature (c2sp.org/tlog-cosignature) over `cosignature/v1`, the time line and
the note text. Both use 32-byte public keys.

Parsing is strict and bounded before any work is done: at most `MAX_NOTE_BYTES` bytes and
`MAX_SIGNATURES` signature lines (the spec asks verifiers to accept at least 16), canonical
padded base64, no control character but newline. Every refusal is a `NoteRefused` (or one
of its two kinds, `NoteUnverified` and `NoteSignatureInvalid`) naming what is wrong.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

from joulepool.errors import InvalidInput
from joulepool.ledger.keys import KeyPair

ALG_ED25519: Final = 0x01
ALG_COSIGNATURE_V1: Final = 0x04
KEY_HASH_SIZE: Final = 4
ED25519_SIGNATURE_SIZE: Final = 64
ED25519_KEY_SIZE: Final = 32
TIMESTAMP_SIZE: Final = 8
MAX_TIMESTAMP: Final = 2**63 - 1
# 16 post-quantum signatures of nearly 5 kB, base64'd, fit with room for the text.
MAX_NOTE_BYTES: Final = 256 * 1024
MAX_SIGNATURES: Final = 64
EM_DASH: Final = "\u2014"
COSIGNATURE_HEADER: Final = b"cosignature/v1\n"

_ALGORITHMS: Final = {ALG_ED25519: "Ed25519", ALG_COSIGNATURE_V1: "cosignature/v1 Ed25519"}


class NoteRefused(InvalidInput):
    """A signed note, a signature line, a key name or a verifier key is malformed."""

    code = "note_refused"


class NoteUnverified(NoteRefused):
    """No signature of the note is by a known key that verifies (c2sp.org/signed-note)."""

    code = "note_unverified"


class NoteSignatureInvalid(NoteRefused):
    """A signature by a known key fails to verify: the whole note is rejected."""

    code = "note_signature_invalid"


def b64encode(data: bytes) -> str:
    """Standard padded base64 (RFC 4648 §4), as c2sp.org/signed-note uses throughout."""
    return base64.b64encode(data).decode("ascii")


def b64decode(text: str, field_: str) -> bytes:
    """Canonical padded base64 (RFC 4648 §4) or a `NoteRefused` naming `field_`."""
    if not text or len(text) % 4 or not text.isascii():
        raise NoteRefused(field_, "is not padded standard base64")
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise NoteRefused(field_, "is not padded standard base64") from None
    if base64.b64encode(raw).decode("ascii") != text:
        raise NoteRefused(field_, "is not canonical base64 (stray bits in the last character)")
    return raw


def check_key_name(name: str, field_: str = "key name") -> str:
    """A key name per c2sp.org/signed-note: non-empty, no Unicode space, no '+', and (the
    whole note forbids them) no control character."""
    if not isinstance(name, str) or not name:
        raise NoteRefused(field_, "must be a non-empty string")
    if len(name) > MAX_NOTE_BYTES:
        raise NoteRefused(field_, "is longer than a note may be")
    for ch in name:
        if ch.isspace():
            raise NoteRefused(field_, f"contains a space character (U+{ord(ch):04X})")
        if ch == "+":
            raise NoteRefused(field_, "contains '+'")
        if ord(ch) < 0x20 or 0xD800 <= ord(ch) <= 0xDFFF:
            raise NoteRefused(field_, f"contains the control or surrogate U+{ord(ch):04X}")
    return name


def key_hash(name: str, algorithm: int, public_key: bytes) -> bytes:
    """SHA-256(name || 0x0A || algorithm || public key)[:4] (c2sp.org/signed-note)."""
    check_key_name(name)
    return hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([algorithm]) + public_key).digest()[
        :KEY_HASH_SIZE
    ]


def cosignature_message(text: bytes, timestamp: int) -> bytes:
    """What a cosignature/v1 signs: the header line, `time <T>`, then the note text
    (c2sp.org/tlog-cosignature, Ed25519 signed message)."""
    if isinstance(timestamp, bool) or not 0 <= timestamp <= MAX_TIMESTAMP:
        raise NoteRefused("timestamp", "must be an integer in [0, 2**63 - 1]")
    return COSIGNATURE_HEADER + b"time %d\n" % timestamp + text


@dataclass(frozen=True)
class VerifierKey:
    """A signed-note verifier key: a name, its key hash, the algorithm and the public key
    (c2sp.org/signed-note, Verifier keys). Only Ed25519 (0x01) and cosignature/v1 (0x04)
    keys are accepted; the key hash must be the one the name and key give."""

    name: str
    key_hash: bytes
    algorithm: int
    public_key: bytes

    def __post_init__(self) -> None:
        check_key_name(self.name)
        if self.algorithm not in _ALGORITHMS:
            raise NoteRefused(
                "algorithm", f"0x{self.algorithm:02x} is not a supported signature type"
            )
        if not isinstance(self.public_key, bytes) or len(self.public_key) != ED25519_KEY_SIZE:
            raise NoteRefused("public_key", f"an Ed25519 public key is {ED25519_KEY_SIZE} bytes")
        if self.key_hash != key_hash(self.name, self.algorithm, self.public_key):
            raise NoteRefused("key_hash", "does not match the name, algorithm and public key")

    @classmethod
    def ed25519(cls, name: str, public_key: bytes, algorithm: int = ALG_ED25519) -> VerifierKey:
        """The verifier key of an Ed25519 public key under `name` (c2sp.org/signed-note)."""
        check_key_name(name)
        if not isinstance(public_key, bytes) or len(public_key) != ED25519_KEY_SIZE:
            raise NoteRefused("public_key", f"an Ed25519 public key is {ED25519_KEY_SIZE} bytes")
        if algorithm not in _ALGORITHMS:
            raise NoteRefused("algorithm", f"0x{algorithm:02x} is not a supported signature type")
        return cls(name, key_hash(name, algorithm, public_key), algorithm, public_key)

    def encode(self) -> str:
        """`<name>+<hex key hash>+<base64(algorithm || key)>` (c2sp.org/signed-note)."""
        data = b64encode(bytes([self.algorithm]) + self.public_key)
        return f"{self.name}+{self.key_hash.hex()}+{data}"

    @classmethod
    def parse(cls, text: str) -> VerifierKey:
        """Read a verifier key string strictly (c2sp.org/signed-note, Verifier keys)."""
        if not isinstance(text, str):
            raise NoteRefused("verifier key", "must be a string")
        if len(text) > 1024:
            raise NoteRefused("verifier key", "is longer than any Ed25519 verifier key")
        # The name holds no '+', and the key hash is 8 hex digits: the base64 after them
        # may hold '+' of its own.
        name, plus, rest = text.partition("+")
        if not plus or len(rest) < 9 or rest[8] != "+":
            raise NoteRefused("verifier key", "is not <name>+<8 hex digits>+<base64 key>")
        hash_hex, data = rest[:8], rest[9:]
        check_key_name(name, "verifier key name")
        if any(c not in "0123456789abcdef" for c in hash_hex):
            raise NoteRefused("verifier key hash", "must be 8 lowercase hex digits")
        raw = b64decode(data, "verifier key data")
        if len(raw) != 1 + ED25519_KEY_SIZE:
            raise NoteRefused(
                "verifier key data", f"must be 1 + {ED25519_KEY_SIZE} bytes, not {len(raw)}"
            )
        if raw[0] not in _ALGORITHMS:
            raise NoteRefused(
                "verifier key algorithm", f"0x{raw[0]:02x} is not a supported signature type"
            )
        if bytes.fromhex(hash_hex) != key_hash(name, raw[0], raw[1:]):
            raise NoteRefused(
                "verifier key hash", "does not match the name, algorithm and public key"
            )
        return cls(name, bytes.fromhex(hash_hex), raw[0], raw[1:])

    def verify(self, text: bytes, signature: bytes) -> bool:
        """Whether `signature` (the part after the key hash) signs `text` under this key:
        Ed25519 over the text (0x01), or timestamp || Ed25519 over the cosignature/v1
        message (0x04, c2sp.org/tlog-cosignature)."""
        if self.algorithm == ALG_COSIGNATURE_V1:
            if len(signature) != TIMESTAMP_SIZE + ED25519_SIGNATURE_SIZE:
                return False
            timestamp = int.from_bytes(signature[:TIMESTAMP_SIZE], "big")
            if timestamp > MAX_TIMESTAMP:
                return False
            message = cosignature_message(text, timestamp)
            signature = signature[TIMESTAMP_SIZE:]
        else:
            if len(signature) != ED25519_SIGNATURE_SIZE:
                return False
            message = text
        try:
            VerifyKey(self.public_key).verify(message, signature)
        except (BadSignatureError, ValueError, TypeError):
            return False
        return True


@dataclass(frozen=True)
class NoteSigner:
    """An Ed25519 key that signs notes under `name` (c2sp.org/signed-note, type 0x01)."""

    name: str
    key: KeyPair = field(repr=False)

    def __post_init__(self) -> None:
        check_key_name(self.name)
        if self.key.seed is None:
            raise NoteRefused("key", f"key {self.key.kid!r} is public only: it cannot sign")

    def verifier_key(self) -> VerifierKey:
        """The verifier key a reader needs to check this signer's notes (c2sp.org/signed-note)."""
        return VerifierKey.ed25519(self.name, self.key.public_key)

    def sign(self, text: bytes) -> NoteSignature:
        """The signature line of `text` by this key (c2sp.org/signed-note, Ed25519)."""
        signed = self.key.signing_key.sign(text).signature
        return NoteSignature(self.name, self.verifier_key().key_hash, bytes(signed))


@dataclass(frozen=True)
class NoteSignature:
    """One signature line: the key's name and hash, and the signature after the hash."""

    name: str
    key_hash: bytes
    signature: bytes

    def line(self) -> str:
        """`— <name> <base64(key hash || signature)>` and its newline (c2sp.org/signed-note)."""
        return f"{EM_DASH} {self.name} {b64encode(self.key_hash + self.signature)}\n"


@dataclass(frozen=True)
class Note:
    """A note's text (ending in a newline) and its signature lines, as they appear."""

    text: str
    signatures: tuple[NoteSignature, ...]

    def encode(self) -> bytes:
        """The signed note's bytes: text, blank line, signature lines (c2sp.org/signed-note)."""
        return (self.text + "\n" + "".join(s.line() for s in self.signatures)).encode("utf-8")


@dataclass(frozen=True)
class OpenedNote:
    """A note some known key signed: its text, the signatures that verified (with their
    keys), and the lines by keys not known here, kept but never trusted."""

    text: str
    verified: tuple[tuple[VerifierKey, NoteSignature], ...]
    unverified: tuple[NoteSignature, ...]


def _check_text(text: str, field_: str) -> None:
    for ch in text:
        if ord(ch) < 0x20 and ch != "\n":
            raise NoteRefused(field_, f"contains the control character U+{ord(ch):04X}")


def check_note_text(text: str) -> bytes:
    """The UTF-8 of a note text fit to sign: non-empty, ending in a newline, no control
    character but newline, within the size bound (c2sp.org/signed-note, Format)."""
    if not isinstance(text, str) or not text.endswith("\n"):
        raise NoteRefused("text", "a note's text must end in a newline")
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError:
        raise NoteRefused("text", "is not valid UTF-8 (a lone surrogate)") from None
    if len(raw) > MAX_NOTE_BYTES:
        raise NoteRefused("text", f"is longer than {MAX_NOTE_BYTES} bytes")
    _check_text(text, "text")
    return raw


def sign_note(text: str, signers: Sequence[NoteSigner]) -> bytes:
    """A signed note of `text` by each signer, in order (c2sp.org/signed-note)."""
    raw = check_note_text(text)
    if not signers:
        raise NoteRefused("signers", "a signed note needs at least one signature")
    note = Note(text, tuple(s.sign(raw) for s in signers))
    out = note.encode()
    if len(out) > MAX_NOTE_BYTES:
        raise NoteRefused("note", f"is longer than {MAX_NOTE_BYTES} bytes")
    return out


def parse_note(msg: bytes | str) -> Note:
    """Split a signed note into its text and signature lines, strictly and within the
    bounds, without verifying anything (c2sp.org/signed-note, Format)."""
    if isinstance(msg, str):
        if len(msg) > MAX_NOTE_BYTES:
            raise NoteRefused("note", f"is longer than {MAX_NOTE_BYTES} bytes")
        try:
            msg = msg.encode("utf-8")
        except UnicodeEncodeError:
            raise NoteRefused("note", "is not valid UTF-8 (a lone surrogate)") from None
    if not isinstance(msg, bytes | bytearray):
        raise NoteRefused("note", "must be bytes")
    if len(msg) > MAX_NOTE_BYTES:
        raise NoteRefused("note", f"is longer than {MAX_NOTE_BYTES} bytes")
    try:
        whole = bytes(msg).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NoteRefused("note", f"is not valid UTF-8 (byte {exc.start})") from None
    _check_text(whole, "note")
    if not whole.endswith("\n"):
        raise NoteRefused("note", "must end in a newline")
    split = whole.rfind("\n\n")
    if split < 0:
        raise NoteRefused("note", "has no blank line before its signatures")
    text, block = whole[: split + 1], whole[split + 2 :]
    if not block:
        raise NoteRefused("note", "has no signature lines")
    lines = block.split("\n")[:-1]
    if len(lines) > MAX_SIGNATURES:
        raise NoteRefused("note", f"has {len(lines)} signature lines, more than {MAX_SIGNATURES}")
    signatures: list[NoteSignature] = []
    for number, line in enumerate(lines, 1):
        where = f"signature line {number}"
        if not line.startswith(EM_DASH + " "):
            raise NoteRefused(where, "does not start with an em dash (U+2014) and a space")
        parts = line[2:].split(" ")
        if len(parts) != 2:
            raise NoteRefused(where, "is not '— <key name> <base64 signature>'")
        name, data = parts
        check_key_name(name, f"{where} key name")
        raw = b64decode(data, f"{where} signature")
        if len(raw) <= KEY_HASH_SIZE:
            raise NoteRefused(where, "holds no signature after the 4-byte key hash")
        signatures.append(NoteSignature(name, raw[:KEY_HASH_SIZE], raw[KEY_HASH_SIZE:]))
    return Note(text, tuple(signatures))


def open_note(msg: bytes | str, known: Sequence[VerifierKey]) -> OpenedNote:
    """Parse a signed note and verify it against the known keys (c2sp.org/signed-note,
    Signatures): lines by unknown keys are ignored; a known key's line that fails, or
    appears twice, rejects the whole note; at least one known key must verify."""
    by_id: dict[tuple[str, bytes], VerifierKey] = {}
    for known_key in known:
        ident = (known_key.name, known_key.key_hash)
        if ident in by_id:
            raise NoteRefused("known keys", f"key {ident[0]}+{ident[1].hex()} is listed twice")
        by_id[ident] = known_key
    note = parse_note(msg)
    text = note.text.encode("utf-8")
    verified: list[tuple[VerifierKey, NoteSignature]] = []
    unverified: list[NoteSignature] = []
    seen: set[tuple[str, bytes]] = set()
    for sig in note.signatures:
        ident = (sig.name, sig.key_hash)
        key = by_id.get(ident)
        if key is None:
            unverified.append(sig)
            continue
        if ident in seen:
            raise NoteRefused(
                "note", f"key {sig.name}+{sig.key_hash.hex()} signs it more than once"
            )
        seen.add(ident)
        if not key.verify(text, sig.signature):
            raise NoteSignatureInvalid(
                "note", f"the signature by known key {sig.name}+{sig.key_hash.hex()} is invalid"
            )
        verified.append((key, sig))
    if not verified:
        raise NoteUnverified("note", "no signature by a known key")
    return OpenedNote(note.text, tuple(verified), tuple(unverified))
