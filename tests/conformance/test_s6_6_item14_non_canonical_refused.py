"""§7 item 14: a signed core that decodes but is not canonical is refused (§6.6)."""

import pytest

from joulepool.errors import LedgerRefused
from joulepool.ledger.cbor import encode
from joulepool.ledger.cose import envelope_bytes, protected_header, sig_structure
from joulepool.ledger.entry import core_of
from joulepool.ledger.replay import replay
from tests.support.ledgers import STEWARD, admitted, seal_all


def sign_payload(payload: bytes) -> bytes:
    protected = protected_header("steward")
    return envelope_bytes(
        protected, payload, STEWARD.signing_key.sign(sig_structure(protected, payload)).signature
    )


def canonical_payload() -> bytes:
    return encode(core_of(admitted("c1"), 0, bytes(32), "steward"))


@pytest.mark.parametrize(
    "mutate",
    [
        lambda p: p.replace(b"\x63seq\x00", b"\x63seq\x18\x00"),  # a non-shortest integer
        lambda p: b"\xbf" + p[1:] + b"\xff",  # the same map with an indefinite length
        lambda p: p.replace(b"\x63seq\x00", b"\x63seq\xf9\x00\x00"),  # a float where an int was
        lambda p: p.replace(b"\x63seq\x00", b"\x63seq\xf4"),  # a bool
        lambda p: p.replace(b"\x63seq\x00", b"\x63seq\xc2\x41\x00"),  # a bignum tag
    ],
    ids=["non-shortest-int", "indefinite-map", "float", "bool", "tag"],
)
def test_a_validly_signed_non_canonical_core_is_refused(mutate: object) -> None:
    payload = mutate(canonical_payload())  # type: ignore[operator]
    assert payload != canonical_payload()
    with pytest.raises(LedgerRefused) as info:
        replay([sign_payload(payload)], STEWARD.kid, STEWARD.public_key)
    assert (info.value.index, info.value.error) == (0, "non_canonical")


def test_the_canonical_encoding_of_the_same_core_is_accepted() -> None:
    assert sign_payload(canonical_payload()) == seal_all([admitted("c1")])[0]
    assert replay([sign_payload(canonical_payload())], STEWARD.kid, STEWARD.public_key).length == 1
