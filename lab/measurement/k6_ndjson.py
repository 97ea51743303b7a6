"""Read k6's per-sample NDJSON stream (``k6 run --out json=FILE``) chunk by chunk, never whole.

``stream_series(path)`` buckets samples per second: completed and failed requests,
tokens, latency avg/p50/p95 over successes, running VUs. It also returns latency
percentiles over all successes, computed as k6 computes them
(:func:`lab.measurement.k6_results.percentile`). ``stream_request_samples(path)`` keeps
every workload request's figures in compact arrays, for SLO evaluation after the fact.
Only workload requests (tagged ``lab_request:chat``, see :mod:`lab.measurement.k6_results`)
count.

The fast path relies on the exact layout k6 v1.x writes (Go's encoder: fixed key order,
sorted tag keys); a chunk where the fast path misses a sample line falls back to
``json.loads`` per line, so a layout change costs speed, never correctness (the layout
is checked on the first chunk that holds samples).
"""

from __future__ import annotations

import calendar
import dataclasses
import json
import math
import re
from array import array
from collections import Counter
from collections.abc import Collection, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from lab.measurement.k6_results import (
    CHAT_TAG,
    CHAT_TAG_VALUE,
    K6ResultsError,
    LatencyStats,
    percentile,
    streaming_figures_from_ms,
)

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


# The client-side streaming metrics -> their trend key (lab_unstreamed_answers is a counter).
_STREAM_TREND_KEYS = {b"lab_ttft": "ttft", b"lab_tpot": "tpot", b"lab_unstreamed_answers": ""}


@dataclass
class _Buckets:
    """What :func:`stream_series` accumulates, plain dicts keyed by bucket index."""

    latencies_ms: dict[int, list[float]] = field(default_factory=dict)
    failures: dict[int, int] = field(default_factory=dict)
    output_tokens: dict[int, float] = field(default_factory=dict)
    vus: dict[int, float] = field(default_factory=dict)
    seen: set[int] = field(default_factory=set)
    stream_trends_ms: dict[str, list[float]] = field(default_factory=dict)
    unstreamed: int = 0
    # Memo of k6's whole-second timestamps -> Unix seconds (many samples share one second).
    epoch_bases: dict[tuple[bytes, bytes], int] = field(default_factory=dict)


def _add_points(buckets: _Buckets, points: list[_Point], bucket_s: float) -> None:
    """Add one chunk's points to ``buckets``.

    The loop runs once per sample: the accumulators are bound to locals once per chunk.
    """
    latencies_ms, failures, output_tokens = buckets.latencies_ms, buckets.failures, buckets.output_tokens
    vus, seen, epoch_bases = buckets.vus, buckets.seen, buckets.epoch_bases
    stream_trends_ms, stream_metrics = buckets.stream_trends_ms, _STREAM_TREND_KEYS
    chat_tag, success_tag = _CHAT_TAG_BYTES, _SUCCESS_TAG_BYTES
    unstreamed = 0
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
    buckets.unstreamed += unstreamed


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
    buckets = _Buckets()
    samples_read = 0
    fast_path: bool | None = None
    for chunk in _iter_chunks(path):
        if fast_path is None and b'"Point"' in chunk:
            fast_path = _fast_path_fits(chunk)
        points = _POINT_RE.findall(chunk) if fast_path else _json_points(chunk)
        samples_read += len(points)
        _add_points(buckets, points, bucket_s)
    buckets.seen.update(buckets.latencies_ms, buckets.failures, buckets.output_tokens)
    series = _series_from_buckets(
        buckets.seen, buckets.latencies_ms, buckets.failures, buckets.output_tokens, buckets.vus,
        bucket_s=bucket_s, samples_read=samples_read,
    )
    return dataclasses.replace(series, stream_trends_ms=buckets.stream_trends_ms, unstreamed_answers=buckets.unstreamed)


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


# k6/lib.js tags each failed workload request's ``lab_request_failures`` sample with the
# answer it got (``lab_error``: the HTTP status and the error's message, or "no answer: ...").
_ERROR_MARKER = b'"metric":"lab_request_failures"'


def error_answers(path: Path | str) -> Counter[str]:
    """How many failed workload requests got each error answer, from a k6 NDJSON (lines
    without the tag, written by a k6 script of before the tag, count nothing)."""
    counts: Counter[str] = Counter()
    path = Path(path)
    if not path.is_file():
        return counts
    for chunk in _iter_chunks(path):
        if _ERROR_MARKER not in chunk:
            continue
        for line in chunk.splitlines():
            if _ERROR_MARKER not in line or b'"lab_error"' not in line:
                continue
            try:
                data = json.loads(line)["data"]
                answer = data["tags"]["lab_error"]
                counts[str(answer)] += int(data.get("value") or 1)
            except (ValueError, KeyError, TypeError):
                continue  # a line cut short by a killed k6
    return counts
