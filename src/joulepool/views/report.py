"""Energy charged over a range of time, the way `sreport` reports a range (`pool report`;
docs/operations.md "Reports").

A report reads the ledger's released claims (§6.2): each `Released` entry whose `at_ms` lies
in `[start_ms, end_ms)` counts its actual figure once, under the entitlement or the class its
`Admitted` entry declared. The release time decides, not the admission time: a range asks
"what was charged in it", and a claim is charged when it is released (its reservation until
then is not a charge, and `pool usage` shows it). Budget periods (DESIGN.md §3) group by
admission instead; a report over exactly one period can therefore differ from `pool usage`
by the claims admitted in one period and released in another, and says which time it used.

Figures are integers of µJ. A claim with no class is reported under `class: null` (unknown is
not a value, so it is never folded into a made-up name). By entitlement, every node of the
tree has a row, in tree order, and an interior node also carries `subtree`, its sums over
itself and its descendants (`views.usage.subtree_ids`, the same subtree every usage answer
sums); an entitlement the ledger names but the tree no longer holds keeps its own row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from joulepool.events import Admitted, Released
from joulepool.grade import Grade
from joulepool.ledger.cose import open_envelope
from joulepool.ledger.entry import event_of
from joulepool.views.usage import subtree_ids

if TYPE_CHECKING:
    from joulepool.pool import Pool

BY = ("entitlement", "class")
"""What a report groups by."""
SUMS = ("claims", "charged_uj", "measured_uj", "estimated_uj", "reserved_uj")
"""The figures of a row: claims released in the range, their actual figures in all, the part
measured (HwShunt or ModelBased), the part that is only an estimate (graded Estimator), and
what they had reserved."""


@dataclass
class _Sums:
    figures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SUMS, 0))

    def add(self, admitted: Admitted, released: Released) -> None:
        f = self.figures
        f["claims"] += 1
        f["charged_uj"] += released.actual.uj
        kind = "estimated_uj" if released.actual.grade is Grade.Estimator else "measured_uj"
        f[kind] += released.actual.uj
        f["reserved_uj"] += admitted.reserved.uj


def released_in(pool: Pool, start_ms: int, end_ms: int) -> list[tuple[Admitted, Released]]:
    """Every claim released in `[start_ms, end_ms)` by its `Released` entry's `at_ms`, with
    its admission, in ledger order (one read of the entries, §6.2)."""
    admitted: dict[str, Admitted] = {}
    out = []
    for raw in pool.entries(0):
        event = event_of(open_envelope(raw).core, pool.steward)
        if isinstance(event, Admitted):
            admitted[event.claim] = event
        elif start_ms <= event.at_ms < end_ms:
            out.append((admitted[event.claim], event))
    return out


def report(pool: Pool, start_ms: int, end_ms: int, by: str) -> dict[str, Any]:
    """`pool report`'s answer (docs/operations.md "Reports"): rows of `SUMS` by entitlement
    or by class for the claims released in `[start_ms, end_ms)`, and their total."""
    groups: dict[str | None, _Sums] = {}
    total = _Sums()
    for adm, rel in released_in(pool, start_ms, end_ms):
        key = adm.entitlement if by == "entitlement" else adm.class_
        groups.setdefault(key, _Sums()).add(adm, rel)
        total.add(adm, rel)
    rows: list[dict[str, Any]] = []
    if by == "entitlement":
        tree_ids = [e.id for e in pool.tree]
        for node in tree_ids:
            row: dict[str, Any] = {"entitlement": node, **groups.get(node, _Sums()).figures}
            if pool.tree.children(node):
                row["subtree"] = {
                    k: sum(groups.get(i, _Sums()).figures[k] for i in subtree_ids(pool.tree, node))
                    for k in SUMS
                }
            rows.append(row)
        for gone in sorted(k for k in groups if k is not None and k not in pool.tree):
            rows.append({"entitlement": gone, "in_tree": False, **groups[gone].figures})
    else:
        named = sorted(k for k in groups if k is not None)
        for klass in [*named, *([None] if None in groups else [])]:
            rows.append({"class": klass, **groups[klass].figures})
    return {
        "start_ms": start_ms,
        "end_ms": end_ms,
        "by": by,
        "time": "released",
        "rows": rows,
        "total": total.figures,
        "length": pool.length,
    }
