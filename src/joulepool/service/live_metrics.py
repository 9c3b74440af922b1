"""The run-time gauges of `/metrics` (API.md "Metrics"; DESIGN.md §7): per entitlement, the
energy its running claims used so far and how many stand at each §2.7 verdict. No per-claim
label: a claim's figures are `GET /v1/claims`'s. Claims with no fresh reading are counted
apart, never added as 0."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily, Metric

from joulepool.views.live import live_by_entitlement

if TYPE_CHECKING:
    from joulepool.pool import Pool

LIVE_NAMES = frozenset(
    {
        "pool_running_energy_joules",
        "pool_running_read_claims",
        "pool_running_unread_claims",
        "pool_running_idle_claims",
    }
)
"""The names this module exports."""


def live_families(pool: Pool, visible: Callable[[str], bool]) -> Iterator[Metric]:
    """The run-time gauges for the entitlements `visible` admits (DESIGN.md §7)."""
    sums = {k: v for k, v in live_by_entitlement(pool).items() if visible(k)}
    energy = GaugeMetricFamily(
        "pool_running_energy_joules",
        "Energy running claims used so far, over those with a fresh reading",
        labels=["entitlement"],
    )
    read = GaugeMetricFamily(
        "pool_running_read_claims",
        "Running claims with a fresh reading (those pool_running_energy_joules adds up)",
        labels=["entitlement"],
    )
    unread = GaugeMetricFamily(
        "pool_running_unread_claims",
        "Running claims with no fresh reading: their energy is unknown, not 0",
        labels=["entitlement"],
    )
    idle = GaugeMetricFamily(
        "pool_running_idle_claims",
        "Running claims at each idle verdict (standard §2.7) and its reason",
        labels=["entitlement", "verdict", "reason"],
    )
    for node in sorted(sums):
        s = sums[node]
        if s.read:
            energy.add_metric([node], s.energy_uj / 1_000_000)
        read.add_metric([node], s.read)
        unread.add_metric([node], s.unread)
        for (verdict, reason), count in sorted((s.verdicts or {}).items()):
            idle.add_metric([node, verdict, reason], count)
    yield from (energy, read, unread, idle)
