"""The ledger's length, head and attestation as `GET /v1/ledger`, `/metrics` and the
dashboard report them (§6.8, API.md): one answer, read once per request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from joulepool.ledger.witness import Attestation
from joulepool.pool import Pool
from joulepool.witnesses import attestation, load_receipts


def ledger_report(pool: Pool, witnesses: Path | None) -> dict[str, Any]:
    """`{"steward", "length", "head_hex", "attestation", "witnessed_through"?}` (API.md
    `GET /v1/ledger`): the attestation the deployment's kept receipts give the ledger now."""
    length, head = pool.snapshot()
    kept = load_receipts(witnesses) if witnesses else []
    report = attestation(kept, pool.steward, pool.key.public_key, length, pool.head_at)
    out: dict[str, Any] = {
        "steward": pool.steward,
        "length": length,
        "head_hex": head.hex(),
        "attestation": report.attestation.value,
    }
    if report.attestation is Attestation.witnessed:
        out["witnessed_through"] = report.through
    return out
