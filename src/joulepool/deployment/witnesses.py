"""The witness receipts a deployment keeps, and the attestation they give it (§6.7, §6.8).

A deployment's `witnesses/` folder holds, for each witness, its public key
(`NAME.pub`, a COSE_Key) and the receipts it signed (`NAME-LENGTH.receipt`, the
COSE_Sign1 bytes). Only receipts that verified against the ledger are kept, and each is
written whole or not at all. A kept receipt is also a mark of what the deployment
acknowledged (`ledger.rollback`): a ledger shorter than it, or with another head at its
length, is refused.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from joulepool.errors import DiskFull, InvalidInput, KeyFileError, StoreError, no_space
from joulepool.files import write_atomically
from joulepool.ledger.keys import KeyPair, load_key_file, write_key_file
from joulepool.ledger.rollback import HighWater, Mark
from joulepool.ledger.witness import (
    AttestationReport,
    best_attestation,
    check_witness,
    verified_statement,
)

_SAFE = re.compile(r"^[A-Za-z0-9._@-]{1,128}$")


@dataclass(frozen=True, slots=True)
class KeptReceipt:
    """A witness's receipt and key, as the deployment keeps them."""

    witness: str
    public_key: bytes
    receipt: bytes
    name: str = ""


def safe_name(witness: str) -> str:
    """A witness id usable as a file name, refused otherwise."""
    if not _SAFE.match(witness):
        raise InvalidInput(
            "witness", "a witness id of letters, digits, '.', '_', '@' or '-' (1 to 128)"
        )
    return witness


def load_receipts(folder: Path, problems: list[str] | None = None) -> list[KeptReceipt]:
    """Every receipt kept under `folder`, with its witness's key.

    A receipt whose witness key is missing or unreadable cannot vouch for anything and is
    left out; where `problems` is given, a sentence naming it is added there.
    """
    if not folder.is_dir():
        return []
    kept: list[KeptReceipt] = []
    for path in sorted(folder.glob("*.receipt")):
        witness = path.stem.rsplit("-", 1)[0]
        key_path = folder / f"{witness}.pub"
        try:
            key = load_key_file(key_path)
            receipt = path.read_bytes()
        except (KeyFileError, OSError) as exc:
            if problems is not None:
                problems.append(f"{path.name} left out: {exc}")
            continue
        kept.append(KeptReceipt(witness, key.public_key, receipt, path.name))
    return kept


def keep_receipt(
    folder: Path, witness: str, public_key: bytes, receipt: bytes, length: int
) -> Path:
    """Store a receipt that verified, with its witness's public key, each file whole.

    Raises `DiskFull` where there is no room; what was kept before is unchanged.
    """
    name = safe_name(witness)
    try:
        folder.mkdir(exist_ok=True)
    except OSError as exc:
        raise _write_error(folder, exc) from None
    key_path = folder / f"{name}.pub"
    if key_path.exists():
        if load_key_file(key_path).public_key != public_key:
            raise InvalidInput(
                "public_key_hex", f"witness {witness!r} is known here with another key"
            )
    else:
        try:
            write_key_file(key_path, KeyPair(witness, public_key, None))
        except KeyFileError as exc:  # a full disk is DiskFull, and passes through as it is
            raise StoreError(f"cannot keep the witness's key: {exc}") from None
    path = folder / f"{name}-{length}.receipt"
    try:
        write_atomically(path, receipt, 0o644)
    except OSError as exc:
        raise _write_error(path, exc) from None
    return path


def _write_error(path: Path, exc: OSError) -> StoreError:
    if no_space(exc):
        return DiskFull(f"{path}: no space left to keep the witness receipt; nothing was kept")
    return StoreError(f"{path}: cannot keep the witness receipt ({exc.strerror or exc})")


def receipt_marks(
    kept: list[KeptReceipt], steward: str, problems: list[str] | None = None
) -> list[Mark]:
    """The points the kept receipts vouch for, as marks a ledger must reach (§6.1, §6.7).

    Only a receipt that verifies under its witness's key counts; one that does not is
    evidence of nothing (it is named in `problems`), and so is one over another steward's
    ledger. A receipt at length 0 covers no entry.
    """
    marks: list[Mark] = []
    for k in kept:
        statement = verified_statement(k.receipt, k.witness, k.public_key)
        if statement is None:
            if problems is not None:
                problems.append(
                    f"{k.name or k.witness}: does not verify as {k.witness!r}'s receipt"
                )
            continue
        if statement.steward != steward:
            if problems is not None:
                problems.append(f"{k.name or k.witness}: covers steward {statement.steward!r}")
            continue
        if statement.length:
            point = HighWater(statement.length, statement.head)
            marks.append(Mark(f"witness receipt {k.name or k.witness}", point))
    return marks


def attestation(
    kept: list[KeptReceipt],
    steward: str,
    steward_public_key: bytes,
    length: int,
    head_at: Callable[[int], bytes],
) -> AttestationReport:
    """The ledger's grade by its kept receipts: witnessed through the longest that verifies."""
    reports = [
        check_witness(
            k.receipt, k.witness, k.public_key, steward, steward_public_key, length, head_at
        )
        for k in kept
    ]
    return best_attestation(reports, length)


def kept_marks(folder: Path, steward: str) -> tuple[list[Mark], list[str]]:
    """The marks the receipts kept in `folder` set for `steward`'s ledger, and those the
    cosigned checkpoints kept there set (DESIGN.md §8: evidence exactly like a receipt), and
    a sentence for each kept file that could not count (§6.1, §6.7)."""
    from joulepool.deployment.cosigned import cosigned_marks

    problems: list[str] = []
    marks = receipt_marks(load_receipts(folder, problems), steward, problems)
    marks += cosigned_marks(folder, problems)
    return marks, problems
