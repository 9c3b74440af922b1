"""Prometheus metrics of `pool serve` (API.md, Additions).

Prometheus's conventions: base units (joules, seconds; timestamps in seconds since the
Unix epoch), `_total` counters, one `entitlement` label. The ledger and every decision keep
integer µJ; they are turned into joules here, at the exposition edge, and nowhere else. A
figure nobody has (no `limit_uj`, a ledger never witnessed, a `none` period's end, no
snapshot yet) is left out, never written as 0 or +Inf.

Usage figures come from `usage_report.entitlement_reports`, the code path of `pool usage
--json` and `GET /v1/entitlements`, for one period read once per scrape.

Per-entitlement series carry a `parent` label (empty at a root), and an interior node's
subtree sums are their own `pool_subtree_*` series, so `sum by (parent)` adds a level once and
a subtree is never added to its own members. `pool_build_info` and `pool_ready` say which
code answers and whether it can write; `pool_token_expiry_timestamp_seconds` names a token by
its `name` only, never by anything that could stand in for it (docs/operations.md).

`/metrics` needs a token (API.md, Additions): an operator or `metrics` token reads every
series; a tenant token reads only its subtree's per-entitlement usage and verdicts, and
nothing about the pool as a whole (latencies, the ledger, appends, fsyncs).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from joulepool import __version__
from joulepool.errors import StoreError
from joulepool.pool import Pool
from joulepool.service.ledger_report import ledger_report
from joulepool.service.tokens import Principal, TokenBook
from joulepool.service.verdicts import VerdictBook

if TYPE_CHECKING:
    from joulepool.service.witnessing import Witnessing

UJ_PER_J = 10**6
MS_PER_S = 1000

USAGE_GAUGES = (
    # (name, help, field of the usage object or of the entitlement, in µJ?)
    ("pool_guarantee_joules", "Energy guarantee per budget period", "guarantee_uj", True),
    ("pool_limit_joules", "Energy ceiling per budget period (absent: none)", "limit_uj", True),
    (
        "pool_committed_joules",
        "Committed in the current budget period: charged actuals plus running reservations",
        "committed_uj",
        True,
    ),
    (
        "pool_charged_joules",
        "Released claims' actual energy in the current budget period",
        "charged_uj",
        True,
    ),
    (
        "pool_reserved_joules",
        "Reservations of running claims admitted in the current budget period",
        "reserved_uj",
        True,
    ),
    (
        "pool_remaining_joules",
        "What is left of the guarantee in the current budget period",
        "remaining_uj",
        True,
    ),
    (
        "pool_borrowed_joules",
        "Committed energy past the guarantee, borrowed from siblings' surplus",
        "borrowed_uj",
        True,
    ),
    ("pool_devices_held", "Devices held by running claims", "held_devices", False),
    ("pool_devices_guaranteed", "Device guarantee", "guarantee_devices", False),
    ("pool_running_claims", "Claims running now", "running_claims", False),
)
"""The per-entitlement gauges: the entitlement's own figures, as its `usage` object has them."""

SUBTREE_GAUGES = (
    # (name, help, field of the `subtree` usage object, in µJ?)
    ("pool_subtree_guarantee_joules", "Sum of the guarantees of a node and its descendants", "guarantee_uj", True),
    ("pool_subtree_committed_joules", "Committed by a node and its descendants this period", "committed_uj", True),
    ("pool_subtree_charged_joules", "Charged to a node and its descendants this period", "charged_uj", True),
    ("pool_subtree_reserved_joules", "Reserved by running claims of a node and its descendants", "reserved_uj", True),
    ("pool_subtree_devices_held", "Devices held by a node and its descendants", "held_devices", False),
)  # fmt: skip
"""The interior nodes' subtree sums (`views.usage.subtree_usage`), the `Σ` rows of `pool usage`."""

COMMIT_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0, 2.5, 10.0)


def joules(uj: int) -> float:
    """µJ as joules, for the exposition only (API.md "Metrics": Prometheus base units)."""
    return uj / UJ_PER_J


def seconds(ms: int) -> float:
    """A time in ms since the epoch as seconds, for the exposition only (API.md "Metrics")."""
    return ms / MS_PER_S


def exported_names() -> set[str]:
    """Every metric name `/metrics` may carry, as a PromQL query names it (samples, with
    their `_total`, `_bucket`, `_sum`, `_count` suffixes): what a dashboard may query."""
    names = {name for name, *_ in USAGE_GAUGES} | {name for name, *_ in SUBTREE_GAUGES}
    names |= {
        "pool_build_info",
        "pool_ready",
        "pool_token_expiry_timestamp_seconds",
        "pool_period_start_timestamp_seconds",
        "pool_period_end_timestamp_seconds",
        "pool_ledger_length",
        "pool_ledger_last_append_timestamp_seconds",
        "pool_ledger_witnessed_length",
        "pool_ledger_witnessed_timestamp_seconds",
        "pool_snapshot_length",
        "pool_snapshot_age_seconds",
        "pool_fsyncs_total",
        "pool_appends_total",
        "pool_verdicts_total",
        "pool_config_last_reload_successful",
        "pool_config_last_reload_success_timestamp_seconds",
        "pool_tls_certificate_expiry_timestamp_seconds",
        "pool_c2sp_witness_cosigned_size",
        "pool_c2sp_witness_last_cosigned_timestamp_seconds",
        "pool_c2sp_witness_fork",
    }
    names |= {f"pool_commit_seconds{s}" for s in ("_bucket", "_sum", "_count", "_created")}
    from joulepool.service.live_metrics import LIVE_NAMES

    return names | LIVE_NAMES | {"pool_actions_total"}


ReloadState = Callable[[], tuple[bool, int | None]]
"""Whether the last reload put everything it read in force, and when the last one that did
finished (ms since the epoch; None: none since start)."""


def _no_reloads() -> tuple[bool, int | None]:
    return True, None


def _no_witnessing() -> Witnessing | None:
    return None


class _PoolCollector(Collector):
    """Figures read from the pool at scrape time, so they can never drift from it.

    With a `tenant`, only the entitlements that principal may act on, and no ledger figures.
    """

    def __init__(
        self,
        pool: Callable[[], Pool | None],
        verdicts: VerdictBook,
        witnesses: Callable[[], Path | None],
        tenant: Principal | None = None,
        reloads: ReloadState = _no_reloads,
        witnessing: Callable[[], Witnessing | None] = _no_witnessing,
        ready: Callable[[], bool] | None = None,
        tokens: Callable[[], TokenBook] | None = None,
    ) -> None:
        self._pool = pool
        self._verdicts = verdicts
        self._witnesses = witnesses
        self._tenant = tenant
        self._reloads = reloads
        self._witnessing = witnessing
        self._ready = ready
        self._tokens = tokens

    def _c2sp_witnesses(self) -> Iterator[Metric]:
        """Per `[[c2sp_witness]]` (DESIGN.md §8): the size it last cosigned and when (its
        cosignature's timestamp), so an alert can fire on lag, and 1 while it raised a fork
        alarm. A witness that never cosigned has no size and no timestamp sample."""
        witnessing = self._witnessing()
        if witnessing is None:
            return
        size = GaugeMetricFamily(
            "pool_c2sp_witness_cosigned_size",
            "Tree size of the latest checkpoint the C2SP witness cosigned",
            labels=["witness"],
        )
        when = GaugeMetricFamily(
            "pool_c2sp_witness_last_cosigned_timestamp_seconds",
            "When the C2SP witness cosigned that checkpoint (its cosignature's timestamp)",
            labels=["witness"],
        )
        fork = GaugeMetricFamily(
            "pool_c2sp_witness_fork",
            "1 while the C2SP witness holds a checkpoint this ledger does not extend",
            labels=["witness"],
        )
        for state in witnessing.states():
            name = state.config.name
            kept = state.kept
            if kept is not None:
                size.add_metric([name], kept.checkpoint.size)
                when.add_metric([name], kept.timestamp)
            fork.add_metric([name], 1 if state.alarm is not None else 0)
        yield from (size, when, fork)

    def _reload_gauges(self) -> Iterator[Metric]:
        """The last reload's outcome, named as Prometheus names its own
        (docs/reliability.md §15): 0 while the files on disk are not what is in force."""
        ok, success_ms = self._reloads()
        yield GaugeMetricFamily(
            "pool_config_last_reload_successful",
            "Whether the last reload (SIGHUP or a tokens.toml change) was put in force whole",
            value=1 if ok else 0,
        )
        if success_ms is not None:
            yield GaugeMetricFamily(
                "pool_config_last_reload_success_timestamp_seconds",
                "When the last reload that was put in force whole finished",
                value=seconds(success_ms),
            )

    def _visible(self, pool: Pool) -> Callable[[str], bool]:
        tenant = self._tenant
        if tenant is None:
            return lambda _node: True
        return lambda node: tenant.may_act_on(pool.tree, node)

    def collect(self) -> Iterator[Metric]:
        """The current period's usage (DESIGN.md §3), the verdicts and, for the whole pool, the
        ledger (§6.1, §6.8), as API.md "Metrics" lists them."""
        if self._tenant is None:
            yield from self._reload_gauges()
            yield from self._process()
        pool = self._pool()
        if pool is None:
            return
        from joulepool.views.usage import entitlement_reports

        visible = self._visible(pool)
        # One period for the whole scrape, so no figure straddles a rollover (DESIGN.md §3).
        period = pool.period()
        rows = entitlement_reports(
            pool, [e.id for e in pool.tree if visible(e.id)], period.index, present_only=True
        )
        labels = ["entitlement", "parent"]
        for name, words, field, energy in USAGE_GAUGES:
            family = GaugeMetricFamily(name, words, labels=labels)
            for row in rows:
                value = row["usage"].get(field, row.get(field))
                if value is None:
                    continue  # no limit: no sample, never 0 or +Inf
                where = [row["id"], row.get("parent") or ""]
                family.add_metric(where, joules(value) if energy else value)
            yield family
        for name, words, field, energy in SUBTREE_GAUGES:
            family = GaugeMetricFamily(name, words, labels=labels)
            for row in rows:
                if "subtree" in row:
                    value = row["subtree"][field]
                    where = [row["id"], row.get("parent") or ""]
                    family.add_metric(where, joules(value) if energy else value)
            yield family
        if period.start_ms is not None and period.end_ms is not None:
            yield GaugeMetricFamily(
                "pool_period_start_timestamp_seconds",
                "Start of the current budget period, seconds since the Unix epoch",
                value=seconds(period.start_ms),
            )
            yield GaugeMetricFamily(
                "pool_period_end_timestamp_seconds",
                "End of the current budget period, when guarantees renew",
                value=seconds(period.end_ms),
            )
        verdicts = CounterMetricFamily(
            "pool_verdicts",
            "Verdicts given since the service started, by entitlement, verdict and reason",
            labels=["entitlement", "verdict", "reason"],
        )
        for (node, kind, reason), count in sorted(self._verdicts.counts(visible).items()):
            verdicts.add_metric([node, kind, reason], count)
        yield verdicts
        from joulepool.service.live_metrics import live_families

        yield from live_families(pool, visible)
        if self._tenant is not None:
            return
        yield from self._ledger(pool)
        yield from self._c2sp_witnesses()

    def _process(self) -> Iterator[Metric]:
        """What this process is and whether it can write (`/readyz`), and when each token
        stops working: series that exist before the ledger is replayed, and after it failed."""
        info = GaugeMetricFamily(
            "pool_build_info", "The joulepool version serving", labels=["version"]
        )
        info.add_metric([__version__], 1)
        yield info
        if self._ready is not None:
            yield GaugeMetricFamily(
                "pool_ready", "1 while /readyz answers 200, else 0", value=int(self._ready())
            )
        if self._tokens is not None:
            expiry = GaugeMetricFamily(
                "pool_token_expiry_timestamp_seconds",
                "When a token stops working, seconds since the Unix epoch (absent: never)",
                labels=["name", "scope"],
            )
            for name, scope, when in self._tokens().expiries():
                expiry.add_metric([name, scope], seconds(when))
            yield expiry

    def _ledger(self, pool: Pool) -> Iterator[Metric]:
        report = ledger_report(pool, self._witnesses(), witness=True)
        yield GaugeMetricFamily(
            "pool_ledger_length", "Entries in the ledger", value=report["length"]
        )
        if report["length"] > 0:
            yield GaugeMetricFamily(
                "pool_ledger_last_append_timestamp_seconds",
                "The last entry's at_ms, seconds since the Unix epoch",
                value=seconds(pool.state.last_at_ms),
            )
        if "witnessed_through" in report:
            yield GaugeMetricFamily(
                "pool_ledger_witnessed_length",
                "Ledger length a kept witness receipt vouches for (absent: self-attested)",
                value=report["witnessed_through"],
            )
        if "witnessed_at_ms" in report:
            yield GaugeMetricFamily(
                "pool_ledger_witnessed_timestamp_seconds",
                "When the witness signed that receipt, seconds since the Unix epoch",
                value=seconds(report["witnessed_at_ms"]),
            )
        folder = pool.snapshots
        try:
            newest = folder.newest() if folder is not None else None
        except StoreError:
            newest = None  # the database cannot say now: no figure, never a made-up one
        if newest is not None:
            length, written_s = newest
            yield GaugeMetricFamily(
                "pool_snapshot_length", "Ledger length of the newest state snapshot", value=length
            )
            yield GaugeMetricFamily(
                "pool_snapshot_age_seconds",
                "Seconds since the newest state snapshot was written",
                value=max(0.0, time.time() - written_s),
            )
        yield CounterMetricFamily(
            "pool_fsyncs", "Forced writes of ledger appends", value=pool.store.fsyncs
        )
        yield CounterMetricFamily(
            "pool_appends", "Ledger appends (each one group commit)", value=pool.appends
        )


class _TlsCollector(Collector):
    """The served certificate's notAfter (docs/reliability.md §17): an alert's figure, since
    the start's warning is read once and a certificate ends while the service runs."""

    def __init__(self, not_after_s: int) -> None:
        self._not_after_s = not_after_s

    def collect(self) -> Iterator[Metric]:
        """One gauge: when the certificate `pool serve` serves with expires."""
        yield GaugeMetricFamily(
            "pool_tls_certificate_expiry_timestamp_seconds",
            "When the served TLS certificate expires (its notAfter), seconds since the Unix epoch",
            value=self._not_after_s,
        )


class _ActionsCollector(Collector):
    """`pool_actions_total{rule,kind,outcome}`: the action log's records since the service
    started (DESIGN.md §7). No per-claim label: a claim's acts are `GET /v1/actions`'s."""

    def __init__(self, counts: Callable[[], Counter[tuple[str, str, str]] | None]) -> None:
        self._counts = counts

    def collect(self) -> Iterator[Metric]:
        """The counter, once a log is kept."""
        counts = self._counts()
        if counts is None:
            return
        family = CounterMetricFamily(
            "pool_actions",
            "Action log records since the service started, by rule, kind and outcome",
            labels=["rule", "kind", "outcome"],
        )
        for (rule, kind, outcome), n in sorted(counts.items()):
            family.add_metric([rule, kind, outcome], n)
        yield family


class Metrics:
    """The service's registry, its instruments and its verdicts."""

    def __init__(
        self,
        pool: Callable[[], Pool | None],
        witnesses: Callable[[], Path | None],
        reloads: ReloadState = _no_reloads,
        witnessing: Callable[[], Witnessing | None] = _no_witnessing,
        ready: Callable[[], bool] | None = None,
        tokens: Callable[[], TokenBook] | None = None,
        tls_not_after_s: int | None = None,
        actions: Callable[[], Counter[tuple[str, str, str]] | None] = lambda: None,
    ) -> None:
        self._pool = pool
        self._witnesses = witnesses
        self.verdicts = VerdictBook()
        self.registry = CollectorRegistry()
        self.commit_seconds = Histogram(
            "pool_commit_seconds",
            "Time from a submission or release to its durable answer",
            registry=self.registry,
            buckets=COMMIT_BUCKETS,
        )
        self.registry.register(
            _PoolCollector(
                pool,
                self.verdicts,
                witnesses,
                reloads=reloads,
                witnessing=witnessing,
                ready=ready,
                tokens=tokens,
            )
        )
        if tls_not_after_s is not None:
            self.registry.register(_TlsCollector(tls_not_after_s))
        self.registry.register(_ActionsCollector(actions))

    def exposition(self, who: Principal) -> bytes:
        """The Prometheus text `who` may read (API.md, Additions): everything for an operator
        or a `metrics` token; a tenant's subtree usage and verdicts only, for a tenant."""
        if who.operator or who.metrics_only:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        registry.register(_PoolCollector(self._pool, self.verdicts, self._witnesses, who))
        return generate_latest(registry)
