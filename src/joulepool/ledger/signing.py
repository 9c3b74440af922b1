"""Ed25519 signatures for the writer, without handing the interpreter lock back and forth.

PyNaCl calls libsodium through cffi, which releases the interpreter lock for every call.
In `pool serve` the group-commit thread signs each entry while the event loop thread is
busy with HTTP: each signature (about 25 µs) gave the lock up and then waited for the
loop to yield it, up to the 5 ms switch interval, so a batch of 30 entries spent several
milliseconds waiting for 1 ms of signing. The same libsodium function, called through
`ctypes.PyDLL`, keeps the lock for its 25 µs. The signature is the same: Ed25519 is
deterministic, and `tests/ledger/test_s6_5_signing.py` checks it against PyNaCl's.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import nacl._sodium
from nacl.signing import SigningKey

SIGNATURE_BYTES = 64


def _holding_the_lock() -> Callable[[bytes, bytes], bytes] | None:
    """libsodium's `crypto_sign_detached` as a lock-holding call, where it can be found."""
    try:
        library = ctypes.PyDLL(nacl._sodium.__file__)
        function = library.crypto_sign_detached
    except (OSError, AttributeError):
        return None
    function.argtypes = [
        ctypes.c_char_p,
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_ulonglong,
        ctypes.c_char_p,
    ]
    function.restype = ctypes.c_int

    def sign(secret: bytes, message: bytes) -> bytes:
        out = ctypes.create_string_buffer(SIGNATURE_BYTES)
        if function(out, None, message, len(message), secret) != 0:
            raise ValueError("crypto_sign_detached failed")
        return out.raw

    return sign


_SIGN = _holding_the_lock()


def sign_detached(signing_key: SigningKey, message: bytes) -> bytes:
    """The Ed25519 signature of `message` (RFC 8032), as `SigningKey.sign` makes it (§6.5)."""
    if _SIGN is None:
        return bytes(signing_key.sign(message).signature)
    # libsodium's secret key is the seed followed by the public key.
    return _SIGN(bytes(signing_key) + bytes(signing_key.verify_key), message)
