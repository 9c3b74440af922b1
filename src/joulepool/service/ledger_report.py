"""The ledger's length, head and attestation as `GET /v1/ledger`, `/metrics` and the
dashboard report them (§6.8, API.md): one answer, read once per request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from joulepool.deployment.witnesses import attestation, load_receipts
from joulepool.ledger.witness import Attestation
from joulepool.pool import Pool


def ledger_report(pool: Pool, witnesses: Path | None, *, witness: bool = False) -> dict[str, Any]:
    """`{"steward", "length", "head_hex", "attestation", "witnessed_through"?}` (API.md
    `GET /v1/ledger`): the attestation the deployment's kept receipts give the ledger now.
    With `witness`, also who witnessed it and when it signed (`"witness"`,
    `"witnessed_at_ms"`, from the receipt's own statement, §6.7), for the dashboard."""
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
        if witness and report.statement is not None:
            out["witness"] = report.statement.witness
            out["witnessed_at_ms"] = report.statement.at_ms
    return out
