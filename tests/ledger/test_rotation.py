"""Key rotation statements and the key schedule they set (DESIGN.md §4, "key rotation")."""

from __future__ import annotations

import pytest

from joulepool.errors import LedgerRefused
from joulepool.events import Admitted
from joulepool.grade import Energy, Grade
from joulepool.ledger.cose import GENESIS, content_address, seal
from joulepool.ledger.entry import seal_entry
from joulepool.ledger.keys import KeyPair
from joulepool.ledger.replay import replay
from joulepool.ledger.rotation import KeySchedule, RotationRefused, seal_rotation
from joulepool.ledger.snapshot import SnapshotRefused, open_snapshot, seal_snapshot
from joulepool.periods import NONE

A = KeyPair.from_seed("st", bytes(32))
B = KeyPair.from_seed("st", bytes([1]) * 32)
C = KeyPair.from_seed("st", bytes([2]) * 32)


def ledger(signers: list[KeyPair]) -> list[bytes]:
    out: list[bytes] = []
    head = GENESIS
    for seq, signer in enumerate(signers):
        event = Admitted(f"c{seq}", "e", 1, 1, Energy(5, Grade.Estimator), 0, 1000 + seq)
        raw = seal_entry(event, seq, head, "st", signer.signing_key)
        out.append(raw)
        head = content_address(raw)
    return out


def test_design_s4_rotation_hands_entries_on_from_its_from_seq() -> None:
    keys = KeySchedule.verified(
        "st", A.public_key, [seal_rotation(A, 2, B.public_key), seal_rotation(B, 4, C.public_key)]
    )
    assert [keys.key_at(i) for i in range(6)] == [A.public_key] * 2 + [B.public_key] * 2 + [
        C.public_key
    ] * 2
    replayed = replay(ledger([A, A, B, B, C, C]), "st", keys, workers=1)
    assert replayed.length == 6
    # The same across worker processes, whose batches must not cross a change of key.
    assert replay(ledger([A, A, B, B, C, C]), "st", keys, workers=2).head == replayed.head


def test_design_s4_entry_under_the_wrong_key_is_bad_signature_at_its_index() -> None:
    keys = KeySchedule.verified("st", A.public_key, [seal_rotation(A, 2, B.public_key)])
    with pytest.raises(LedgerRefused) as refused:
        replay(ledger([A, A, A]), "st", keys)
    assert (refused.value.index, refused.value.error) == (2, "bad_signature")
    with pytest.raises(LedgerRefused) as early:
        replay(ledger([A, B, B]), "st", keys)
    assert (early.value.index, early.value.error) == (1, "bad_signature")


def test_design_s4_rotation_across_a_batch_boundary_in_parallel_replay() -> None:
    # 600 entries, the key changing at 513: inside the second batch of 512.
    signers = [A] * 513 + [B] * 87
    keys = KeySchedule.verified("st", A.public_key, [seal_rotation(A, 513, B.public_key)])
    assert replay(ledger(signers), "st", keys, workers=2).length == 600
    assert replay(ledger(signers), "st", keys, workers=1).length == 600


@pytest.mark.parametrize(
    ("statements", "index", "why"),
    [
        ([seal_rotation(B, 2, C.public_key)], 0, "does not verify"),
        ([seal_rotation(A, 2, B.public_key), seal_rotation(B, 2, C.public_key)], 1, "exceed"),
        ([seal_rotation(A, 2, B.public_key), seal_rotation(A, 3, C.public_key)], 1, "verify"),
        ([b"\xa0"], 0, "not a rotation statement"),
        ([seal({"pool_key_rotation": 1, "steward": "st"}, "st", A.signing_key)], 0, "keys"),
        (
            [
                seal(
                    {
                        "pool_key_rotation": 2,
                        "steward": "st",
                        "from_seq": 1,
                        "public_key": bytes(32),
                    },
                    "st",
                    A.signing_key,
                )
            ],
            0,
            "not 1",
        ),
        (
            [
                seal(
                    {
                        "pool_key_rotation": 1,
                        "steward": "xx",
                        "from_seq": 1,
                        "public_key": bytes(32),
                    },
                    "st",
                    A.signing_key,
                )
            ],
            0,
            "names the steward",
        ),
        ([seal_rotation(KeyPair.from_seed("other", bytes(32)), 2, B.public_key)], 0, "steward"),
    ],
)
def test_design_s4_bad_rotation_is_refused_at_its_position(
    statements: list[bytes], index: int, why: str
) -> None:
    with pytest.raises(RotationRefused) as refused:
        KeySchedule.verified("st", A.public_key, statements)
    assert refused.value.index == index
    assert refused.value.error == "bad_rotation"
    assert why in refused.value.detail


def test_design_s4_a_snapshot_verifies_under_the_key_of_its_last_entry_or_the_incoming_one() -> (
    None
):
    keys = KeySchedule.verified(
        "st", A.public_key, [seal_rotation(A, 2, B.public_key), seal_rotation(B, 4, C.public_key)]
    )

    def accepted(length: int) -> list[str]:
        names = []
        for name, signer in (("A", A), ("B", B), ("C", C)):
            raw = seal_snapshot(signer, length, bytes(32), 1000, NONE, b"")
            try:
                open_snapshot(raw, "st", keys)
            except SnapshotRefused:
                continue
            names.append(name)
        return names

    # At a rotation length the outgoing key (its last entry) and the incoming one (sealing
    # before its first entry); elsewhere only the key of the last entry; a retired key
    # never speaks for entries past the ones it sealed.
    assert [accepted(n) for n in range(7)] == [
        ["A"],
        ["A"],
        ["A", "B"],
        ["B"],
        ["B", "C"],
        ["C"],
        ["C"],
    ]
