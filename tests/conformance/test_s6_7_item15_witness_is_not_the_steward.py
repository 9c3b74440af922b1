"""§7 item 15: refuse a witness whose key is the steward's (§6.7)."""

import pytest

from joulepool.errors import WitnessRefused
from joulepool.ledger.keys import KeyPair
from joulepool.ledger.witness import Attestation, WitnessError, check_witness, sign_witness
from tests.support.ledgers import STEWARD, WITNESS

HEAD = bytes(range(32))


def test_signing_as_a_witness_with_the_stewards_key_is_refused() -> None:
    same_key = KeyPair("auditor", STEWARD.public_key, STEWARD.seed)
    with pytest.raises(WitnessRefused) as info:
        sign_witness(same_key, "steward", HEAD, 1, 0, STEWARD.public_key)
    assert info.value.error == "witness_is_steward"


def test_a_receipt_from_the_stewards_key_grades_nothing() -> None:
    same_key = KeyPair("auditor", STEWARD.public_key, STEWARD.seed)
    receipt = sign_witness(same_key, "steward", HEAD, 1, 0)
    report = check_witness(
        receipt, "auditor", STEWARD.public_key, "steward", STEWARD.public_key, 1, lambda n: HEAD
    )
    assert (report.attestation, report.error) == (
        Attestation.self_attested,
        WitnessError.witness_is_steward,
    )


def test_a_witness_with_its_own_key_is_accepted() -> None:
    receipt = sign_witness(WITNESS, "steward", HEAD, 1, 0, STEWARD.public_key)
    report = check_witness(
        receipt, "auditor", WITNESS.public_key, "steward", STEWARD.public_key, 1, lambda n: HEAD
    )
    assert (report.attestation, report.through) == (Attestation.witnessed, 1)
