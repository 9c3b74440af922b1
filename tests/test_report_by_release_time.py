"""`views.report` (docs/operations.md "Reports"): a claim is charged in a range by its
`Released` entry's instant, not its admission's; the range is half-open; a running claim
charges nothing. On a real `Pool` over a ledger, its clock moved by hand."""

from __future__ import annotations

from joulepool.claim import Claim
from joulepool.grade import Energy, Grade
from joulepool.pool import Pool
from joulepool.stores.memory import MemoryStore
from joulepool.views.report import report
from tests.support.builders import team_tree
from tests.support.ledgers import STEWARD

T0 = 1_800_000_000_000


def test_a_claim_counts_where_its_release_is_dated_in_a_half_open_range() -> None:
    now = [T0]
    pool = Pool(team_tree(g=10**9, gd=10), STEWARD, MemoryStore(), clock=lambda: now[0])
    pool.submit(Claim("early", "a", 1, 1, Energy(1_000, Grade.HwShunt)))
    pool.submit(Claim("open", "b", 1, 1, Energy(5_000, Grade.HwShunt)))
    now[0] = T0 + 10_000
    pool.release("early", Energy(700, Grade.ModelBased))

    def charged(start: int, end: int) -> dict[str, int]:
        rows = report(pool, start, end, "entitlement")["rows"]
        return {r["entitlement"]: r["charged_uj"] for r in rows if r["claims"]}

    assert charged(T0, T0 + 10_000) == {}  # admitted in it, released after: not charged in it
    assert charged(T0 + 10_000, T0 + 10_001) == {"a": 700}  # the start is included
    assert charged(T0 + 9_000, T0 + 10_000) == {}  # the end is not
    whole = report(pool, T0, T0 + 20_000, "entitlement")
    assert whole["total"] == {
        "claims": 1, "charged_uj": 700, "measured_uj": 700, "estimated_uj": 0, "reserved_uj": 1_000,
    }  # fmt: skip
    dept = next(r for r in whole["rows"] if r["entitlement"] == "dept")
    assert dept["claims"] == 0 and dept["subtree"]["charged_uj"] == 700
