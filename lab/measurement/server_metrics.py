"""Scrape services' Prometheus ``/metrics`` and turn before/after snapshots into figures.

Each backend names its samples in the registry (``lab/backends``: a
:class:`~lab.backends.MetricNames`); a figure whose sample the backend does not export
stays None (unknown), never zero. The cache proxy exports ``lab_cache_*`` counters.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from lab.backends import MetricNames
from lab.measurement.results import ResponseCacheFigures, RunResults, ServerFigures

Snapshot = dict[str, float]

CACHE_PROXY_PREFIXES = ("lab_cache_",)
# Histograms whose buckets a snapshot keeps (see parse_metrics_text): the semantic tier's added
# latency, whose p50 and p99 a run reports, and its verified answers' similarity (lab.analysis.semantic_cache).
HISTOGRAMS_WITH_BUCKETS = frozenset(
    {
        "lab_cache_semantic_hit_path_seconds",
        "lab_cache_semantic_miss_path_seconds",
        "lab_cache_embedding_seconds",
        "lab_cache_semantic_answer_similarity",
    }
)
# A /metrics page larger than this is not read (vLLM's is ~100 kB): an external target
# could answer with anything, of any size.
MAX_METRICS_BYTES = 8 * 1024 * 1024


class MetricsUnreadable(ValueError):
    """A /metrics answer that is not Prometheus text (HTML, JSON, garbage)."""


@dataclass(frozen=True)
class ScrapeResult:
    """One scrape: the snapshot, or None and why not (``problem``, for the user)."""

    snapshot: Snapshot | None
    problem: str | None = None


def parse_metrics_text(text: str, prefixes: tuple[str, ...] = CACHE_PROXY_PREFIXES) -> Snapshot:
    """Sum every sample whose name starts with one of ``prefixes`` over its labels:
    ``{sample_name: total}``.

    Histogram buckets and ``_created`` timestamps are dropped; ``_sum`` and ``_count``
    are kept, so averages can be taken from deltas. The buckets of the histograms in
    :data:`HISTOGRAMS_WITH_BUCKETS` are kept as ``name_bucket{le="bound"}`` (cumulative counts),
    so a run's quantiles can be read from their deltas.
    Raises ``MetricsUnreadable`` for text that is not Prometheus' format; non-finite
    values (NaN, 1e400) are skipped so no figure becomes NaN.
    """
    snapshot: Snapshot = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                name = sample.name
                if name.endswith("_bucket") and name.removesuffix("_bucket") in HISTOGRAMS_WITH_BUCKETS:
                    name = f'{name}{{le="{sample.labels.get("le", "")}"}}'
                elif not name.startswith(prefixes) or name.endswith(("_bucket", "_created")):
                    continue
                value = float(sample.value)
                if math.isfinite(value):
                    snapshot[name] = snapshot.get(name, 0.0) + value
    except (ValueError, TypeError, IndexError, KeyError) as error:  # the parser's ways of refusing text
        raise MetricsUnreadable(f"not Prometheus text ({str(error)[:120]})") from error
    return snapshot


def read_metrics(
    base_url: str, *, prefixes: tuple[str, ...] = CACHE_PROXY_PREFIXES, timeout_s: float = 5.0
) -> ScrapeResult:
    """``GET base_url/metrics`` parsed, never raising: an unreachable service, an error
    status, a page too large or text that is not Prometheus' give no snapshot and a reason.
    A backend with no metric prefixes (it exports none) is not asked, and that is no problem."""
    if not prefixes:
        return ScrapeResult(None)
    url = f"{base_url.rstrip('/')}/metrics"
    try:
        with httpx.stream("GET", url, timeout=timeout_s) as response:
            if response.status_code >= 400:
                return ScrapeResult(None, f"GET /metrics answered HTTP {response.status_code}")
            body = bytearray()
            # httpx's timeout is per read: a page that trickles in would never end without a total.
            deadline = time.monotonic() + 2 * timeout_s
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_METRICS_BYTES:
                    return ScrapeResult(None, f"/metrics is larger than {MAX_METRICS_BYTES // (1024 * 1024)} MB")
                if time.monotonic() > deadline:
                    return ScrapeResult(None, f"/metrics took longer than {2 * timeout_s:g} s to read")
            encoding = response.encoding or "utf-8"
    except httpx.HTTPError as error:
        return ScrapeResult(None, f"/metrics did not answer ({type(error).__name__})")
    try:
        return ScrapeResult(parse_metrics_text(body.decode(encoding, errors="replace"), prefixes))
    except (MetricsUnreadable, LookupError) as error:  # LookupError: an unknown charset
        return ScrapeResult(None, f"/metrics is {error}" if isinstance(error, MetricsUnreadable) else str(error))


def scrape(
    base_url: str, *, prefixes: tuple[str, ...] = CACHE_PROXY_PREFIXES, timeout_s: float = 5.0
) -> Snapshot | None:
    """``GET base_url/metrics`` parsed; None when it cannot be read (see ``read_metrics``)."""
    return read_metrics(base_url, prefixes=prefixes, timeout_s=timeout_s).snapshot


def delta(before: Snapshot | None, after: Snapshot | None) -> Snapshot:
    """``after - before`` per sample (missing samples count as 0); ``{}`` without a baseline."""
    if before is None or not after:
        # Without a baseline the totals would include warm-up and earlier runs: no figure
        # is better than a wrong one.
        return {}
    return {name: value - before.get(name, 0.0) for name, value in after.items()}


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def _get(change: Snapshot, name: str | None) -> float | None:
    return change.get(name) if name else None


def backend_figures(change: Snapshot, names: MetricNames) -> dict[str, Any]:
    """Figures from a backend's metric deltas over a run, read with its ``names``."""
    return {
        "prefix_cache_hit_rate": _ratio(
            _get(change, names.prefix_cache_hits), _get(change, names.prefix_cache_queries)
        ),
        "server_ttft_avg_s": _ratio(_get(change, names.ttft_sum), _get(change, names.ttft_count)),
        "server_time_per_output_token_avg_s": _ratio(
            _get(change, names.time_per_output_token_sum), _get(change, names.time_per_output_token_count)
        )
        or _ratio(_get(change, names.inter_token_latency_sum), _get(change, names.inter_token_latency_count)),
        "server_requests": _get(change, names.requests_ok),
        "server_e2e_requests": _get(change, names.e2e_requests),
        "server_output_tokens": _get(change, names.output_tokens),
        "server_prompt_tokens": _get(change, names.prompt_tokens),
    }


# What backend_figures gives besides the run's server figures: counts for the cross-checks.
BACKEND_COUNTS = frozenset({"server_requests", "server_e2e_requests", "server_output_tokens", "server_prompt_tokens"})


def backend_part(figures: dict[str, Any]) -> ServerFigures:
    """The run's server figures from :func:`backend_figures`'s (an unknown name raises)."""
    return ServerFigures.from_figures(figures, not_figures=BACKEND_COUNTS)


def gauges(snapshot: Snapshot, names: MetricNames) -> dict[str, float | None]:
    """Requests running and waiting in the backend now (None where it does not say)."""
    return {
        "running_requests": _get(snapshot, names.running_requests),
        "waiting_requests": _get(snapshot, names.waiting_requests),
    }


def counters(snapshot: Snapshot, names: MetricNames) -> dict[str, float | None]:
    """The backend's cumulative output-token and completed-request counters now (None where
    it has none): sampled each second, they give the steady-state rates (lab.measurement.checks)."""
    return {
        "output_tokens": _get(snapshot, names.output_tokens),
        "requests": _get(snapshot, names.e2e_requests) if names.e2e_requests else _get(snapshot, names.requests_ok),
    }


def cache_figures(change: Snapshot) -> dict[str, Any]:
    """Figures from the cache proxy's metric deltas over a run."""
    hits = change.get("lab_cache_hits_total")
    misses = change.get("lab_cache_misses_total")
    bypasses = change.get("lab_cache_bypasses_total", 0.0)
    errors = change.get("lab_cache_errors_total", 0.0)  # served while Redis was unusable
    lookups = (hits or 0.0) + (misses or 0.0)
    return {
        "response_cache_hits": int(hits) if hits is not None else None,
        "response_cache_misses": int(misses) if misses is not None else None,
        "response_cache_hit_rate": _ratio(hits, lookups) if lookups else None,
        # No baseline (empty change): unknown, not zero.
        "response_cache_store_errors": int(change.get("lab_cache_store_errors_total", 0.0)) if change else None,
        "response_cache_bypasses": int(bypasses) if change else None,
        "response_cache_errors": int(errors) if change else None,
        # Every answer the proxy gave, whatever its X-Cache: what k6 counts on its side.
        "proxy_requests": int(lookups + bypasses + errors) if change else None,
    }


def response_cache_part(cache: dict[str, Any] | None, *, client_hit_rate: float | None) -> ResponseCacheFigures:
    """The response cache's figures: the proxy's counters (:func:`cache_figures`) when it ran;
    its hit rate falls back to what k6 saw in X-Cache (``client_hit_rate``) when the proxy
    counted no lookup or did not run."""
    if cache is None:
        return ResponseCacheFigures(response_cache_hit_rate=client_hit_rate)
    proxy = RunResults.of_record(cache)
    return ResponseCacheFigures(
        response_cache_hit_rate=proxy.response_cache_hit_rate
        if proxy.response_cache_hit_rate is not None
        else client_hit_rate,
        response_cache_hits=proxy.response_cache_hits,
        response_cache_store_errors=proxy.response_cache_store_errors,
    )


def count_check(
    *, client_count: float | None, server_count: float | None, in_flight_allowance: float | None = None
) -> dict[str, Any]:
    """Client (k6) against server counts: both, the difference and its share of the client's.

    ``in_flight_allowance``: how much more the server may count for requests still in flight
    when k6 stopped (served, never counted by k6), kept with the check when there is any."""
    check: dict[str, Any] = {
        "client": client_count,
        "server": server_count,
        "difference": None,
        "difference_ratio": None,
    }
    if client_count is not None and server_count is not None:
        difference = server_count - client_count
        check.update(difference=difference, difference_ratio=difference / client_count if client_count else None)
    if in_flight_allowance:
        check["in_flight_allowance"] = in_flight_allowance
    return check
