"""Read k6's per-sample NDJSON (``k6 run --out json=...``) as it arrives, in pieces, never whole.

:class:`SampleStream` is fed k6's output in pieces of any size (from the pipe k6 writes
to, see :mod:`lab.run.k6_driver`, or from a file) and keeps, in one pass: per-second
buckets (completed and failed requests, tokens, latency avg/p50/p95 over successes,
running VUs), every workload request's figures in compact arrays (for SLO evaluation
after the fact) and the run-wide latency percentiles over successes, computed as k6
computes them (:func:`lab.measurement.k6_results.percentile`). Its memory is flat in
the run's length except for the per-request arrays: 13 bytes a request (float32 latency,
ok flag, float64 latency of a success for the exact run-wide percentiles), 18 more for a
streamed one (TTFT and TPOT in ms, a cache byte each). A second's raw latencies are
summarised once no sample has reached it for :data:`LATE_SAMPLE_WINDOW_S`.
:mod:`lab.measurement.k6_ndjson_files` reads a file (plain or ``.gz``) through it.
Only workload requests (tagged ``lab_request:chat``, see
:mod:`lab.measurement.k6_results`) count.

The fast path relies on the exact layout k6 v1.x writes (Go's encoder: fixed key order,
sorted tag keys); a chunk where the fast path misses a sample line falls back to
``json.loads`` per line, so a layout change costs speed, never correctness (the layout
is checked on the first chunk that holds samples).
"""

from __future__ import annotations

import calendar
import json
import math
import re
from array import array
from collections import Counter
from collections.abc import Collection, Iterator
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Required, TypedDict

from lab.measurement.k6_results import CHAT_TAG, CHAT_TAG_VALUE, LatencyStats, percentile, streaming_figures_from_ms
from lab.measurement.results import ClientFigures, whole_test_rate

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


class SeriesColumn(StrEnum):
    """The columns of a run's per-second series (k6's part of the stored series document):
    counts per bucket, latencies of the requests that ended in it, and the VUs."""

    TIME_S = "time_s"
    REQUESTS_OK = "requests_ok"
    REQUESTS_FAILED = "requests_failed"
    OUTPUT_TOKENS = "output_tokens"
    LATENCY_AVG_S = "latency_avg_s"
    LATENCY_P50_S = "latency_p50_s"
    LATENCY_P95_S = "latency_p95_s"
    VUS = "vus"


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
    stream_trends_ms: dict[str, array[float]] = field(default_factory=dict)
    unstreamed_answers: int = 0

    COLUMNS: ClassVar[tuple[str, ...]] = tuple(column.value for column in SeriesColumn)

    def __len__(self) -> int:
        return len(self.time_s)

    def rows(self) -> list[dict[str, Any]]:
        """One dict per bucket (for a DataFrame or a table), keys as in ``COLUMNS``."""
        series = {name: getattr(self, name) for name in self.COLUMNS}
        return [{name: series[name][index] for name in self.COLUMNS} for index in range(len(self.time_s))]

    def totals(self) -> dict[str, Any]:
        """Run-wide figures from the stream: ``latency_*_s`` over successes, request and token counts."""
        totals: dict[str, Any] = {
            f"latency_{key}": value for key, value in asdict(self.latency).items() if key != "count"
        }
        counts = {"requests_ok": self.requests_ok_total, "requests_failed": self.requests_failed_total}
        return {**totals, **counts, "output_tokens": self.output_tokens_total}

    def client_figures(self) -> ClientFigures:
        """The run's client figures from the stream alone (no summary): counts, rates over the buckets'
        span (:func:`whole_test_rate`, as from the summary), latencies but the minimum (no column)."""
        duration_s = len(self.time_s) * self.bucket_s or None
        latency = {
            f"latency_{key}": value for key, value in asdict(self.latency).items() if key not in ("count", "min_s")
        }
        return ClientFigures.from_figures(
            {
                **latency,
                "requests_ok": self.requests_ok_total,
                "requests_failed": self.requests_failed_total,
                "req_per_s": whole_test_rate(self.requests_ok_total, duration_s),
                "output_tok_per_s": whole_test_rate(self.output_tokens_total, duration_s),
                "measured_duration_s": duration_s,
                **streaming_figures_from_ms(self.stream_trends_ms, self.unstreamed_answers),
            }
        )


def _epoch_base_s(whole: bytes, zone: bytes) -> int:
    """Unix seconds of k6's ``YYYY-MM-DDTHH:MM:SS`` plus its zone (``Z`` or ``+hh:mm``)."""
    year, month, day = int(whole[0:4]), int(whole[5:7]), int(whole[8:10])
    hour, minute, second = int(whole[11:13]), int(whole[14:16]), int(whole[17:19])
    base = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    if zone != b"Z":
        offset_s = int(zone[1:3]) * 3600 + int(zone[4:6]) * 60
        base -= offset_s if zone[:1] == b"+" else -offset_s
    return base


_Point = tuple[bytes, bytes, "bytes | None", bytes, bytes, bytes]
_TIME_RE = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)")


class K6PointData(TypedDict, total=False):
    """A ``Point`` line's ``data`` in k6's NDJSON output: when, the value, the sample's tags."""

    time: Required[str]
    value: Required[float]
    tags: dict[str, str] | None


def _json_samples(chunk: bytes, metrics: Collection[str]) -> Iterator[tuple[str, K6PointData]]:
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
        points.append(
            (
                metric.encode(),
                match.group(1).encode(),
                match.group(2).encode() if match.group(2) else None,
                match.group(3).encode(),
                repr(float(sample["value"])).encode(),
                tags.encode(),
            )
        )
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
# A streamed request's cache outcome, one byte per TTFT/TPOT point (0: no cache answered).
_CACHE_HIT, _CACHE_MISS = 1, 2
_CACHE_SUFFIXES = {_CACHE_HIT: "_hit", _CACHE_MISS: "_miss"}

# A second's raw latencies are summarised (count, sum, p50, p95) once the newest sample is
# this much later: k6 flushes its samples every 200 ms and stamps them when a request ends,
# so a sample later than this is very rare. One that comes counts in its second's requests
# and average, not in its percentiles.
LATE_SAMPLE_WINDOW_S = 30.0


@dataclass(frozen=True)
class _ClosedSecond:
    """A bucket whose raw latencies were summarised (ms)."""

    count: int
    sum_ms: float
    p50_ms: float | None
    p95_ms: float | None


@dataclass
class RequestSamples:
    """Per-request figures of one run in compact arrays (float32 seconds, one byte per ok flag).

    ``latency_s`` and ``ok`` hold every workload request in the order k6 wrote them (a failed
    request's latency is kept but never judged). ``ttft_s``/``tpot_s`` hold one value per
    successful streamed request, in the order written; empty when the run was not streamed.
    """

    latency_s: array[float]
    ok: bytearray
    ttft_s: array[float]
    tpot_s: array[float]

    def __len__(self) -> int:
        return len(self.ok)


@dataclass
class _Buckets:
    """What :class:`SampleStream` accumulates, plain dicts keyed by bucket index."""

    latencies_ms: dict[int, list[float]] = field(default_factory=dict)
    closed: dict[int, _ClosedSecond] = field(default_factory=dict)
    failures: dict[int, int] = field(default_factory=dict)
    output_tokens: dict[int, float] = field(default_factory=dict)
    vus: dict[int, float] = field(default_factory=dict)
    seen: set[int] = field(default_factory=set)
    # Every success's latency (ms, float64: the run-wide percentiles exactly as k6's).
    success_latencies_ms: array[float] = field(default_factory=lambda: array("d"))
    # Streamed runs: every TTFT and TPOT point (ms) with its cache outcome (one byte).
    ttft_ms: array[float] = field(default_factory=lambda: array("d"))
    ttft_cache: bytearray = field(default_factory=bytearray)
    tpot_ms: array[float] = field(default_factory=lambda: array("d"))
    tpot_cache: bytearray = field(default_factory=bytearray)
    unstreamed: int = 0
    # Memo of k6's whole-second timestamps -> Unix seconds (many samples share one second).
    epoch_bases: dict[tuple[bytes, bytes], int] = field(default_factory=dict)


def _bucket_index(buckets: _Buckets, whole: bytes, fraction: bytes | None, zone: bytes, bucket_s: float) -> int:
    base = buckets.epoch_bases.get((whole, zone))
    if base is None:
        base = buckets.epoch_bases[(whole, zone)] = _epoch_base_s(whole, zone)
    if bucket_s == 1.0:
        return base
    return math.floor((base + (float(fraction) if fraction else 0.0)) / bucket_s)


def _add_stream_trend(buckets: _Buckets, metric: bytes, value: float, tags: bytes) -> None:
    """A client-side TTFT/TPOT point (or an unstreamed answer) of a workload request."""
    if metric == b"lab_unstreamed_answers":
        buckets.unstreamed += int(value)
        return
    cache = _CACHE_HIT if b'"cache":"HIT"' in tags else _CACHE_MISS if b'"cache":"MISS"' in tags else 0
    if metric == b"lab_ttft":
        buckets.ttft_ms.append(value)
        buckets.ttft_cache.append(cache)
    else:
        buckets.tpot_ms.append(value)
        buckets.tpot_cache.append(cache)


def _stream_trends_ms(buckets: _Buckets) -> dict[str, array[float]]:
    """TTFT and TPOT points by figure (``ttft``, ``ttft_hit``, ``tpot_miss``...), as k6's sub-metrics split them."""
    trends: dict[str, array[float]] = {}
    for name, values_ms, caches in (
        ("ttft", buckets.ttft_ms, buckets.ttft_cache),
        ("tpot", buckets.tpot_ms, buckets.tpot_cache),
    ):
        if not values_ms:
            continue
        trends[name] = values_ms
        for outcome, suffix in _CACHE_SUFFIXES.items():
            split = array("d", (value for value, cache in zip(values_ms, caches, strict=True) if cache == outcome))
            if split:
                trends[name + suffix] = split
    return trends


def _add_points(buckets: _Buckets, requests: RequestSamples, points: list[_Point], bucket_s: float) -> None:
    """Add one piece's points to the buckets and the per-request arrays.

    The loop runs once per sample: the accumulators are bound to locals once per piece.
    """
    latencies_ms, failures, output_tokens = buckets.latencies_ms, buckets.failures, buckets.output_tokens
    successes_ms, request_latency_s, request_ok = buckets.success_latencies_ms, requests.latency_s, requests.ok
    chat_tag, success_tag = _CHAT_TAG_BYTES, _SUCCESS_TAG_BYTES
    for metric, whole, fraction, zone, value, tags in points:
        index = _bucket_index(buckets, whole, fraction, zone, bucket_s)
        if metric == b"vus":
            buckets.vus[index] = float(value)
            buckets.seen.add(index)
            continue
        if chat_tag not in tags:
            continue  # the health check in setup(), or a foreign request
        if metric == b"http_req_duration":
            latency_ms = float(value)
            request_latency_s.append(latency_ms / 1000.0)
            if success_tag in tags:
                request_ok.append(1)
                successes_ms.append(latency_ms)
                bucket = latencies_ms.get(index)
                if bucket is None:
                    bucket = latencies_ms[index] = []
                bucket.append(latency_ms)
            else:
                request_ok.append(0)
                failures[index] = failures.get(index, 0) + 1
        elif metric == b"lab_output_tokens":
            output_tokens[index] = output_tokens.get(index, 0.0) + float(value)
        else:
            _add_stream_trend(buckets, metric, float(value), tags)


def _close_second(buckets: _Buckets, index: int) -> None:
    """Summarise one bucket's raw latencies (merged with what an earlier close of it kept)."""
    latencies = buckets.latencies_ms.pop(index)
    latencies.sort()
    closed = _ClosedSecond(
        len(latencies), math.fsum(latencies), percentile(latencies, 0.50), percentile(latencies, 0.95)
    )
    earlier = buckets.closed.get(index)
    if earlier is not None:  # late samples of a closed second: counts and sums stay exact
        closed = _ClosedSecond(
            earlier.count + closed.count, earlier.sum_ms + closed.sum_ms, earlier.p50_ms, earlier.p95_ms
        )
    buckets.closed[index] = closed


def _close_old_seconds(buckets: _Buckets, bucket_s: float) -> None:
    """Summarise the raw latencies of buckets no sample has reached for the late-sample window."""
    open_indexes = buckets.latencies_ms
    if len(open_indexes) < 2:
        return
    cutoff = max(open_indexes) - LATE_SAMPLE_WINDOW_S / bucket_s
    for index in [index for index in open_indexes if index < cutoff]:
        _close_second(buckets, index)


class SampleStream:
    """k6's NDJSON fed in pieces of any size; figures, series and per-request arrays in one pass.

    ``feed`` takes bytes as they arrive (a piece may end inside a line), ``finish`` the
    run's :class:`PerSecondSeries` and :class:`RequestSamples`. Not thread-safe: the
    caller serialises ``feed`` with any reader (see ``k6_driver.K6Process``).
    """

    def __init__(self, *, bucket_s: float = 1.0) -> None:
        if bucket_s <= 0:
            raise ValueError("bucket_s must be positive")
        self.bucket_s = bucket_s
        self.samples_read = 0
        self.bytes_read = 0
        self._remainder = b""
        self._fast_path: bool | None = None
        self._buckets = _Buckets()
        self.requests = RequestSamples(array("f"), bytearray(), array("f"), array("f"))
        # How many failed requests got each error answer (k6/lib.js tags them with ``lab_error``).
        self.error_answers: Counter[str] = Counter()

    @property
    def requests_ok_total(self) -> int:
        return len(self._buckets.success_latencies_ms)

    @property
    def requests_failed_total(self) -> int:
        return len(self.requests.ok) - len(self._buckets.success_latencies_ms)

    def feed(self, data: bytes) -> int:
        """Add the bytes k6 wrote next; returns how many samples of the lab's metrics were new."""
        self.bytes_read += len(data)
        block = self._remainder + data if self._remainder else data
        cut = block.rfind(b"\n")
        if cut < 0:
            self._remainder = block
            return 0
        self._remainder = block[cut + 1 :]
        return self._feed_lines(block[: cut + 1])

    def _feed_lines(self, chunk: bytes) -> int:
        if self._fast_path is None and b'"Point"' in chunk:
            self._fast_path = _fast_path_fits(chunk)
        points = _POINT_RE.findall(chunk) if self._fast_path else _json_points(chunk)
        self.samples_read += len(points)
        count_error_answers(chunk, self.error_answers)
        _add_points(self._buckets, self.requests, points, self.bucket_s)
        _close_old_seconds(self._buckets, self.bucket_s)
        return len(points)

    def second_figures(self, index: int) -> tuple[int, int, float, float | None, float | None]:
        """(successes, failures, output tokens, avg ms, p95 ms) of one bucket (for the live view)."""
        buckets = self._buckets
        failed = buckets.failures.get(index, 0)
        tokens = buckets.output_tokens.get(index, 0.0)
        closed = buckets.closed.get(index)
        if closed is not None:
            return closed.count, failed, tokens, closed.sum_ms / closed.count, closed.p95_ms
        latencies = sorted(buckets.latencies_ms.get(index, ()))
        if not latencies:
            return 0, failed, tokens, None, None
        return len(latencies), failed, tokens, math.fsum(latencies) / len(latencies), percentile(latencies, 0.95)

    def finish(self) -> tuple[PerSecondSeries, RequestSamples]:
        """The run's series and per-request figures (a last line without its newline included)."""
        if self._remainder:
            remainder, self._remainder = self._remainder, b""
            self._feed_lines(remainder)
        buckets = self._buckets
        for index in list(buckets.latencies_ms):
            _close_second(buckets, index)
        buckets.seen.update(buckets.closed, buckets.failures, buckets.output_tokens)
        series = _series_from_buckets(buckets, bucket_s=self.bucket_s, samples_read=self.samples_read)
        # float32 seconds for the store, made once (kept in ms, exact, while the run went on)
        self.requests.ttft_s = array("f", (value / 1000.0 for value in buckets.ttft_ms))
        self.requests.tpot_s = array("f", (value / 1000.0 for value in buckets.tpot_ms))
        return series, self.requests


def _latency_stats(values_ms: array[float]) -> LatencyStats:
    """k6's figures over ``values_ms`` (sorted in a numpy copy: 8 bytes a value, not a list of floats)."""
    import numpy  # only here: the lab's other modules need not load it

    if not values_ms:
        return LatencyStats.from_ms([])
    ordered = numpy.sort(numpy.frombuffer(values_ms, dtype=numpy.float64))

    def seconds(fraction: float) -> float:
        return float(percentile(ordered, fraction)) / 1000.0  # type: ignore[arg-type]  # a sorted numpy array, indexed as the Sequence percentile takes

    return LatencyStats(
        count=len(ordered),
        avg_s=float(ordered.sum()) / len(ordered) / 1000.0,
        min_s=float(ordered[0]) / 1000.0,
        p50_s=seconds(0.50),
        p90_s=seconds(0.90),
        p95_s=seconds(0.95),
        p99_s=seconds(0.99),
        max_s=float(ordered[-1]) / 1000.0,
    )


def _series_from_buckets(buckets: _Buckets, *, bucket_s: float, samples_read: int) -> PerSecondSeries:
    """Turn the closed buckets into aligned lists (empty buckets in between filled with zeros)."""
    seen = buckets.seen
    first = min(seen) if seen else 0
    indexes = range(first, max(seen) + 1) if seen else range(0)
    closed = [buckets.closed.get(index) for index in indexes]
    requests_failed = [buckets.failures.get(index, 0) for index in indexes]
    output_tokens = [int(buckets.output_tokens.get(index, 0)) for index in indexes]
    return PerSecondSeries(
        bucket_s=bucket_s,
        start_epoch_s=first * bucket_s if seen else None,
        latency=_latency_stats(buckets.success_latencies_ms),
        requests_ok_total=len(buckets.success_latencies_ms),
        requests_failed_total=sum(requests_failed),
        output_tokens_total=sum(output_tokens),
        samples_read=samples_read,
        stream_trends_ms=_stream_trends_ms(buckets),
        unstreamed_answers=buckets.unstreamed,
        time_s=[round((index - first) * bucket_s, 9) for index in indexes],
        requests_ok=[bucket.count if bucket else 0 for bucket in closed],
        requests_failed=requests_failed,
        output_tokens=output_tokens,
        latency_avg_s=[bucket.sum_ms / bucket.count / 1000.0 if bucket else None for bucket in closed],
        latency_p50_s=[bucket.p50_ms / 1000.0 if bucket and bucket.p50_ms is not None else None for bucket in closed],
        latency_p95_s=[bucket.p95_ms / 1000.0 if bucket and bucket.p95_ms is not None else None for bucket in closed],
        vus=[int(buckets.vus[index]) if index in buckets.vus else None for index in indexes],
    )


# k6/lib.js tags each failed workload request's ``lab_request_failures`` sample with the
# answer it got (``lab_error``: the HTTP status and the error's message, or "no answer: ...").
_ERROR_MARKER = b'"metric":"lab_request_failures"'


def count_error_answers(chunk: bytes, counts: Counter[str]) -> None:
    """Add the error answers of the failed workload requests in ``chunk`` (whole lines) to ``counts``."""
    if _ERROR_MARKER not in chunk:
        return
    for line in chunk.splitlines():
        if _ERROR_MARKER not in line or b'"lab_error"' not in line:
            continue
        try:
            data = json.loads(line)["data"]
            counts[str(data["tags"]["lab_error"])] += int(data.get("value") or 1)
        except (ValueError, KeyError, TypeError):
            continue  # a line cut short by a killed k6
