"""Prometheus metrics of `pool serve`: verdicts, usage, appends and fsyncs (API.md).

`/metrics` needs a token (API.md, Additions): an operator or `metrics` token reads every
series; a tenant token reads only its subtree's per-entitlement usage, and nothing about
the pool as a whole (verdicts, latencies, the ledger's length, appends, fsyncs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from joulepool.pool import Pool
from joulepool.service.tokens import Principal


class _PoolCollector(Collector):
    """Figures read from the pool at scrape time, so they can never drift from it.

    With a `tenant`, only the entitlements that principal may act on, and no ledger figures.
    """

    def __init__(self, pool: Callable[[], Pool | None], tenant: Principal | None = None) -> None:
        self._pool = pool
        self._tenant = tenant

    def collect(self) -> Iterator[Metric]:
        pool = self._pool()
        if pool is None:
            return
        reserved = GaugeMetricFamily(
            "pool_reserved_microjoules", "Reservations of running claims", labels=["entitlement"]
        )
        spent = GaugeMetricFamily(
            "pool_spent_microjoules",
            "Spent energy in the current budget period, running reservations included",
            labels=["entitlement"],
        )
        held = GaugeMetricFamily(
            "pool_held_devices", "Devices held by running claims", labels=["entitlement"]
        )
        charged = GaugeMetricFamily(
            "pool_charged_microjoules",
            "Released claims' actual energy in the current budget period",
            labels=["entitlement"],
        )
        remaining = GaugeMetricFamily(
            "pool_remaining_microjoules",
            "What is left of the guarantee in the current budget period",
            labels=["entitlement"],
        )
        # One period for the whole scrape, so no figure straddles a rollover (DESIGN.md §3).
        period = pool.period()
        for ent in pool.tree:
            if self._tenant is not None and not self._tenant.may_act_on(pool.tree, ent.id):
                continue
            fig = pool.usage_of(ent.id, period.index)
            reserved.add_metric([ent.id], fig.reserved_uj)
            spent.add_metric([ent.id], fig.spent_uj)
            held.add_metric([ent.id], fig.held_devices)
            charged.add_metric([ent.id], fig.charged_uj)
            remaining.add_metric([ent.id], fig.remaining_uj(ent.guarantee_uj))
        yield reserved
        yield spent
        yield held
        yield charged
        yield remaining
        if period.start_ms is not None and period.end_ms is not None:
            yield GaugeMetricFamily(
                "pool_period_start_milliseconds",
                "Start of the current budget period, ms since the Unix epoch",
                value=period.start_ms,
            )
            yield GaugeMetricFamily(
                "pool_period_end_milliseconds",
                "End of the current budget period, when guarantees renew",
                value=period.end_ms,
            )
        if self._tenant is not None:
            return
        yield GaugeMetricFamily("pool_ledger_length", "Entries in the ledger", value=pool.length)
        yield CounterMetricFamily(
            "pool_fsyncs", "Forced writes of ledger appends", value=pool.store.fsyncs
        )
        yield CounterMetricFamily(
            "pool_appends", "Ledger appends (each one group commit)", value=pool.appends
        )


class Metrics:
    """The service's registry and its instruments."""

    def __init__(self, pool: Callable[[], Pool | None]) -> None:
        self._pool = pool
        self.registry = CollectorRegistry()
        self.verdicts = Counter(
            "pool_verdicts", "Verdicts given", ["verdict", "reason"], registry=self.registry
        )
        self.commit_seconds = Histogram(
            "pool_commit_seconds",
            "Time from a submission or release to its durable answer",
            registry=self.registry,
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0),
        )
        self.registry.register(_PoolCollector(pool))

    def exposition(self, who: Principal) -> bytes:
        """The Prometheus text `who` may read (API.md, Additions): everything for an operator
        or a `metrics` token; a tenant's subtree usage only, for a tenant."""
        if who.operator or who.metrics_only:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        registry.register(_PoolCollector(self._pool, who))
        return generate_latest(registry)
