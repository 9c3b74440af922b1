"""Signature checks in bulk, as replay makes them (standard §6.5, RFC 9052 §4.4)."""

from __future__ import annotations

from nacl.signing import VerifyKey

from joulepool.ledger.cose import first_forged, open_envelope, sig_structure, verify_parts
from tests.support.ledgers import OTHER, STEWARD, twenty


def _parts() -> list[tuple[bytes, bytes, bytes]]:
    return [(e.protected, e.payload, e.signature) for e in map(open_envelope, twenty())]


def test_s6_5_every_signature_of_a_sealed_ledger_verifies() -> None:
    parts = _parts()
    assert first_forged(parts, STEWARD.public_key) is None
    # The same verdict as PyNaCl's own API on the same Sig_structure.
    key = VerifyKey(STEWARD.public_key)
    for protected, payload, signature in parts:
        key.verify(sig_structure(protected, payload), signature)
        assert verify_parts(protected, payload, signature, STEWARD.public_key)


def test_s6_5_the_first_forged_signature_is_found_by_position() -> None:
    parts = _parts()
    for bad in (0, 7, 19):
        tampered = list(parts)
        for at in range(bad, min(bad + 2, 20)):  # a second forgery after it changes nothing
            protected, payload, signature = tampered[at]
            tampered[at] = (protected, payload, bytes([signature[0] ^ 1]) + signature[1:])
        assert first_forged(tampered, STEWARD.public_key) == bad


def test_s6_5_a_signature_over_other_bytes_is_forged() -> None:
    parts = _parts()
    protected, payload, signature = parts[3]
    parts[3] = (protected, payload[:-1] + bytes([payload[-1] ^ 1]), signature)
    assert first_forged(parts, STEWARD.public_key) == 3


def test_s6_5_another_key_verifies_nothing() -> None:
    assert first_forged(_parts(), OTHER.public_key) == 0


def test_s6_5_a_key_or_a_signature_of_the_wrong_length_verifies_nothing() -> None:
    parts = _parts()
    assert first_forged(parts, STEWARD.public_key[:31]) == 0
    assert first_forged(parts, STEWARD.public_key + b"\x00") == 0
    protected, payload, signature = parts[5]
    parts[5] = (protected, payload, signature[:63])
    assert first_forged(parts, STEWARD.public_key) == 5
    assert not verify_parts(protected, payload, signature + b"\x00", STEWARD.public_key)
    assert first_forged([], STEWARD.public_key[:31]) is None
