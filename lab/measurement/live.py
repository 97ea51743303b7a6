"""The live per-second view of a run under load, written into its ``progress`` each second.

:class:`StreamTail` reads the :class:`lab.measurement.k6_ndjson.SampleStream` that k6's
sample pipe feeds (workload requests only, tagged ``lab_request:chat``: k6's setup health
check never counts); :class:`NdjsonTail` feeds one from a growing NDJSON file instead.
:func:`live_progress` turns their per-second buckets and the runner's resource and
server-gauge samples into short, aligned lists (seconds since the load started), a few
hundred numbers, never one per request. The live view only reads under the stream's
lock: a reader that falls behind makes the charts lag, it never loses a sample.
"""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path
from typing import Any

from lab.measurement.k6_ndjson import SampleStream, SeriesColumn

# The newest points kept in a run's progress (a 10-minute load at one point a second).
MAX_LIVE_POINTS = 600


class StreamTail:
    """The live view of a :class:`SampleStream` that another thread feeds."""

    def __init__(self, stream: SampleStream, lock: threading.Lock) -> None:
        self.stream = stream
        self.lock = lock

    def read_new(self) -> int:
        """Nothing to read here: the stream's feeder reads; kept so every tail is read alike."""
        return 0

    @property
    def requests_ok_total(self) -> int:
        with self.lock:
            return self.stream.requests_ok_total

    @property
    def requests_failed_total(self) -> int:
        with self.lock:
            return self.stream.requests_failed_total

    def series(self, *, origin_epoch_s: float, until_epoch_s: float) -> dict[str, list[Any]]:
        """Complete seconds from ``origin_epoch_s`` up to (not including) ``until_epoch_s``'s second:
        counts per one-second bucket (``output_tokens``, ``requests_ok``, ``requests_failed``), keyed
        like the stored series, so one function turns both into rates (``pages.view.figures.series_frame``);
        the run's figures (``output_tok_per_s``...) are never computed here."""
        first = math.floor(origin_epoch_s)
        last = math.floor(until_epoch_s) - 1  # the current second is still filling
        seconds = range(max(first, last - MAX_LIVE_POINTS + 1), last + 1)
        with self.lock:
            figures = [self.stream.second_figures(second) for second in seconds]
        columns: dict[SeriesColumn, list[Any]] = {
            SeriesColumn.TIME_S: [second - first for second in seconds[: len(figures)]],
            SeriesColumn.OUTPUT_TOKENS: [int(tokens) for _, _, tokens, _, _ in figures],
            SeriesColumn.REQUESTS_OK: [ok for ok, _, _, _, _ in figures],
            SeriesColumn.LATENCY_AVG_S: [
                round(avg_ms / 1000, 4) if avg_ms is not None else None for *_, avg_ms, _ in figures
            ],
            SeriesColumn.LATENCY_P95_S: [
                round(p95_ms / 1000, 4) if p95_ms is not None else None for *_, p95_ms in figures
            ],
            SeriesColumn.REQUESTS_FAILED: [failed for _, failed, _, _, _ in figures],
        }
        return {column.value: values for column, values in columns.items()}


class NdjsonTail(StreamTail):
    """The live view of a growing k6 NDJSON file, read from where the last call stopped."""

    def __init__(self, path: Path) -> None:
        super().__init__(SampleStream(), threading.Lock())
        self.path = path
        self.offset_bytes = 0

    def read_new(self) -> int:
        """Read the bytes added since the last call; returns how many samples were new."""
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset_bytes)
                block = handle.read()
        except FileNotFoundError:
            return 0
        self.offset_bytes += len(block)
        with self.lock:
            return self.stream.feed(block)


def samples_series(
    samples: list[dict[str, Any]],
    *,
    origin_epoch_s: float,
    keys: tuple[str, ...] | None = None,
    suffixes: tuple[str, ...] = (),
    exclude: tuple[str, ...] = (),
) -> dict[str, list[Any]]:
    """Samples taken once a second (``{"t": epoch, name: value}``) as aligned lists on the load's clock.

    Keeps ``keys`` and every key ending with one of ``suffixes``; the newest points only.
    """
    recent = [sample for sample in samples[-MAX_LIVE_POINTS:] if sample.get("t", 0) >= origin_epoch_s]
    names = sorted(
        {
            key
            for sample in recent
            for key in sample
            if key != "t" and key not in exclude and ((keys and key in keys) or key.endswith(suffixes))
        }
    )
    if not recent or not names:
        return {}
    out: dict[str, list[Any]] = {"time_s": [round(sample["t"] - origin_epoch_s, 1) for sample in recent]}
    for name in names:
        out[name] = [None if sample.get(name) is None else round(float(sample[name]), 2) for sample in recent]
    return out


def live_progress(
    tail: StreamTail,
    *,
    origin_epoch_s: float,
    resource_samples: list[dict[str, Any]],
    server_samples: list[dict[str, Any]],
    now_epoch_s: float | None = None,
) -> dict[str, Any]:
    """The ``live`` part of a run's progress: k6's per-second figures, CPU (backend, k6, the
    host's other work) and the backend's running and waiting requests."""
    now = time.time() if now_epoch_s is None else now_epoch_s
    return {
        "k6": tail.series(origin_epoch_s=origin_epoch_s, until_epoch_s=now),
        "cpu": samples_series(
            resource_samples,
            origin_epoch_s=origin_epoch_s,
            keys=("other_cpu_percent",),
            suffixes=("_cpu_percent",),
            exclude=("host_cpu_percent", "steal_cpu_percent"),
        ),
        "server": samples_series(
            server_samples, origin_epoch_s=origin_epoch_s, keys=("running_requests", "waiting_requests")
        ),
    }
