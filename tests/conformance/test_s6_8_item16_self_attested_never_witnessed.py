"""§7 item 16: an unwitnessed ledger is graded self-attested, never reported witnessed (§6.8)."""

from joulepool.ledger.cose import content_address
from joulepool.ledger.replay import replay
from joulepool.ledger.witness import Attestation, best_attestation, check_witness, sign_witness
from tests.support.ledgers import STEWARD, WITNESS, admitted, seal_all


def test_no_receipt_is_self_attested_and_still_verifies() -> None:
    ledger = seal_all([admitted("c1"), admitted("c2")])
    assert replay(ledger, STEWARD.kid, STEWARD.public_key).length == 2
    report = best_attestation([], 2)
    assert report.attestation is Attestation.self_attested
    assert report.through is None
    assert report.to_json() == {"attestation": "self-attested", "length": 2}


def test_witnessed_through_a_length_and_self_attested_after_it() -> None:
    ledger = seal_all([admitted("c1"), admitted("c2"), admitted("c3")])
    heads = [content_address(e) for e in ledger]
    receipt = sign_witness(WITNESS, "steward", heads[1], 2, 0, STEWARD.public_key)
    report = check_witness(
        receipt,
        "auditor",
        WITNESS.public_key,
        "steward",
        STEWARD.public_key,
        3,
        lambda n: heads[n - 1],
    )
    assert report.to_json() == {"attestation": "witnessed", "through": 2, "length": 3}
    refused = check_witness(
        receipt[:-1] + bytes([receipt[-1] ^ 1]),
        "auditor",
        WITNESS.public_key,
        "steward",
        STEWARD.public_key,
        3,
        lambda n: heads[n - 1],
    )
    assert best_attestation([refused], 3).attestation is Attestation.self_attested
