"""Rollback detection: a ledger may never answer from a history shorter than one it
acknowledged (standard §6.1, DESIGN.md §4).

A deployment keeps, outside the ledger itself, marks of what it has acknowledged: the
store's high-water record (the longest length and head it ever fsynced and answered on)
and every kept witness receipt (a length and head a witness countersigned). Each mark is
a (length, head) pair. A ledger is refused when it is shorter than a mark, or when its head
at a mark's length is not the mark's head: either way, entries someone relied on are gone
or were rewritten, and replaying what is left would hand tenants their spent guarantee back.

This module only decides; the stores keep the high-water record and the deployment keeps
the receipts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from joulepool.errors import StoreError


@dataclass(frozen=True, slots=True)
class HighWater:
    """An acknowledged point of a ledger: its first `length` entries ended at `head`."""

    length: int
    head: bytes


@dataclass(frozen=True, slots=True)
class Mark:
    """A `HighWater` and where it was kept, for the refusal's message."""

    source: str
    point: HighWater


class LedgerRolledBack(StoreError):
    """The ledger is shorter than, or differs from, a point it acknowledged (§6.1).

    `length` is the ledger's length now; `acknowledged` the length of the mark it fails.
    """

    code = "ledger_rolled_back"

    def __init__(self, detail: str, length: int, acknowledged: int, source: str) -> None:
        super().__init__(detail)
        self.length = length
        self.acknowledged = acknowledged
        self.source = source


class HighWaterMissing(StoreError):
    """A ledger with entries has no high-water record: nothing says what it acknowledged."""

    code = "high_water_missing"


class HighWaterUnreadable(StoreError):
    """The high-water record exists but no copy of it passes its checksum."""

    code = "high_water_unreadable"


def check_acknowledged(
    marks: Iterable[Mark], length: int, head_at: Callable[[int], bytes], where: str
) -> None:
    """Refuse a ledger of `length` entries that falls short of any mark (§6.1, DESIGN.md §4).

    `head_at(n)` is the ledger's head after its first `n` entries; it is asked only for
    lengths the ledger has. The longest mark is checked first, so the refusal names the
    most that was lost.
    """
    for mark in sorted(marks, key=lambda m: m.point.length, reverse=True):
        acknowledged = mark.point.length
        if acknowledged > length:
            raise LedgerRolledBack(
                f"{where} has {length} entries, but {mark.source} acknowledged "
                f"{acknowledged}: {acknowledged - length} acknowledged entr"
                f"{'y is' if acknowledged - length == 1 else 'ies are'} missing (a truncated "
                "file or a stale backup). Refusing to answer from the shorter history; restore "
                "the full ledger, or see `pool ledger acknowledge --help` to accept the loss",
                length,
                acknowledged,
                mark.source,
            )
        if head_at(acknowledged) != mark.point.head:
            raise LedgerRolledBack(
                f"{where}: its head after {acknowledged} entries is not the head that "
                f"{mark.source} acknowledged at that length (the ledger has {length} entries): "
                "its history was rewritten or replaced by another. Refusing to answer from it",
                length,
                acknowledged,
                mark.source,
            )
