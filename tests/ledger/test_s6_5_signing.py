"""The writer's Ed25519 signatures are PyNaCl's, byte for byte (§6.5; ledger/signing.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from nacl.signing import SigningKey

from joulepool.ledger import signing
from joulepool.ledger.signing import sign_detached


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.binary(min_size=32, max_size=32), st.binary(max_size=2048))
def test_s6_5_the_lock_holding_signature_is_pynacls(seed: bytes, message: bytes) -> None:
    key = SigningKey(seed)
    signature = sign_detached(key, message)
    assert signature == key.sign(message).signature
    key.verify_key.verify(message, signature)  # and it verifies


def test_s6_5_the_lock_holding_call_is_in_use_here() -> None:
    # On Linux wheels of PyNaCl libsodium's symbols are exported; if this fails, the
    # fallback (PyNaCl's own call) signs correctly but slowly under load.
    assert signing._SIGN is not None
