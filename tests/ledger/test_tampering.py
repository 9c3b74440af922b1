"""Tampering with a 20-entry ledger (§6.4, §6.5, §6.8): every single-byte change, dropped
entry, swap and truncation is refused at or before the index it touched, or, where what is
left is a valid shorter prefix, a witness receipt over the real head refuses it. Nothing is
ever accepted as a shorter or different history."""

from __future__ import annotations

from itertools import combinations

import pytest

from joulepool.conformance.ledger_ops import replay_bytes, split_ledger
from joulepool.errors import LedgerRefused
from joulepool.ledger.cose import GENESIS, content_address
from joulepool.ledger.witness import WitnessError, check_witness, sign_witness
from tests.support.ledgers import STEWARD, WITNESS, twenty

LEDGER = twenty()
DATA = b"".join(LEDGER)
STARTS = [sum(len(e) for e in LEDGER[:i]) for i in range(len(LEDGER))]
RECEIPT = sign_witness(WITNESS, "steward", content_address(LEDGER[-1]), 20, 0, STEWARD.public_key)


def entry_index(offset: int) -> int:
    return max(i for i, s in enumerate(STARTS) if s <= offset)


def refused_at_or_before(data: bytes, touched: int) -> None:
    """The ledger is refused at an index <= touched, or it is a strict prefix that the
    witness of the real 20-entry head does not cover."""
    try:
        replayer = replay_bytes(data, "steward", STEWARD.public_key)
    except LedgerRefused as exc:
        assert exc.index <= touched, (exc.index, touched, exc.error)
        return
    assert replayer.length < 20, "a tampered ledger was accepted as a 20-entry history"
    entries, _ = split_ledger(data)
    report = check_witness(
        RECEIPT,
        "auditor",
        WITNESS.public_key,
        "steward",
        STEWARD.public_key,
        replayer.length,
        lambda n: content_address(entries[n - 1]) if n else GENESIS,
    )
    assert report.error is WitnessError.covers_different_head


def test_the_untouched_ledger_verifies_and_is_witnessed() -> None:
    replayer = replay_bytes(DATA, "steward", STEWARD.public_key)
    assert replayer.length == 20
    report = check_witness(
        RECEIPT,
        "auditor",
        WITNESS.public_key,
        "steward",
        STEWARD.public_key,
        20,
        lambda n: content_address(LEDGER[n - 1]),
    )
    assert report.through == 20


@pytest.mark.parametrize("flip", [0x01, 0xFF])
def test_every_single_byte_change_is_refused(flip: int) -> None:
    for offset in range(len(DATA)):
        data = bytearray(DATA)
        data[offset] ^= flip
        refused_at_or_before(bytes(data), entry_index(offset))


def test_every_dropped_entry_is_refused() -> None:
    for k in range(20):
        refused_at_or_before(b"".join(LEDGER[:k] + LEDGER[k + 1 :]), k)


def test_every_swap_of_two_entries_is_refused() -> None:
    for i, j in combinations(range(20), 2):
        swapped = list(LEDGER)
        swapped[i], swapped[j] = swapped[j], swapped[i]
        refused_at_or_before(b"".join(swapped), i)


def test_every_truncation_is_refused() -> None:
    for cut in range(len(DATA)):
        touched = entry_index(cut) if cut < len(DATA) else 19
        refused_at_or_before(DATA[:cut], touched)
