"""§7 item 17: a receipt that does not verify is distinct from one covering another head (§6.8)."""

from joulepool.ledger.cose import content_address
from joulepool.ledger.witness import WitnessError, check_witness, sign_witness
from tests.support.ledgers import STEWARD, WITNESS, admitted, seal_all

LEDGER = seal_all([admitted("c1"), admitted("c2"), admitted("c3")])
HEADS = [content_address(e) for e in LEDGER]


def check(receipt: bytes, length: int = 3) -> object:
    return check_witness(
        receipt,
        "auditor",
        WITNESS.public_key,
        "steward",
        STEWARD.public_key,
        length,
        lambda n: HEADS[n - 1],
    )


def test_a_signature_that_does_not_verify_is_a_bad_witness_signature() -> None:
    receipt = bytearray(sign_witness(WITNESS, "steward", HEADS[2], 3, 0))
    receipt[-3] ^= 0x40
    assert check(bytes(receipt)).error is WitnessError.bad_witness_signature  # type: ignore[attr-defined]


def test_a_rewritten_history_verifies_but_covers_a_different_head() -> None:
    rewritten = seal_all([admitted("c1"), admitted("c2-rewritten"), admitted("c3")])
    receipt = sign_witness(WITNESS, "steward", content_address(rewritten[1]), 2, 0)
    assert check(receipt).error is WitnessError.covers_different_head  # type: ignore[attr-defined]


def test_a_receipt_beyond_the_ledger_covers_a_different_head() -> None:
    receipt = sign_witness(WITNESS, "steward", HEADS[2], 3, 0)
    # The ledger as now presented has only 2 entries: it was truncated after the witness saw 3.
    assert check(receipt, 2).error is WitnessError.covers_different_head  # type: ignore[attr-defined]


def test_the_matching_receipt_verifies() -> None:
    assert check(sign_witness(WITNESS, "steward", HEADS[2], 3, 0)).error is None  # type: ignore[attr-defined]
