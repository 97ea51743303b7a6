"""Parse k6's results: the end-of-test summary JSON and the per-sample NDJSON stream.

The k6 scripts (``k6/lib.js``) tag every workload request ``lab_request: "chat"`` so the
health check in ``setup()`` never counts, and declare always-passing thresholds so the
summary carries sub-metrics over workload requests only, split by k6's
``expected_response`` tag (2xx). Latency is k6's end-to-end ``http_req_duration`` (as
the seed measured it), over successes only; failures are counted apart.

``parse_summary(path)`` returns plain figures with units in their names.
``stream_series(path)`` reads the NDJSON (``k6 run --out json=FILE``) chunk by chunk,
never whole, and buckets samples per second: completed and failed requests, tokens,
latency avg/p50/p95 over successes, running VUs. It also returns latency
percentiles over all successes, computed as k6 computes them.

The NDJSON fast path relies on the exact layout k6 v1.x writes (Go's encoder: fixed key
order, sorted tag keys); a chunk where the fast path misses a sample line falls back
to ``json.loads`` per line, so a layout change costs speed, never correctness (the
layout is checked on the first chunk that holds samples).
"""

from __future__ import annotations

import calendar
import dataclasses
import json
import math
import re
from array import array
from collections.abc import Collection, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

CHAT_TAG = "lab_request"
CHAT_TAG_VALUE = "chat"
_CHAT_SELECTOR = f"{CHAT_TAG}:{CHAT_TAG_VALUE}"

CHUNK_BYTES = 8 * 1024 * 1024

# The metrics the per-second series needs, in the order of the regex alternation.
# (Input tokens and cache hits are run totals in the summary; each extra metric here costs
# one more sample line per request to decode, so the series keeps to what it plots.)
_STREAM_METRICS = ("http_req_duration", "lab_output_tokens", "vus", "lab_ttft", "lab_tpot", "lab_unstreamed_answers")
_POINT_RE = re.compile(
    rb'\{"metric":"(' + b"|".join(name.encode() for name in _STREAM_METRICS) + rb')","type":"Point",'
    rb'"data":\{"time":"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)",'
    rb'"value":([^,]+),"tags":\{([^}]*)\}'
)
_POINT_MARKERS = tuple(f'{{"metric":"{name}","type":"Point"'.encode() for name in _STREAM_METRICS)
_CHAT_TAG_BYTES = f'"{CHAT_TAG}":"{CHAT_TAG_VALUE}"'.encode()
_SUCCESS_TAG_BYTES = b'"expected_response":"true"'


class K6ResultsError(ValueError):
    """A k6 result file is missing, empty or not what k6 writes."""


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
    def from_ms(cls, values_ms: list[float]) -> "LatencyStats":
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


def _metric_values(metrics: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The figures of one metric, for handleSummary's layout (``values``) and --summary-export's (flat)."""
    metric = metrics.get(name)
    if metric is None:
        return None
    values = metric.get("values", metric)
    return values if isinstance(values, dict) else None


def _first_metric(metrics: dict[str, Any], names: Sequence[str]) -> dict[str, Any] | None:
    for name in names:
        values = _metric_values(metrics, name)
        if values is not None:
            return values
    return None


def _count(values: dict[str, Any] | None, key: str = "count") -> int:
    if not values:
        return 0
    return int(round(float(values.get(key, 0) or 0)))


def _ms_to_s(values: dict[str, Any] | None, key: str) -> float | None:
    if not values or values.get(key) is None:
        return None
    return float(values[key]) / 1000.0


def _per_s(amount: float, duration_s: float | None) -> float | None:
    if not duration_s or duration_s <= 0:
        return None
    return amount / duration_s


def load_summary(path: Path | str) -> dict[str, Any]:
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
    return data


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
    Keys named like :data:`lab.measurement.results.RESULT_FIELDS` are the run's results.
    """
    data = load_summary(path)
    metrics: dict[str, Any] = data["metrics"]

    success_names = [f"http_req_duration{{{_CHAT_SELECTOR},expected_response:true}}", "http_req_duration{expected_response:true}"]
    latency_source = next((name for name in success_names if name in metrics), "http_req_duration")
    latency = _metric_values(metrics, latency_source)
    failed_latency = _metric_values(metrics, f"http_req_duration{{{_CHAT_SELECTOR},expected_response:false}}")
    reqs = _first_metric(metrics, [f"http_reqs{{{_CHAT_SELECTOR}}}", "http_reqs"])
    failed = _first_metric(metrics, [f"http_req_failed{{{_CHAT_SELECTOR}}}", "http_req_failed"])

    requests_total = _count(reqs)
    requests_failed = _count(failed, "passes")
    if latency_source.startswith(f"http_req_duration{{{_CHAT_SELECTOR}") and latency is not None:
        requests_ok = _count(latency)
        requests_failed = requests_total - requests_ok
    else:
        requests_ok = requests_total - requests_failed

    requests_started = _count(_metric_values(metrics, "lab_requests_started")) or requests_total
    iterations_completed = _count(_metric_values(metrics, "iterations"))
    iterations_started = _count(_metric_values(metrics, "lab_iterations_started")) or iterations_completed
    cache = _metric_values(metrics, "lab_cache_hits")
    cache_hits = _count(cache, "passes")
    cache_lookups = cache_hits + _count(cache, "fails")
    input_tokens = _count(_metric_values(metrics, "lab_input_tokens"))
    output_tokens = _count(_metric_values(metrics, "lab_output_tokens"))

    duration_ms = (data.get("state") or {}).get("testRunDurationMs")
    if duration_ms is not None:
        duration_s: float | None = float(duration_ms) / 1000.0
    elif reqs and reqs.get("rate"):
        duration_s = float(reqs["count"]) / float(reqs["rate"])  # --summary-export has no state
    else:
        duration_s = None

    vus_max = _metric_values(metrics, "vus_max")
    return {
        **streaming_figures(metrics),
        "requests_ok": requests_ok,
        "requests_failed": requests_failed,
        "requests_total": requests_total,
        "requests_started": requests_started,
        "requests_interrupted": max(0, requests_started - requests_total),
        "req_per_s": _per_s(requests_ok, duration_s),
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "input_tok_per_s": _per_s(input_tokens, duration_s),
        "output_tok_per_s": _per_s(output_tokens, duration_s),
        "latency_avg_s": _ms_to_s(latency, "avg") if requests_ok else None,
        "latency_min_s": _ms_to_s(latency, "min") if requests_ok else None,
        "latency_p50_s": _ms_to_s(latency, "med") if requests_ok else None,
        "latency_p90_s": _ms_to_s(latency, "p(90)") if requests_ok else None,
        "latency_p95_s": _ms_to_s(latency, "p(95)") if requests_ok else None,
        "latency_p99_s": _ms_to_s(latency, "p(99)") if requests_ok else None,
        "latency_max_s": _ms_to_s(latency, "max") if requests_ok else None,
        "latency_failed_avg_s": _ms_to_s(failed_latency, "avg") if requests_failed and failed_latency else None,
        "iterations_completed": iterations_completed,
        "iterations_started": iterations_started,
        "iterations_interrupted": max(0, iterations_started - iterations_completed),
        "iterations_dropped": _count(_metric_values(metrics, "dropped_iterations")),
        "cache_hits": cache_hits,
        "cache_lookups": cache_lookups,
        "response_cache_hit_rate": cache_hits / cache_lookups if cache_lookups else None,
        "vus_max": _count(vus_max, "max") if vus_max and "max" in vus_max else _count(vus_max, "value"),
        "data_received_bytes": _count(_metric_values(metrics, "data_received")),
        "data_sent_bytes": _count(_metric_values(metrics, "data_sent")),
        "measured_duration_s": duration_s,
        "latency_source": latency_source,
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


def streaming_figures(metrics: dict[str, Any]) -> dict[str, Any]:
    """``ttft_avg_s``... ``tpot_miss_avg_s`` and ``unstreamed_answers`` from a summary's
    metrics; None where no streamed answer was timed (a trend k6 declared but never fed)."""
    figures: dict[str, Any] = {}
    for figure, stats in _STREAM_FIGURES.items():
        values = _metric_values(metrics, _stream_metric_name(figure))
        timed = bool(values) and _count(values) > 0
        for stat in stats:
            figures[f"{figure}_{stat}_s"] = _ms_to_s(values, _STREAM_STATS[stat]) if timed else None
    # 0 when every timed answer streamed; None when no answer was timed (a stream was not asked for).
    unstreamed = _count(_metric_values(metrics, "lab_unstreamed_answers"))
    figures["unstreamed_answers"] = unstreamed if unstreamed or figures["ttft_avg_s"] is not None else None
    return figures


def streaming_figures_from_ms(trends_ms: dict[str, list[float]], unstreamed: int) -> dict[str, Any]:
    """The same figures from per-request values in ms, keyed ``ttft``, ``ttft_hit``... (the NDJSON)."""
    figures: dict[str, Any] = {}
    for figure, stats in _STREAM_FIGURES.items():
        latency = asdict(LatencyStats.from_ms(list(trends_ms.get(figure, []))))
        for stat in stats:
            figures[f"{figure}_{stat}_s"] = latency[f"{stat}_s"]
    figures["unstreamed_answers"] = unstreamed if unstreamed or figures["ttft_avg_s"] is not None else None
    return figures


# ---------------------------------------------------------------------------------------
# The NDJSON stream.


@dataclass(frozen=True)
class PerSecondSeries:
    """Per-bucket series of one run, aligned lists (index i covers [time_s[i], time_s[i] + bucket_s)).

    ``time_s`` is seconds since ``start_epoch_s`` (the first bucket's start, Unix time).
    Latency lists hold None where a bucket had no success; ``vus`` holds None where k6
    emitted no VU sample in that bucket. ``latency`` covers all successes of the run.
    """

    bucket_s: float
    start_epoch_s: float | None
    time_s: list[float]
    requests_ok: list[int]
    requests_failed: list[int]
    output_tokens: list[int]
    latency_avg_s: list[float | None]
    latency_p50_s: list[float | None]
    latency_p95_s: list[float | None]
    vus: list[int | None]
    latency: LatencyStats
    requests_ok_total: int
    requests_failed_total: int
    output_tokens_total: int
    samples_read: int
    # Per-request client TTFT/TPOT in ms, keyed ``ttft``, ``tpot``, ``ttft_hit``... (streamed runs).
    stream_trends_ms: dict[str, list[float]] = field(default_factory=dict)
    unstreamed_answers: int = 0

    COLUMNS: ClassVar[tuple[str, ...]] = ("time_s", "requests_ok", "requests_failed", "output_tokens", "latency_avg_s", "latency_p50_s",
               "latency_p95_s", "vus")

    def __len__(self) -> int:
        return len(self.time_s)

    def rows(self) -> list[dict[str, Any]]:
        """One dict per bucket (for a DataFrame or a table), keys as in ``COLUMNS``."""
        series = {name: getattr(self, name) for name in self.COLUMNS}
        return [{name: series[name][index] for name in self.COLUMNS} for index in range(len(self.time_s))]

    def totals(self) -> dict[str, Any]:
        """Run-wide figures from the stream: ``latency_*_s`` over successes, request and token counts."""
        totals: dict[str, Any] = {f"latency_{key}": value for key, value in asdict(self.latency).items() if key != "count"}
        totals.update(
            requests_ok=self.requests_ok_total,
            requests_failed=self.requests_failed_total,
            output_tokens=self.output_tokens_total,
        )
        return totals

    def figures(self) -> dict[str, Any]:
        """The run's results from the stream alone (when k6 wrote no summary), named like
        :data:`lab.measurement.results.RESULT_FIELDS`: counts, rates over the buckets' span, latencies."""
        totals = self.totals()
        duration_s = len(self.time_s) * self.bucket_s or None
        return {
            **{key: value for key, value in totals.items() if key.startswith("latency_")},
            "requests_ok": self.requests_ok_total,
            "requests_failed": self.requests_failed_total,
            "req_per_s": self.requests_ok_total / duration_s if duration_s else None,
            "output_tok_per_s": self.output_tokens_total / duration_s if duration_s else None,
            "measured_duration_s": duration_s,
            **streaming_figures_from_ms(self.stream_trends_ms, self.unstreamed_answers),
        }


def _epoch_base_s(whole: bytes, zone: bytes) -> int:
    """Unix seconds of k6's ``YYYY-MM-DDTHH:MM:SS`` plus its zone (``Z`` or ``+hh:mm``)."""
    year, month, day = int(whole[0:4]), int(whole[5:7]), int(whole[8:10])
    hour, minute, second = int(whole[11:13]), int(whole[14:16]), int(whole[17:19])
    base = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    if zone != b"Z":
        offset_s = int(zone[1:3]) * 3600 + int(zone[4:6]) * 60
        base -= offset_s if zone[:1] == b"+" else -offset_s
    return base


def _iter_chunks(path: Path, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
    """Yield chunks of whole lines (the last line may lack its newline)."""
    with open(path, "rb") as handle:
        remainder = b""
        while True:
            block = handle.read(chunk_bytes)
            if not block:
                break
            if remainder:
                block = remainder + block
            cut = block.rfind(b"\n")
            if cut < 0:
                remainder = block
                continue
            remainder = block[cut + 1:]
            yield block[: cut + 1]
        if remainder:
            yield remainder


_Point = tuple[bytes, bytes, "bytes | None", bytes, bytes, bytes]
_TIME_RE = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)")


def _json_samples(chunk: bytes, metrics: Collection[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(metric, sample data) of every whole Point line of ``metrics`` in ``chunk``, by
    ``json.loads`` (the slow path behind the regexes)."""
    for line in chunk.splitlines():
        if b'"Point"' not in line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut short by a killed k6
        if record.get("type") == "Point" and record.get("metric") in metrics:
            yield record["metric"], record["data"]


def _json_points(chunk: bytes) -> list[_Point]:
    """Slow path: the same tuples as the regex, from ``json.loads`` per line."""
    points: list[_Point] = []
    for metric, sample in _json_samples(chunk, _STREAM_METRICS):
        match = _TIME_RE.match(sample["time"])
        if match is None:
            continue
        tags = json.dumps(sample.get("tags") or {}, separators=(",", ":"), sort_keys=True)[1:-1]
        points.append((
            metric.encode(),
            match.group(1).encode(),
            match.group(2).encode() if match.group(2) else None,
            match.group(3).encode(),
            repr(float(sample["value"])).encode(),
            tags.encode(),
        ))
    return points


def _fast_path_fits(chunk: bytes) -> bool:
    """True when the regex catches every sample line of the metrics we need in ``chunk``.

    Checked on the first chunk only: the layout belongs to the k6 version, and scanning
    every chunk again would cost as much as the regex itself.
    """
    if chunk.count(b'"Point"') != chunk.count(b'","type":"Point","data":{"time":"'):
        return False
    complete = chunk if chunk.endswith(b"\n") else chunk[: chunk.rfind(b"\n") + 1]
    expected = sum(complete.count(marker) for marker in _POINT_MARKERS)
    return len(_POINT_RE.findall(complete)) == expected


def stream_series(path: Path | str, *, bucket_s: float = 1.0) -> PerSecondSeries:
    """Stream a k6 NDJSON file (``--out json=FILE``) into per-bucket series.

    Reads the file in chunks of whole lines; memory stays bounded by the chunk size plus
    one float per successful request. Only workload requests (tagged
    ``lab_request:chat``) count; successes are k6's ``expected_response:true``.
    """
    if bucket_s <= 0:
        raise ValueError("bucket_s must be positive")
    path = Path(path)
    if not path.exists():
        raise K6ResultsError(f"k6 NDJSON {path} does not exist")
    # Plain dicts keyed by bucket index: this loop runs once per request, keep it lean.
    latencies_ms: dict[int, list[float]] = {}
    failures: dict[int, int] = {}
    output_tokens: dict[int, float] = {}
    vus: dict[int, float] = {}
    epoch_bases: dict[tuple[bytes, bytes], int] = {}
    seen: set[int] = set()
    samples_read = 0
    stream_metrics = {b"lab_ttft": "ttft", b"lab_tpot": "tpot", b"lab_unstreamed_answers": ""}
    stream_trends_ms: dict[str, list[float]] = {}
    unstreamed = 0
    fast_path: bool | None = None
    chat_tag, success_tag = _CHAT_TAG_BYTES, _SUCCESS_TAG_BYTES
    for chunk in _iter_chunks(path):
        if fast_path is None and b'"Point"' in chunk:
            fast_path = _fast_path_fits(chunk)
        points = _POINT_RE.findall(chunk) if fast_path else _json_points(chunk)
        samples_read += len(points)
        for metric, whole, fraction, zone, value, tags in points:
            base = epoch_bases.get((whole, zone))
            if base is None:
                base = epoch_bases[(whole, zone)] = _epoch_base_s(whole, zone)
            if bucket_s == 1.0:
                index = base
            else:
                index = math.floor((base + (float(fraction) if fraction else 0.0)) / bucket_s)
            if metric == b"vus":
                vus[index] = float(value)
                seen.add(index)
                continue
            if chat_tag not in tags:
                continue  # the health check in setup(), or a foreign request
            if metric in stream_metrics:
                if metric == b"lab_unstreamed_answers":
                    unstreamed += int(float(value))
                    continue
                trend = stream_metrics[metric]
                stream_trends_ms.setdefault(trend, []).append(float(value))
                for cache_tag, suffix in ((b'"cache":"HIT"', "_hit"), (b'"cache":"MISS"', "_miss")):
                    if cache_tag in tags:
                        stream_trends_ms.setdefault(trend + suffix, []).append(float(value))
                continue
            if metric == b"http_req_duration":
                if success_tag in tags:
                    bucket = latencies_ms.get(index)
                    if bucket is None:
                        bucket = latencies_ms[index] = []
                    bucket.append(float(value))
                else:
                    failures[index] = failures.get(index, 0) + 1
            else:  # lab_output_tokens
                output_tokens[index] = output_tokens.get(index, 0.0) + float(value)
    seen.update(latencies_ms, failures, output_tokens)
    series = _series_from_buckets(
        seen, latencies_ms, failures, output_tokens, vus, bucket_s=bucket_s, samples_read=samples_read
    )
    return dataclasses.replace(series, stream_trends_ms=stream_trends_ms, unstreamed_answers=unstreamed)


def _series_from_buckets(
    seen: set[int],
    latencies_ms: dict[int, list[float]],
    failures: dict[int, int],
    output_tokens: dict[int, float],
    vus: dict[int, float],
    *,
    bucket_s: float,
    samples_read: int,
) -> PerSecondSeries:
    """Turn the bucket maps into aligned lists (empty buckets in between filled with zeros)."""
    first = min(seen) if seen else 0
    indexes = range(first, max(seen) + 1) if seen else range(0)
    series: dict[str, list[Any]] = {name: [] for name in PerSecondSeries.COLUMNS}
    all_latencies_ms: list[float] = []
    for index in indexes:
        latencies = latencies_ms.pop(index, [])
        latencies.sort()
        series["time_s"].append(round((index - first) * bucket_s, 9))
        series["requests_ok"].append(len(latencies))
        series["requests_failed"].append(failures.get(index, 0))
        series["output_tokens"].append(int(output_tokens.get(index, 0)))
        if latencies:
            series["latency_avg_s"].append(math.fsum(latencies) / len(latencies) / 1000.0)
            series["latency_p50_s"].append(percentile(latencies, 0.50) / 1000.0)  # type: ignore[operator]
            series["latency_p95_s"].append(percentile(latencies, 0.95) / 1000.0)  # type: ignore[operator]
        else:
            series["latency_avg_s"].append(None)
            series["latency_p50_s"].append(None)
            series["latency_p95_s"].append(None)
        series["vus"].append(int(vus[index]) if index in vus else None)
        all_latencies_ms.extend(latencies)
    return PerSecondSeries(
        bucket_s=bucket_s,
        start_epoch_s=first * bucket_s if seen else None,
        latency=LatencyStats.from_ms(all_latencies_ms),
        requests_ok_total=len(all_latencies_ms),
        requests_failed_total=sum(series["requests_failed"]),
        output_tokens_total=sum(series["output_tokens"]),
        samples_read=samples_read,
        **series,
    )


# ---------------------------------------------------------------------------------------
# Per-request figures (for SLO evaluation after the fact), in a pass of their own.

# k6 Trend metrics with one point per workload request; values in milliseconds. lab_ttft and
# lab_tpot exist only for streamed runs (k6/lib.js adds them when the answer is streamed).
_REQUEST_METRICS = ("http_req_duration", "lab_ttft", "lab_tpot")
_REQUEST_POINT_RE = re.compile(
    rb'\{"metric":"(' + b"|".join(name.encode() for name in _REQUEST_METRICS) + rb')","type":"Point",'
    rb'"data":\{"time":"[^"]*","value":([^,]+),"tags":\{([^}]*)\}'
)
_REQUEST_MARKERS = tuple(f'{{"metric":"{name}","type":"Point"'.encode() for name in _REQUEST_METRICS)


@dataclass
class RequestSamples:
    """Per-request figures of one run in compact arrays (float32 seconds, one byte per ok flag).

    ``latency_s`` and ``ok`` hold every workload request in the order k6 wrote them (a failed
    request's latency is kept but never judged). ``ttft_s``/``tpot_s`` hold one value per
    successful streamed request, in the order written; empty when the run was not streamed.
    """

    latency_s: "array[float]"
    ok: bytearray
    ttft_s: "array[float]"
    tpot_s: "array[float]"

    def __len__(self) -> int:
        return len(self.ok)


def _request_points(chunk: bytes) -> list[tuple[bytes, bytes, bytes]]:
    """(metric, value, tags) of the per-request metrics; ``json.loads`` per line when the
    fast regex misses any such sample line of the chunk."""
    points = _REQUEST_POINT_RE.findall(chunk)
    if len(points) == sum(chunk.count(marker) for marker in _REQUEST_MARKERS):
        return points
    points = []
    for metric, sample in _json_samples(chunk, _REQUEST_METRICS):
        tags = json.dumps(sample.get("tags") or {}, separators=(",", ":"), sort_keys=True)[1:-1]
        points.append((metric.encode(), repr(float(sample["value"])).encode(), tags.encode()))
    return points


def stream_request_samples(path: Path | str) -> RequestSamples:
    """Read every workload request's latency, success and (streamed runs) TTFT/TPOT from a
    k6 NDJSON, chunk by chunk; memory is about 13 bytes per request beyond the chunk."""
    path = Path(path)
    if not path.exists():
        raise K6ResultsError(f"k6 NDJSON {path} does not exist")
    samples = RequestSamples(array("f"), bytearray(), array("f"), array("f"))
    chat_tag, success_tag = _CHAT_TAG_BYTES, _SUCCESS_TAG_BYTES
    for chunk in _iter_chunks(path):
        for metric, value, tags in _request_points(chunk):
            if chat_tag not in tags:
                continue
            if metric == b"http_req_duration":
                samples.latency_s.append(float(value) / 1000.0)
                samples.ok.append(1 if success_tag in tags else 0)
            elif metric == b"lab_ttft":
                samples.ttft_s.append(float(value) / 1000.0)
            else:
                samples.tpot_s.append(float(value) / 1000.0)
    return samples
