"""Parse k6's end-of-test summary JSON; the figures and percentiles both k6 outputs share.

The k6 scripts (``k6/lib.js``) tag every workload request ``lab_request: "chat"`` so the
health check in ``setup()`` never counts, and declare always-passing thresholds so the
summary carries sub-metrics over workload requests only, split by k6's
``expected_response`` tag (2xx). Latency is k6's end-to-end ``http_req_duration`` (as
the seed measured it), over successes only; failures are counted apart.

``parse_summary(path)`` returns the summary's figures and counts with units in their names;
:func:`client_figures` takes the run's results from them (a :class:`ClientFigures`), and
fails on a name that is neither a figure nor one of :data:`SUMMARY_COUNTS`. The per-sample
NDJSON stream (``k6 run --out json=FILE``) is read by :mod:`lab.measurement.k6_ndjson`,
which builds on :func:`percentile`, :class:`LatencyStats` and the streaming figures here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Required, TypedDict, cast

from lab.measurement.results import ClientFigures, whole_test_rate

CHAT_TAG = "lab_request"
CHAT_TAG_VALUE = "chat"
_CHAT_SELECTOR = f"{CHAT_TAG}:{CHAT_TAG_VALUE}"


class K6ResultsError(ValueError):
    """A k6 result file is missing, empty or not what k6 writes."""


# A metric's statistics by k6's name ("count", "rate", "avg", "min", "med", "max", "p(90)",
# "passes", "fails", "value"): numbers, trends in ms.
K6Statistics = dict[str, float]
# One metric of the summary: handleSummary nests its statistics under "values" beside "type",
# "contains" and "thresholds"; --summary-export writes them flat. Read through metric_statistics.
K6Metric = dict[str, object]


class K6RunState(TypedDict, total=False):
    """handleSummary's ``state`` (--summary-export has none): the run's duration is all the lab reads."""

    testRunDurationMs: float


class K6Summary(TypedDict, total=False):
    """k6's end-of-test summary JSON (handleSummary's ``data`` or ``--summary-export``): the parts read."""

    metrics: Required[dict[str, K6Metric]]
    state: K6RunState


# One value of parse_summary's: a count, a figure (None when not measured) or the latency's source.
SummaryValue = int | float | str | None
# Streaming figures by name: seconds, or the unstreamed answers' count; None when not timed.
StreamingFigures = dict[str, float | int | None]


# ---------------------------------------------------------------------------------------
# Percentiles, exactly as k6 computes trend percentiles (linear between closest ranks).


def percentile(sorted_values: Sequence[float], fraction: float) -> float | None:
    """k6's percentile of already sorted values (``fraction`` in [0, 1]); None when empty."""
    count = len(sorted_values)
    if count == 0:
        return None
    if count == 1:
        return float(sorted_values[0])
    rank = fraction * (count - 1)
    lower = math.floor(rank)
    upper = min(lower + 1, count - 1)
    weight = rank - lower
    return float(sorted_values[lower] + (sorted_values[upper] - sorted_values[lower]) * weight)


@dataclass(frozen=True)
class LatencyStats:
    """End-to-end latency over successful requests, in seconds (None when no success)."""

    count: int
    avg_s: float | None
    min_s: float | None
    p50_s: float | None
    p90_s: float | None
    p95_s: float | None
    p99_s: float | None
    max_s: float | None

    @classmethod
    def from_ms(cls, values_ms: list[float]) -> LatencyStats:
        """Stats of latencies given in milliseconds (the list is sorted in place)."""
        if not values_ms:
            return cls(0, None, None, None, None, None, None, None)
        values_ms.sort()

        def to_s(value_ms: float | None) -> float | None:
            return None if value_ms is None else value_ms / 1000.0

        return cls(
            count=len(values_ms),
            avg_s=math.fsum(values_ms) / len(values_ms) / 1000.0,
            min_s=values_ms[0] / 1000.0,
            p50_s=to_s(percentile(values_ms, 0.50)),
            p90_s=to_s(percentile(values_ms, 0.90)),
            p95_s=to_s(percentile(values_ms, 0.95)),
            p99_s=to_s(percentile(values_ms, 0.99)),
            max_s=values_ms[-1] / 1000.0,
        )


# ---------------------------------------------------------------------------------------
# The end-of-test summary.


def metric_statistics(metrics: Mapping[str, K6Metric], name: str) -> K6Statistics | None:
    """The figures of one metric, for handleSummary's layout (``values``) and --summary-export's (flat)."""
    metric = metrics.get(name)
    if metric is None:
        return None
    values = metric.get("values", metric)
    return cast(K6Statistics, values) if isinstance(values, dict) else None


def _first_metric(metrics: Mapping[str, K6Metric], names: Sequence[str]) -> K6Statistics | None:
    for name in names:
        values = metric_statistics(metrics, name)
        if values is not None:
            return values
    return None


def _count(values: K6Statistics | None, key: str = "count") -> int:
    if not values:
        return 0
    return round(float(values.get(key, 0) or 0))


def _ms_to_s(values: K6Statistics | None, key: str) -> float | None:
    if not values or values.get(key) is None:
        return None
    return float(values[key]) / 1000.0


def load_summary(path: Path | str) -> K6Summary:
    """Read a k6 summary JSON file (handleSummary's ``data`` or ``--summary-export``)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as error:
        raise K6ResultsError(f"k6 summary {path} does not exist (did k6 reach handleSummary?)") from error
    if not text.strip():
        raise K6ResultsError(f"k6 summary {path} is empty")
    try:
        data = json.loads(text)
    except ValueError as error:
        raise K6ResultsError(f"k6 summary {path} is not JSON: {error}") from error
    if not isinstance(data, dict) or not isinstance(data.get("metrics"), dict):
        raise K6ResultsError(f"k6 summary {path} has no 'metrics' object")
    return cast(K6Summary, data)


def parse_summary(path: Path | str) -> dict[str, Any]:
    """Figures of one k6 run from its summary JSON, units in the key names.

    Keys: ``requests_ok``, ``requests_failed``, ``requests_total`` (completed workload
    requests), ``requests_started``, ``requests_interrupted`` (sent but unanswered when
    the test ended or was cancelled), ``req_per_s`` (successes per second of test run),
    ``input_tokens``, ``output_tokens``, ``input_tok_per_s``, ``output_tok_per_s``,
    ``latency_avg_s``, ``latency_min_s``, ``latency_p50_s``, ``latency_p90_s``,
    ``latency_p95_s``, ``latency_p99_s``, ``latency_max_s`` (successes only; None when
    there is none), ``latency_failed_avg_s``, ``iterations_completed``,
    ``iterations_started``, ``iterations_interrupted``, ``iterations_dropped``,
    ``cache_hits``, ``cache_lookups``, ``response_cache_hit_rate`` (None when no response
    carried ``X-Cache``), ``vus_max``, ``data_received_bytes``, ``data_sent_bytes``,
    ``measured_duration_s``, ``latency_source`` (which k6 metric the latency came from),
    and the client-side streaming figures of :func:`streaming_figures` (``ttft_*_s``,
    ``tpot_*_s``, ``unstreamed_answers``).
    The run's results among them are :func:`client_figures`'s; the rest are :data:`SUMMARY_COUNTS`.
    """
    data = load_summary(path)
    metrics = data["metrics"]
    success_names = [
        f"http_req_duration{{{_CHAT_SELECTOR},expected_response:true}}",
        "http_req_duration{expected_response:true}",
    ]
    latency_source = next((name for name in success_names if name in metrics), "http_req_duration")
    latency = metric_statistics(metrics, latency_source)
    reqs = _first_metric(metrics, [f"http_reqs{{{_CHAT_SELECTOR}}}", "http_reqs"])
    requests_total = _count(reqs)
    requests_ok, requests_failed = _request_outcomes(metrics, latency_source, latency, requests_total)
    requests_started = _count(metric_statistics(metrics, "lab_requests_started")) or requests_total
    input_tokens = _count(metric_statistics(metrics, "lab_input_tokens"))
    output_tokens = _count(metric_statistics(metrics, "lab_output_tokens"))
    duration_s = _run_duration_s(data, reqs)
    vus_max = metric_statistics(metrics, "vus_max")
    return {
        **streaming_figures(metrics),
        "requests_ok": requests_ok,
        "requests_failed": requests_failed,
        "requests_total": requests_total,
        "requests_started": requests_started,
        "requests_interrupted": max(0, requests_started - requests_total),
        "req_per_s": whole_test_rate(requests_ok, duration_s),
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "input_tok_per_s": whole_test_rate(input_tokens, duration_s),
        "output_tok_per_s": whole_test_rate(output_tokens, duration_s),
        **_latency_figures(metrics, latency, requests_ok, requests_failed),
        **_iteration_and_cache_figures(metrics),
        "vus_max": _count(vus_max, "max") if vus_max and "max" in vus_max else _count(vus_max, "value"),
        "data_received_bytes": _count(metric_statistics(metrics, "data_received")),
        "data_sent_bytes": _count(metric_statistics(metrics, "data_sent")),
        "measured_duration_s": duration_s,
        "latency_source": latency_source,
    }


# What parse_summary gives besides the run's client figures: counts for the client/server
# cross-checks and the steady rate, and k6's X-Cache hit rate (the response cache's figure
# when no proxy counted, see server_metrics.response_cache_part).
SUMMARY_COUNTS = frozenset(
    {
        "requests_total",
        "requests_started",
        "requests_interrupted",
        "input_tokens",
        "output_tokens",
        "latency_min_s",
        "latency_failed_avg_s",
        "iterations_started",
        "cache_hits",
        "cache_lookups",
        "response_cache_hit_rate",
        "vus_max",
        "data_received_bytes",
        "data_sent_bytes",
        "latency_source",
    }
)


def client_figures(summary: Mapping[str, SummaryValue]) -> ClientFigures:
    """The run's client figures from :func:`parse_summary`'s; an unknown name raises
    ``UnknownFigureError`` (a figure misspelt here would otherwise be lost)."""
    return ClientFigures.from_figures(summary, not_figures=SUMMARY_COUNTS)


def _request_outcomes(
    metrics: Mapping[str, K6Metric], latency_source: str, latency: K6Statistics | None, requests_total: int
) -> tuple[int, int]:
    """``(requests_ok, requests_failed)`` of workload requests.

    With the workload-only success trend the successes are its count; otherwise they are
    what ``http_req_failed`` leaves of the total.
    """
    failed = _first_metric(metrics, [f"http_req_failed{{{_CHAT_SELECTOR}}}", "http_req_failed"])
    requests_failed = _count(failed, "passes")
    if latency_source.startswith(f"http_req_duration{{{_CHAT_SELECTOR}") and latency is not None:
        requests_ok = _count(latency)
        return requests_ok, requests_total - requests_ok
    return requests_total - requests_failed, requests_failed


def _run_duration_s(data: K6Summary, reqs: K6Statistics | None) -> float | None:
    """The test run's duration: handleSummary's ``state``, else count / rate (--summary-export has no state)."""
    duration_ms = (data.get("state") or K6RunState()).get("testRunDurationMs")
    if duration_ms is not None:
        return float(duration_ms) / 1000.0
    if reqs and reqs.get("rate"):
        return float(reqs["count"]) / float(reqs["rate"])
    return None


def _latency_figures(
    metrics: Mapping[str, K6Metric], latency: K6Statistics | None, requests_ok: int, requests_failed: int
) -> dict[str, float | None]:
    """``latency_*_s`` over successes (None without one) and ``latency_failed_avg_s``."""
    failed_latency = metric_statistics(metrics, f"http_req_duration{{{_CHAT_SELECTOR},expected_response:false}}")
    figures = {
        f"latency_{name}_s": _ms_to_s(latency, statistic) if requests_ok else None
        for name, statistic in (
            ("avg", "avg"),
            ("min", "min"),
            ("p50", "med"),
            ("p90", "p(90)"),
            ("p95", "p(95)"),
            ("p99", "p(99)"),
            ("max", "max"),
        )
    }
    figures["latency_failed_avg_s"] = _ms_to_s(failed_latency, "avg") if requests_failed and failed_latency else None
    return figures


def _iteration_and_cache_figures(metrics: Mapping[str, K6Metric]) -> dict[str, int | float | None]:
    """``iterations_*`` (completed, started, interrupted, dropped) and the response cache's hits."""
    iterations_completed = _count(metric_statistics(metrics, "iterations"))
    iterations_started = _count(metric_statistics(metrics, "lab_iterations_started")) or iterations_completed
    cache = metric_statistics(metrics, "lab_cache_hits")
    cache_hits = _count(cache, "passes")
    cache_lookups = cache_hits + _count(cache, "fails")
    return {
        "iterations_completed": iterations_completed,
        "iterations_started": iterations_started,
        "iterations_interrupted": max(0, iterations_started - iterations_completed),
        "iterations_dropped": _count(metric_statistics(metrics, "dropped_iterations")),
        "cache_hits": cache_hits,
        "cache_lookups": cache_lookups,
        "response_cache_hit_rate": cache_hits / cache_lookups if cache_lookups else None,
    }


# Client-side streaming figures: k6/lib.js records, for streamed answers only, lab_ttft
# (time to first byte, ms) and lab_tpot ((duration - ttfb) / (tokens - 1), ms), tagged
# `cache:HIT|MISS` when a response cache answered; lab_unstreamed_answers counts answers
# that came back as one body although a stream was asked for (their lab_ttft is the time
# to the whole body).
STREAM_TRENDS = {"ttft": "lab_ttft", "tpot": "lab_tpot"}
# Result key suffix -> k6 summary statistic.
_STREAM_STATS = {"avg": "avg", "p50": "med", "p95": "p(95)", "p99": "p(99)"}
_STREAM_FIGURES = {
    "ttft": ("avg", "p50", "p95", "p99"),
    "tpot": ("avg", "p95"),
    "ttft_hit": ("avg", "p95"),
    "ttft_miss": ("avg", "p95"),
    "tpot_hit": ("avg",),
    "tpot_miss": ("avg",),
}


def _stream_metric_name(figure: str) -> str:
    """``ttft_hit`` -> ``lab_ttft{cache:HIT}``."""
    trend, _, cache = figure.partition("_")
    name = STREAM_TRENDS[trend]
    return f"{name}{{cache:{cache.upper()}}}" if cache else name


def streaming_figures(metrics: Mapping[str, K6Metric]) -> StreamingFigures:
    """``ttft_avg_s``... ``tpot_miss_avg_s`` and ``unstreamed_answers`` from a summary's
    metrics; None where no streamed answer was timed (a trend k6 declared but never fed)."""
    figures: StreamingFigures = {}
    for figure, stats in _STREAM_FIGURES.items():
        values = metric_statistics(metrics, _stream_metric_name(figure))
        timed = bool(values) and _count(values) > 0
        for stat in stats:
            figures[f"{figure}_{stat}_s"] = _ms_to_s(values, _STREAM_STATS[stat]) if timed else None
    # 0 when every timed answer streamed; None when no answer was timed (a stream was not asked for).
    unstreamed = _count(metric_statistics(metrics, "lab_unstreamed_answers"))
    return figures | _unstreamed(figures, unstreamed)


def streaming_figures_from_ms(trends_ms: Mapping[str, Sequence[float]], unstreamed: int) -> StreamingFigures:
    """The same figures from per-request values in ms, keyed ``ttft``, ``ttft_hit``... (the NDJSON)."""
    figures: StreamingFigures = {}
    for figure, stats in _STREAM_FIGURES.items():
        latency = asdict(LatencyStats.from_ms(list(trends_ms.get(figure, []))))
        for stat in stats:
            figures[f"{figure}_{stat}_s"] = latency[f"{stat}_s"]
    return figures | _unstreamed(figures, unstreamed)


def _unstreamed(streaming: Mapping[str, float | int | None], unstreamed: int) -> dict[str, int | None]:
    """The unstreamed answers: 0 when every timed answer streamed; None when no answer was timed
    (a stream was not asked for)."""
    timed = ClientFigures.from_figures(streaming).ttft_avg_s is not None
    return {"unstreamed_answers": unstreamed if unstreamed or timed else None}
