"""The witness receipts a deployment keeps, and the attestation they give it (§6.7, §6.8).

A deployment's `witnesses/` folder holds, for each witness, its public key
(`NAME.pub`, a COSE_Key) and the receipts it signed (`NAME-LENGTH.receipt`, the
COSE_Sign1 bytes). Only receipts that verified against the ledger are kept.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from joulepool.errors import InvalidInput
from joulepool.ledger.keys import KeyPair, load_key_file, write_key_file
from joulepool.ledger.witness import AttestationReport, best_attestation, check_witness

_SAFE = re.compile(r"^[A-Za-z0-9._@-]{1,128}$")


@dataclass(frozen=True, slots=True)
class KeptReceipt:
    """A witness's receipt and key, as the deployment keeps them."""

    witness: str
    public_key: bytes
    receipt: bytes


def safe_name(witness: str) -> str:
    """A witness id usable as a file name, refused otherwise."""
    if not _SAFE.match(witness):
        raise InvalidInput(
            "witness", "a witness id of letters, digits, '.', '_', '@' or '-' (1 to 128)"
        )
    return witness


def load_receipts(folder: Path) -> list[KeptReceipt]:
    """Every receipt kept under `folder`, with its witness's key."""
    if not folder.is_dir():
        return []
    kept: list[KeptReceipt] = []
    for path in sorted(folder.glob("*.receipt")):
        witness = path.stem.rsplit("-", 1)[0]
        key_path = folder / f"{witness}.pub"
        if not key_path.exists():
            continue
        key = load_key_file(key_path)
        kept.append(KeptReceipt(witness, key.public_key, path.read_bytes()))
    return kept


def keep_receipt(
    folder: Path, witness: str, public_key: bytes, receipt: bytes, length: int
) -> Path:
    """Store a receipt that verified, with its witness's public key."""
    folder.mkdir(exist_ok=True)
    name = safe_name(witness)
    key_path = folder / f"{name}.pub"
    if key_path.exists():
        if load_key_file(key_path).public_key != public_key:
            raise InvalidInput(
                "public_key_hex", f"witness {witness!r} is known here with another key"
            )
    else:
        write_key_file(key_path, KeyPair(witness, public_key, None))
    path = folder / f"{name}-{length}.receipt"
    path.write_bytes(receipt)
    return path


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
