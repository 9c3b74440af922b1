"""§7 item 13: every entry a pool/1 JCR-1 receipt; authenticity and sequence both checked (§6.5)."""

import cbor2
import pytest

from joulepool.errors import LedgerRefused
from joulepool.ledger.cose import GENESIS, content_address, open_envelope, seal, verify_signature
from joulepool.ledger.entry import core_of
from joulepool.ledger.replay import replay
from tests.support.ledgers import OTHER, STEWARD, admitted, seal_all


def test_an_entry_is_a_cose_sign1_with_eddsa_and_the_steward_as_kid() -> None:
    raw = seal_all([admitted("c1")])[0]
    tag = cbor2.loads(raw)
    assert tag.tag == 18
    protected, unprotected, payload, signature = tag.value
    assert cbor2.loads(protected) == {1: -8, 4: b"steward"}
    assert dict(unprotected) == {}
    assert len(signature) == 64
    core = cbor2.loads(payload)
    assert core["pool_receipt"] == 1 and core["seq"] == 0 and core["prev"] == GENESIS
    assert core["steward"] == "steward" and core["event"] == "admitted"
    assert verify_signature(open_envelope(raw), STEWARD.public_key)


def test_signatures_without_the_chain_are_not_enough() -> None:
    ledger = seal_all([admitted("c1"), admitted("c2"), admitted("c3")])
    with pytest.raises(LedgerRefused) as info:
        replay([ledger[0], ledger[2]], STEWARD.kid, STEWARD.public_key)  # a valid subset
    assert (info.value.index, info.value.error) == (1, "seq_mismatch")
    forged_prev = seal(
        core_of(admitted("c2"), 1, bytes(32), "steward"), "steward", STEWARD.signing_key
    )
    with pytest.raises(LedgerRefused) as info:
        replay([ledger[0], forged_prev], STEWARD.kid, STEWARD.public_key)
    assert (info.value.index, info.value.error) == (1, "broken_chain")


def test_a_chain_without_the_stewards_signatures_is_not_enough() -> None:
    ledger = seal_all(
        [admitted("c1"), admitted("c2")], key=OTHER
    )  # consistent, same kid, other key
    with pytest.raises(LedgerRefused) as info:
        replay(ledger, STEWARD.kid, STEWARD.public_key)
    assert (info.value.index, info.value.error) == (0, "bad_signature")
    genuine = seal_all([admitted("c1")])
    foreign = seal(
        core_of(admitted("c2"), 1, content_address(genuine[0]), "mallory"),
        "mallory",
        OTHER.signing_key,
    )
    with pytest.raises(LedgerRefused) as info:
        replay([genuine[0], foreign], STEWARD.kid, STEWARD.public_key)
    assert (info.value.index, info.value.error) == (1, "unknown_signer")


def test_a_genuine_ledger_verifies() -> None:
    assert (
        replay(seal_all([admitted("c1"), admitted("c2")]), STEWARD.kid, STEWARD.public_key).length
        == 2
    )
