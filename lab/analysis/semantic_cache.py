"""A semantic-cache run's figures and the threshold trade, from the proxy's counters.

A run behind the response cache keeps the proxy's ``/metrics`` before and after its load (the
run's ``server_metrics``); their difference gives, for the semantic tier
(:mod:`services.cache_proxy.semantic`):

- the exact and the semantic hit rate: each tier's hits over the requests looked up (hits plus
  misses; bypasses are not looked up);
- the false-hit rate: verified semantic hits whose fresh answer differed, over the verified ones
  (the proxy's measuring mode, ``cache.verify_fraction``), with its Wilson interval: at 0 of 40
  verified it is still up to 8.8%, which is what a sample of 40 can say;
- the answer-mismatch rate: verified semantic hits whose served and fresh answers embed less than
  :data:`ANSWER_MISMATCH_BELOW` alike (a softer reading than equal text: a small model words the
  same answer differently for two wordings of one question, and equal text calls that a false
  hit), with its Wilson interval;
- the latency the tier adds to every request it embeds, p50 and p99, on the hit path (embedding
  and search of a request answered SEMANTIC) and on the miss path (the same, paid by a request
  that then goes upstream anyway), read from the histograms' buckets (linear within a bucket,
  as Prometheus's ``histogram_quantile``).

:func:`threshold_points` puts the runs of a sweep side by side and :func:`pareto_front` keeps the
thresholds no other beats on both hit rate and false-hit rate.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lab.analysis.statistics import proportion_interval
from lab.measurement.results import SemanticCacheFigures
from lab.measurement.server_metrics import delta

Snapshot = Mapping[str, float]
# A verified hit whose two answers embed less alike than this is an answer mismatch (a bucket
# bound of the proxy's lab_cache_semantic_answer_similarity histogram).
ANSWER_MISMATCH_BELOW = 0.8


def _count(change: Snapshot, name: str) -> int:
    return round(change.get(name, 0.0))


def histogram_quantile(change: Snapshot, histogram: str, quantile: float) -> float | None:
    """The ``quantile`` (0 to 1) of histogram ``histogram`` over a run, from its kept buckets
    (``name_bucket{le="bound"}``, cumulative): linear within the bucket it falls in; None when
    nothing was observed. A quantile in the last, open bucket is its lower bound."""
    prefix = f'{histogram}_bucket{{le="'
    buckets = sorted(
        (float(name[len(prefix) : -2]), count) for name, count in change.items() if name.startswith(prefix)
    )
    if not buckets or buckets[-1][1] <= 0:
        return None
    wanted = quantile * buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= wanted:
            if math.isinf(bound):
                return lower_bound
            share = (wanted - lower_count) / (count - lower_count) if count > lower_count else 1.0
            return lower_bound + (bound - lower_bound) * share
        lower_bound, lower_count = bound, count
    return lower_bound


@dataclass(frozen=True)
class SemanticRunFigures:
    """One run's semantic-tier figures (rates are shares, 0 to 1; latencies in milliseconds); the
    store keeps most of them (:func:`semantic_part`)."""

    lookups: int
    exact_hits: int
    semantic_hits: int
    exact_hit_rate: float | None
    semantic_hit_rate: float | None
    hit_rate: float | None
    verified_hits: int
    false_hits: int
    false_hit_rate: float | None
    false_hit_rate_ci95_low: float | None
    false_hit_rate_ci95_high: float | None
    answer_similarity_mean: float | None
    answer_mismatches: int
    answer_mismatch_rate: float | None
    answer_mismatch_rate_ci95_low: float | None
    answer_mismatch_rate_ci95_high: float | None
    hit_path_added_p50_ms: float | None
    hit_path_added_p99_ms: float | None
    miss_path_added_p50_ms: float | None
    miss_path_added_p99_ms: float | None
    embedding_p50_ms: float | None


def _milliseconds(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def semantic_figures(change: Snapshot) -> SemanticRunFigures | None:
    """The figures of a run from the change of the proxy's metrics over it; None when the proxy
    ran without the semantic tier (no semantic counter) or nothing was counted."""
    if not change or "lab_cache_semantic_lookups_total" not in change:
        return None
    hits, misses = _count(change, "lab_cache_hits_total"), _count(change, "lab_cache_misses_total")
    semantic_hits = _count(change, "lab_cache_semantic_hits_total")
    exact_hits = _count(change, "lab_cache_exact_hits_total") if "lab_cache_exact_hits_total" in change else hits
    lookups = hits + misses
    verified, false_hits = (
        _count(change, "lab_cache_semantic_verified_total"),
        _count(change, "lab_cache_semantic_false_hits_total"),
    )
    false_rate = proportion_interval(false_hits, verified)
    similarity_count = change.get("lab_cache_semantic_answer_similarity_count", 0.0)
    # The bucket up to the cut counts answers at most that similar: a hair above the cut is not a mismatch.
    mismatches = _count(change, f'lab_cache_semantic_answer_similarity_bucket{{le="{ANSWER_MISMATCH_BELOW}"}}')
    mismatch_rate = proportion_interval(mismatches, round(similarity_count))
    return SemanticRunFigures(
        lookups=lookups,
        exact_hits=exact_hits,
        semantic_hits=semantic_hits,
        exact_hit_rate=exact_hits / lookups if lookups else None,
        semantic_hit_rate=semantic_hits / lookups if lookups else None,
        hit_rate=hits / lookups if lookups else None,
        verified_hits=verified,
        false_hits=false_hits,
        false_hit_rate=false_rate.mean,
        false_hit_rate_ci95_low=false_rate.ci95_low,
        false_hit_rate_ci95_high=false_rate.ci95_high,
        answer_similarity_mean=(
            change.get("lab_cache_semantic_answer_similarity_sum", 0.0) / similarity_count if similarity_count else None
        ),
        answer_mismatches=mismatches,
        answer_mismatch_rate=mismatch_rate.mean,
        answer_mismatch_rate_ci95_low=mismatch_rate.ci95_low,
        answer_mismatch_rate_ci95_high=mismatch_rate.ci95_high,
        hit_path_added_p50_ms=_milliseconds(histogram_quantile(change, "lab_cache_semantic_hit_path_seconds", 0.5)),
        hit_path_added_p99_ms=_milliseconds(histogram_quantile(change, "lab_cache_semantic_hit_path_seconds", 0.99)),
        miss_path_added_p50_ms=_milliseconds(histogram_quantile(change, "lab_cache_semantic_miss_path_seconds", 0.5)),
        miss_path_added_p99_ms=_milliseconds(histogram_quantile(change, "lab_cache_semantic_miss_path_seconds", 0.99)),
        embedding_p50_ms=_milliseconds(histogram_quantile(change, "lab_cache_embedding_seconds", 0.5)),
    )


def semantic_part(change: Snapshot) -> SemanticCacheFigures | None:
    """A run's semantic figures as its results' part (the store's columns); None when the proxy ran
    without the semantic tier."""
    found = semantic_figures(change)
    if found is None:
        return None
    return SemanticCacheFigures(
        response_cache_exact_hit_rate=found.exact_hit_rate,
        semantic_cache_hit_rate=found.semantic_hit_rate,
        semantic_cache_verified_hits=found.verified_hits,
        semantic_cache_false_hit_rate=found.false_hit_rate,
        semantic_cache_false_hit_rate_ci95_low=found.false_hit_rate_ci95_low,
        semantic_cache_false_hit_rate_ci95_high=found.false_hit_rate_ci95_high,
        semantic_cache_answer_mismatch_rate=found.answer_mismatch_rate,
        semantic_cache_added_hit_p50_ms=found.hit_path_added_p50_ms,
        semantic_cache_added_hit_p99_ms=found.hit_path_added_p99_ms,
        semantic_cache_added_miss_p50_ms=found.miss_path_added_p50_ms,
        semantic_cache_added_miss_p99_ms=found.miss_path_added_p99_ms,
    )


def run_semantic_figures(server_metrics: Mapping[str, Any] | None) -> SemanticRunFigures | None:
    """:func:`semantic_figures` of a stored run's ``server_metrics`` (its proxy's snapshots
    before and after the load); None without them."""
    if not server_metrics:
        return None
    before, after = server_metrics.get("before") or {}, server_metrics.get("after") or {}
    return semantic_figures(delta(before.get("cache_proxy"), after.get("cache_proxy")))


@dataclass(frozen=True)
class ThresholdPoint:
    """One run of a sweep: its tier and threshold (None for exact and off), its hit rates and
    false-hit rate (None where nothing was verified), and its workload's kind (a report of two
    workloads draws and tabulates each apart)."""

    run_id: int
    label: str
    tier: str
    similarity: float | None
    hit_rate: float
    false_hit_rate: float | None
    false_hit_rate_ci95_low: float | None
    false_hit_rate_ci95_high: float | None
    figures: SemanticRunFigures | None
    workload: str = ""


def threshold_point(
    run_id: int,
    label: str,
    cache_spec: Mapping[str, Any],
    server_metrics: Mapping[str, Any] | None,
    hit_rate: float | None,
    *,
    workload: str = "",
) -> ThresholdPoint | None:
    """A run as a point of the trade: a semantic run from its proxy's counters; an exact run at
    its hit rate and no false hit (it answers only identical requests); a run with the tier off
    at 0 and 0. ``hit_rate``: the run's response-cache hit rate (for exact runs)."""
    tier = str(cache_spec.get("tier", "exact"))
    if tier == "semantic":
        figures = run_semantic_figures(server_metrics)
        if figures is None or figures.hit_rate is None:
            return None
        return ThresholdPoint(
            run_id,
            label,
            tier,
            float(cache_spec.get("similarity", 0.0)),
            figures.hit_rate,
            figures.false_hit_rate,
            figures.false_hit_rate_ci95_low,
            figures.false_hit_rate_ci95_high,
            figures,
            workload,
        )
    if tier == "off":
        return ThresholdPoint(run_id, label, tier, None, 0.0, 0.0, 0.0, 0.0, None, workload)
    if hit_rate is None:
        return None
    return ThresholdPoint(run_id, label, tier, None, hit_rate, 0.0, 0.0, 0.0, None, workload)


def pareto_front(points: Iterable[ThresholdPoint]) -> list[ThresholdPoint]:
    """The points no other point beats on both axes (a higher or equal hit rate at a lower or
    equal false-hit rate, better on one), by hit rate; points without a false-hit rate left out."""
    known = [point for point in points if point.false_hit_rate is not None]
    front = []
    for point in known:
        assert point.false_hit_rate is not None
        dominated = any(
            other.hit_rate >= point.hit_rate
            and other.false_hit_rate is not None
            and other.false_hit_rate <= point.false_hit_rate
            and (other.hit_rate > point.hit_rate or other.false_hit_rate < point.false_hit_rate)
            for other in known
        )
        if not dominated:
            front.append(point)
    return sorted(front, key=lambda point: point.hit_rate)
