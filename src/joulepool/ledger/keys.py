"""Ed25519 keys as COSE_Key files (RFC 9052 §7, RFC 9053 §7.2, DESIGN.md §4).

    {1: 1 (kty OKP), 2: kid, -1: 6 (crv Ed25519), -2: x (public key), -4: d (seed, secret)}

encoded det-CBOR. A secret key file is written with mode 0600 and refused when group or
others may read or write it; a public key file leaves `d` out.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Final

from nacl.signing import SigningKey

from joulepool.errors import DiskFull, KeyFileError, no_space
from joulepool.files import write_atomically
from joulepool.ledger.cbor import CborRefused, decode_strict, encode

KTY: Final = 1
KID: Final = 2
CRV: Final = -1
X: Final = -2
D: Final = -4
KTY_OKP: Final = 1
CRV_ED25519: Final = 6


@dataclass(frozen=True)
class KeyPair:
    """An Ed25519 key: its identifier, its public key and, unless public-only, its seed."""

    kid: str
    public_key: bytes
    seed: bytes | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.kid, str) or not self.kid:
            raise KeyFileError("a key's kid must be a non-empty string")
        if len(self.public_key) != 32:
            raise KeyFileError("an Ed25519 public key is 32 bytes")
        if self.seed is not None:
            if len(self.seed) != 32:
                raise KeyFileError("an Ed25519 secret seed is 32 bytes")
            if bytes(SigningKey(self.seed).verify_key) != self.public_key:
                raise KeyFileError(f"key {self.kid!r}: the public key does not match the secret")

    @classmethod
    def generate(cls, kid: str) -> KeyPair:
        """A new random key (libsodium's generator)."""
        signing = SigningKey.generate()
        return cls(kid, bytes(signing.verify_key), bytes(signing))

    @classmethod
    def from_seed(cls, kid: str, seed: bytes) -> KeyPair:
        """The key a 32-byte seed determines (Ed25519 keys are deterministic from it)."""
        if len(seed) != 32:
            raise KeyFileError("an Ed25519 secret seed is 32 bytes")
        return cls(kid, bytes(SigningKey(seed).verify_key), seed)

    @cached_property
    def signing_key(self) -> SigningKey:
        """The PyNaCl signing key; refused for a public-only key."""
        if self.seed is None:
            raise KeyFileError(f"key {self.kid!r} is public only: it cannot sign")
        return SigningKey(self.seed)

    def public(self) -> KeyPair:
        """The same key without its secret."""
        return KeyPair(self.kid, self.public_key)

    def to_cose_key(self) -> bytes:
        """The det-CBOR COSE_Key of this key (the secret included if present)."""
        doc: dict[int, object] = {
            KTY: KTY_OKP,
            KID: self.kid.encode("utf-8"),
            CRV: CRV_ED25519,
            X: self.public_key,
        }
        if self.seed is not None:
            doc[D] = self.seed
        return encode(doc)

    @classmethod
    def from_cose_key(cls, data: bytes, where: str = "key") -> KeyPair:
        """Read a det-CBOR COSE_Key of an Ed25519 key, refusing any other shape."""
        try:
            doc = decode_strict(data)
        except CborRefused as exc:
            raise KeyFileError(
                f"{where}: not a det-CBOR COSE_Key ({exc.error}: {exc.detail})"
            ) from None
        if not isinstance(doc, dict):
            raise KeyFileError(f"{where}: a COSE_Key is a map")
        extra = set(doc) - {KTY, KID, CRV, X, D}
        if extra:
            raise KeyFileError(f"{where}: unexpected COSE_Key labels {sorted(map(str, extra))}")
        if doc.get(KTY) != KTY_OKP or doc.get(CRV) != CRV_ED25519:
            raise KeyFileError(f"{where}: not an Ed25519 key (kty must be 1 OKP, crv 6 Ed25519)")
        kid, x, d = doc.get(KID), doc.get(X), doc.get(D)
        if not isinstance(kid, bytes) or not kid:
            raise KeyFileError(f"{where}: the key has no kid")
        if not isinstance(x, bytes) or len(x) != 32:
            raise KeyFileError(f"{where}: x must be the 32-byte public key")
        if d is not None and (not isinstance(d, bytes) or len(d) != 32):
            raise KeyFileError(f"{where}: d must be the 32-byte secret seed")
        try:
            name = kid.decode("utf-8")
        except UnicodeDecodeError:
            raise KeyFileError(f"{where}: the kid is not UTF-8") from None
        try:
            return cls(name, x, d)
        except KeyFileError as exc:
            raise KeyFileError(f"{where}: {exc}") from None


def write_key_file(path: Path, key: KeyPair, *, overwrite: bool = False) -> None:
    """Write a COSE_Key file atomically: 0600 with a secret, 0644 public-only (DESIGN.md §4).

    Refuses to replace an existing file unless `overwrite`.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise KeyFileError(f"{path} exists; a key file is never overwritten")
    mode = 0o600 if key.seed is not None else 0o644
    try:
        write_atomically(path, key.to_cose_key(), mode)
    except OSError as exc:
        if no_space(exc):
            raise DiskFull(
                f"{path}: no space left to write the key file; nothing was written"
            ) from None
        raise KeyFileError(f"{path}: cannot write: {exc.strerror or exc}") from None


def refuse_open_secret(path: Path, mode: int, what: str) -> None:
    """Refuse a secret file that group or others may read or change (docs/reliability.md §5).

    The steward's key and `pool serve`'s TLS key share this rule and its sentence, so an
    operator meets one wording and one fix for either.
    """
    if mode & 0o077:
        raise KeyFileError(
            f"{path}: {what} with mode {stat.S_IMODE(mode):04o} is open to other users; "
            f"run `chmod 600 {path}`"
        )


def load_key_file(path: Path, *, require_secret: bool = False) -> KeyPair:
    """Load a COSE_Key file; a secret key readable or writable by others is refused."""
    path = Path(path)
    try:
        info = path.stat()
        data = path.read_bytes()
    except FileNotFoundError:
        raise KeyFileError(f"{path}: no such key file") from None
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot read: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise KeyFileError(f"{path}: not a regular file")
    key = KeyPair.from_cose_key(data, str(path))
    if key.seed is not None:
        refuse_open_secret(path, info.st_mode, "a secret key")
    if require_secret and key.seed is None:
        raise KeyFileError(f"{path}: this is a public key; signing needs the secret key file")
    return key
