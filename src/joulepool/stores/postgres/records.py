"""What PostgreSQL records about a ledger beside its entries, as the store reads it back:
the configuration digest the replicas decide under, and a readiness probe's answer
(DESIGN.md §6)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RecordedConfig:
    """The configuration digest recorded for a ledger, who recorded it, and when."""

    digest: bytes
    by: str
    at: datetime.datetime | None = None

    def describe(self) -> str:
        """The digest in hex, with who recorded it and when, for messages (DESIGN.md §6)."""
        when = f" at {self.at.isoformat(timespec='seconds')}" if self.at is not None else ""
        return f"{self.digest.hex()} (recorded by {self.by}{when})"


@dataclass(frozen=True, slots=True)
class Probe:
    """What a readiness probe saw: the committed length, and the recorded configuration."""

    length: int
    recorded: RecordedConfig | None
