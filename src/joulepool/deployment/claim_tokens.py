"""Claim tokens: what a running job shows to report its own progress (API.md "Run time").

A claim's token is HMAC-SHA256 of its ledger id under the deployment's claim secret, so
nothing is stored per claim: the service derives the token it expects from the id in the
path, and `pool claim-token DIR CLAIM` derives the one to hand a job. The secret is 32
random bytes in `DIR/claim-token.secret`, mode 0600, made by `pool init` or by the first
`pool serve` or `pool claim-token`; a secret others may read is refused, naming the file.
A claim token authorises that claim's progress reports and nothing else.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path

from joulepool.errors import InvalidInput

CLAIM_SECRET = "claim-token.secret"  # noqa: S105 (a file name, not a secret)
"""The claim secret's file name inside a deployment folder."""

SECRET_BYTES = 32


def claim_secret(folder: Path, *, create: bool = True) -> bytes:
    """The deployment's claim secret, made with mode 0600 if absent and `create` is set
    (API.md "Run time"); a file other users may read or write, or of the wrong size, is
    refused as `invalid_input` naming it."""
    path = folder / CLAIM_SECRET
    if create and not path.exists():
        # Written whole beside it, then linked into place: a full disk or a crash never
        # leaves a short secret, and a secret another process made first is kept.
        tmp = folder / f".{CLAIM_SECRET}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(secrets.token_bytes(SECRET_BYTES))
                out.flush()
                os.fsync(out.fileno())
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    try:
        info = path.stat()
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InvalidInput(str(path), "no claim secret; pool serve makes one") from None
    except OSError as exc:
        raise InvalidInput(str(path), f"cannot read the claim secret: {exc.strerror}") from None
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise InvalidInput(str(path), "other users may read or change it; chmod 600 it")
    if len(raw) != SECRET_BYTES:
        raise InvalidInput(str(path), f"must hold exactly {SECRET_BYTES} bytes")
    return raw


def claim_token(secret: bytes, claim_id: str) -> str:
    """The token of claim `claim_id` (its ledger id): hex HMAC-SHA256 under `secret`."""
    return hmac.new(secret, claim_id.encode("utf-8"), hashlib.sha256).hexdigest()


def is_claim_token(secret: bytes, claim_id: str, token: str) -> bool:
    """Whether `token` is claim `claim_id`'s token, compared in constant time."""
    expected = claim_token(secret, claim_id).encode()
    return hmac.compare_digest(expected, token.encode("utf-8", "replace"))
