"""Witness receipts (pool-witness/1) and the attestation they grade (standard §6.7, §6.8).

A witness holds a key the steward does not and signs the ledger's head at a stated length.
A receipt from the steward's own key establishes nothing and is refused; a receipt that
does not verify (`bad_witness_signature`) is kept distinct from one that verifies but covers
a different head or length (`covers_different_head`), which is what a rewritten history
looks like from outside. A ledger with no valid receipt is `self-attested`, never witnessed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from joulepool.checks import check_figure, check_text
from joulepool.errors import WitnessRefused
from joulepool.ledger.cbor import CborRefused
from joulepool.ledger.cose import open_envelope, seal, verify_signature
from joulepool.ledger.keys import KeyPair

WITNESS_VERSION = 1
_FIELDS = frozenset({"pool_witness", "steward", "witness", "head", "length", "at_ms"})


class Attestation(StrEnum):
    """How far a reader may trust a ledger's sequence (§6.8)."""

    self_attested = "self-attested"
    witnessed = "witnessed"


class WitnessError(StrEnum):
    """The three refusals of a witness receipt, kept distinct (§6.7, §6.8)."""

    witness_is_steward = "witness_is_steward"
    bad_witness_signature = "bad_witness_signature"
    covers_different_head = "covers_different_head"


@dataclass(frozen=True, slots=True)
class WitnessStatement:
    """What a verified receipt says: this steward's chain reached `head` at `length`."""

    steward: str
    witness: str
    head: bytes
    length: int
    at_ms: int


@dataclass(frozen=True, slots=True)
class AttestationReport:
    """A ledger's grade: witnessed through a length, or self-attested with the reason (§6.8)."""

    attestation: Attestation
    length: int
    through: int | None = None
    error: WitnessError | None = None
    statement: WitnessStatement | None = None

    def to_json(self) -> dict[str, object]:
        """The CONFORMANCE.md `check_witness` result."""
        out: dict[str, object] = {"attestation": self.attestation.value, "length": self.length}
        if self.through is not None:
            out["through"] = self.through
        if self.error is not None:
            out["error"] = self.error.value
        return out


def sign_witness(
    witness_key: KeyPair,
    steward: str,
    head: bytes,
    length: int,
    at_ms: int,
    steward_public_key: bytes | None = None,
) -> bytes:
    """Seal a pool-witness/1 receipt over `head` at `length` (§6.7).

    Refuses with `witness_is_steward` where the witness's key is the steward's.
    """
    check_text(steward, "steward")
    check_figure(length, "length")
    check_figure(at_ms, "at_ms")
    if len(head) != 32:
        raise WitnessRefused("invalid_head", "a head is a 32-byte SHA-256 content address")
    if steward_public_key is not None and witness_key.public_key == steward_public_key:
        raise WitnessRefused(
            WitnessError.witness_is_steward, "a witness must hold a key the steward does not"
        )
    core = {
        "pool_witness": WITNESS_VERSION,
        "steward": steward,
        "witness": witness_key.kid,
        "head": head,
        "length": length,
        "at_ms": at_ms,
    }
    return seal(core, witness_key.kid, witness_key.signing_key)


def _statement(core: dict[str, Any]) -> WitnessStatement | None:
    if set(core) != _FIELDS or core.get("pool_witness") != WITNESS_VERSION:
        return None
    steward, witness, head = core["steward"], core["witness"], core["head"]
    length, at_ms = core["length"], core["at_ms"]
    if not (isinstance(steward, str) and isinstance(witness, str) and isinstance(head, bytes)):
        return None
    if len(head) != 32 or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (length, at_ms)
    ):
        return None
    return WitnessStatement(steward, witness, head, length, at_ms)


def check_witness(
    receipt: bytes,
    witness: str,
    witness_public_key: bytes,
    steward: str,
    steward_public_key: bytes,
    length: int,
    head_at: Callable[[int], bytes],
) -> AttestationReport:
    """Grade a ledger of `length` entries by one witness receipt (§6.7, §6.8).

    `head_at(n)` is the ledger's head after its first `n` entries. The refusals are
    checked in order: the witness's key is the steward's; the receipt does not verify as
    this witness's pool-witness/1 statement; it verifies but its length exceeds the ledger
    or its head differs from the ledger's head at that length. A receipt that passes all
    three at length 0 covers no entry: the ledger stays self-attested, with no error, since
    `witnessed` always means through at least one entry (DESIGN.md §3, "Edge cases, pinned").
    """
    if witness_public_key == steward_public_key:
        return AttestationReport(
            Attestation.self_attested, length, error=WitnessError.witness_is_steward
        )
    statement = verified_statement(receipt, witness, witness_public_key)
    if statement is None:
        return AttestationReport(
            Attestation.self_attested, length, error=WitnessError.bad_witness_signature
        )
    if (
        statement.steward != steward
        or statement.length > length
        or head_at(statement.length) != statement.head
    ):
        return AttestationReport(
            Attestation.self_attested,
            length,
            error=WitnessError.covers_different_head,
            statement=statement,
        )
    if statement.length == 0:
        return AttestationReport(Attestation.self_attested, length, statement=statement)
    return AttestationReport(
        Attestation.witnessed, length, through=statement.length, statement=statement
    )


def best_attestation(reports: Iterable[AttestationReport], length: int) -> AttestationReport:
    """The strongest grade among several receipts: witnessed through the longest length (§6.8).

    Only a report witnessed through at least one entry counts (DESIGN.md §3, pinned).
    """
    witnessed = [
        r
        for r in reports
        if r.attestation is Attestation.witnessed and r.through is not None and r.through >= 1
    ]
    if not witnessed:
        return AttestationReport(Attestation.self_attested, length)
    return max(witnessed, key=lambda r: r.through or 0)


def verified_statement(
    receipt: bytes, witness: str, witness_public_key: bytes
) -> WitnessStatement | None:
    """What a receipt says, if it verifies as `witness`'s pool-witness/1 statement (§6.7).

    None for anything else: bytes that are not a COSE_Sign1, a core that is not a witness
    statement, another kid, or a signature that fails.
    """
    try:
        env = open_envelope(receipt)
    except CborRefused:
        return None
    statement = _statement(env.core)
    if env.kid != witness or statement is None or statement.witness != witness:
        return None
    if not verify_signature(env, witness_public_key):
        return None
    return statement
