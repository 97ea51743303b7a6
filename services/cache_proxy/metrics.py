"""The proxy's Prometheus metrics; the hit path's counters are plain integers.

prometheus_client's own counters and histogram took about a quarter of a local hit's
time in the proxy, so the hit path counts into :class:`_HitPathCounter` and
:class:`_HitPathHistogram` (one event loop, so no lock), read at scrape time by a collector.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

from services.cache_proxy.policy import BypassReason


class _HitPathCounter:
    """A counter for the hit path: a plain integer (the proxy is one event loop, so no
    lock), read by :class:`_HitPathCollector` at scrape time. prometheus_client's own
    counters and histogram took about a quarter of a local hit's time in the proxy."""

    __slots__ = ("documentation", "name", "value")

    def __init__(self, name: str, documentation: str) -> None:
        self.name, self.documentation, self.value = name, documentation, 0

    def inc(self) -> None:
        self.value += 1


class _HitPathHistogram:
    """A histogram for the hit path (see :class:`_HitPathCounter`)."""

    def __init__(self, name: str, documentation: str, buckets: tuple[float, ...]) -> None:
        self.name, self.documentation = name, documentation
        self.upper_bounds = list(buckets)
        self.counts = [0] * (len(buckets) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.upper_bounds, value)] += 1
        self.sum += value


class _HitPathCollector:
    def __init__(self, counters: list[_HitPathCounter], histograms: list[_HitPathHistogram]) -> None:
        self.counters, self.histograms = counters, histograms

    def collect(self) -> Iterable[Any]:
        for counter in self.counters:
            yield CounterMetricFamily(counter.name, counter.documentation, value=counter.value)
        for histogram in self.histograms:
            cumulative, buckets = 0, []
            for upper_bound, count in zip([*map(str, histogram.upper_bounds), "+Inf"], histogram.counts, strict=True):
                cumulative += count
                buckets.append((upper_bound, cumulative))
            yield HistogramMetricFamily(
                histogram.name, histogram.documentation, buckets=buckets, sum_value=histogram.sum
            )


def _bypass_counters(registry: CollectorRegistry) -> dict[BypassReason, Any]:
    """``lab_cache_bypasses_total``'s child counter of each reason, every one there from the
    start at 0, so a scrape shows what could be counted."""
    bypasses = Counter(
        "lab_cache_bypasses",
        "Requests on a cacheable path neither looked up nor stored, by reason: credentials (they carry "
        "credentials and --credentials is bypass; --credentials per-credential caches them), no_store "
        "(Cache-Control: no-store), policy (--policy deterministic, a sampled request), unkeyable_body, "
        "cache_off (--cache off).",
        ["reason"],
        registry=registry,
    )
    return {reason: bypasses.labels(reason=reason.value) for reason in BypassReason}


class ProxyMetrics:
    """The proxy's prometheus metrics, in their own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.hits = _HitPathCounter("lab_cache_hits", "Requests answered from the cache (exact and semantic hits).")
        self.exact_hits = _HitPathCounter("lab_cache_exact_hits", "Requests answered from the exact tier.")
        self.misses = Counter("lab_cache_misses", "Cacheable requests sent upstream.", registry=self.registry)
        self._bypasses_by_reason = _bypass_counters(self.registry)
        self.errors = Counter(
            "lab_cache_errors",
            "Requests served upstream because Redis failed or the breaker is open.",
            registry=self.registry,
        )
        self.credential_bypasses = Counter(
            "lab_cache_credential_bypasses",
            "Requests with credentials passed through uncached (--credentials bypass); the same as "
            'lab_cache_bypasses_total{reason="credentials"}.',
            registry=self.registry,
        )
        self.unkeyable_bodies = Counter(
            "lab_cache_unkeyable_bodies",
            "Requests passed through because their body cannot be keyed.",
            registry=self.registry,
        )
        self.store_errors = Counter(
            "lab_cache_store_errors", "Answers that could not be stored.", registry=self.registry
        )
        self.stores = Counter("lab_cache_stores", "Answers stored in the cache.", registry=self.registry)
        self.single_flight_shared = Counter(
            "lab_cache_single_flight_shared",
            "Misses answered by another identical in-flight request.",
            registry=self.registry,
        )
        self.bad_entries = Counter(
            "lab_cache_bad_entries",
            "Stored values not served (wrong shape, wrong kind, another Redis type): misses, the entry replaced.",
            registry=self.registry,
        )
        self.refused_bodies = Counter(
            "lab_cache_refused_bodies",
            "Requests refused while reading their body (413 over the limit, 408 too slow).",
            registry=self.registry,
        )
        self.local_hits = _HitPathCounter(
            "lab_cache_local_hits", "Hits answered from the in-process tier (no Redis round trip)."
        )
        self.circuit_open = Gauge(
            "lab_cache_circuit_open", "1 while the Redis circuit breaker is open.", registry=self.registry
        )
        self.hit_latency = _HitPathHistogram(
            "lab_cache_hit_latency_seconds",
            "Time from request body read to hit answer sent.",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0),
        )
        self.registry.register(_HitPathCollector([self.hits, self.exact_hits, self.local_hits], [self.hit_latency]))
        self.upstream_latency = Histogram(
            "lab_cache_upstream_latency_seconds",
            "Upstream answer time on misses and bypasses (to last byte).",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
            registry=self.registry,
        )

    def bypassed(self, reason: BypassReason) -> None:
        """Count one bypass, under its reason."""
        self._bypasses_by_reason[reason].inc()
        if reason is BypassReason.CREDENTIALS:
            self.credential_bypasses.inc()
