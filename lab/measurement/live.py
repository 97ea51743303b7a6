"""The live per-second view of a run under load, written into its ``progress`` each second.

:class:`NdjsonTail` reads k6's NDJSON incrementally (a byte offset, only the bytes added
since the last call, whole lines only) with the same line parser as
:func:`lab.measurement.k6_ndjson.stream_series`, and keeps per-second buckets of workload requests
(tagged ``lab_request:chat``: k6's setup health check never counts). :func:`live_progress`
turns those buckets and the runner's resource and server-gauge samples into short,
aligned lists (seconds since the load started), a few hundred numbers, never one per request.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from lab.measurement.k6_ndjson import (
    _CHAT_TAG_BYTES,
    _POINT_RE,
    _SUCCESS_TAG_BYTES,
    _epoch_base_s,
    _fast_path_fits,
    _json_points,
)
from lab.measurement.k6_results import percentile

# The newest points kept in a run's progress (a 10-minute load at one point a second).
MAX_LIVE_POINTS = 600


class NdjsonTail:
    """Per-second buckets of a growing k6 NDJSON file, read from where the last call stopped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset_bytes = 0
        self._remainder = b""
        self._fast_path: bool | None = None
        self.latencies_ms: dict[int, list[float]] = {}
        self.failed: dict[int, int] = {}
        self.output_tokens: dict[int, float] = {}
        self.requests_ok_total = 0
        self.requests_failed_total = 0

    def read_new(self) -> int:
        """Read the bytes added since the last call; returns how many samples were new."""
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset_bytes)
                block = handle.read()
        except FileNotFoundError:
            return 0
        self.offset_bytes += len(block)
        block = self._remainder + block
        cut = block.rfind(b"\n")
        if cut < 0:
            self._remainder = block
            return 0
        chunk, self._remainder = block[: cut + 1], block[cut + 1:]
        if self._fast_path is None and b'"Point"' in chunk:
            self._fast_path = _fast_path_fits(chunk)
        points = _POINT_RE.findall(chunk) if self._fast_path else _json_points(chunk)
        for metric, whole, _fraction, zone, value, tags in points:
            if metric == b"vus" or _CHAT_TAG_BYTES not in tags:
                continue  # VUs come from k6's API; untagged requests are the setup health check
            second = _epoch_base_s(whole, zone)
            if metric == b"http_req_duration":
                if _SUCCESS_TAG_BYTES in tags:
                    self.latencies_ms.setdefault(second, []).append(float(value))
                    self.requests_ok_total += 1
                else:
                    self.failed[second] = self.failed.get(second, 0) + 1
                    self.requests_failed_total += 1
            else:  # lab_output_tokens
                self.output_tokens[second] = self.output_tokens.get(second, 0.0) + float(value)
        return len(points)

    def series(self, *, origin_epoch_s: float, until_epoch_s: float) -> dict[str, list[Any]]:
        """Complete seconds from ``origin_epoch_s`` up to (not including) ``until_epoch_s``'s second."""
        first = math.floor(origin_epoch_s)
        last = math.floor(until_epoch_s) - 1  # the current second is still filling
        seconds = range(max(first, last - MAX_LIVE_POINTS + 1), last + 1)
        out: dict[str, list[Any]] = {"time_s": [], "output_tok_per_s": [], "req_per_s": [],
                                     "latency_avg_s": [], "latency_p95_s": [], "requests_failed": []}
        for second in seconds:
            latencies = sorted(self.latencies_ms.get(second, []))
            out["time_s"].append(second - first)
            out["output_tok_per_s"].append(int(self.output_tokens.get(second, 0)))
            out["req_per_s"].append(len(latencies))
            out["requests_failed"].append(self.failed.get(second, 0))
            out["latency_avg_s"].append(round(sum(latencies) / len(latencies) / 1000, 4) if latencies else None)
            p95 = percentile(latencies, 0.95) if latencies else None
            out["latency_p95_s"].append(round(p95 / 1000, 4) if p95 is not None else None)
        return out


def samples_series(samples: list[dict[str, Any]], *, origin_epoch_s: float, keys: tuple[str, ...] | None = None,
                   suffixes: tuple[str, ...] = (), exclude: tuple[str, ...] = ()) -> dict[str, list[Any]]:
    """Samples taken once a second (``{"t": epoch, name: value}``) as aligned lists on the load's clock.

    Keeps ``keys`` and every key ending with one of ``suffixes``; the newest points only.
    """
    recent = [sample for sample in samples[-MAX_LIVE_POINTS:] if sample.get("t", 0) >= origin_epoch_s]
    names = sorted({key for sample in recent for key in sample
                    if key != "t" and key not in exclude and ((keys and key in keys) or key.endswith(suffixes))})
    if not recent or not names:
        return {}
    out: dict[str, list[Any]] = {"time_s": [round(sample["t"] - origin_epoch_s, 1) for sample in recent]}
    for name in names:
        out[name] = [None if sample.get(name) is None else round(float(sample[name]), 2) for sample in recent]
    return out


def live_progress(tail: NdjsonTail, *, origin_epoch_s: float, resource_samples: list[dict[str, Any]],
                  server_samples: list[dict[str, Any]], now_epoch_s: float | None = None) -> dict[str, Any]:
    """The ``live`` part of a run's progress: k6's per-second figures, CPU (backend, k6, the
    host's other work) and the backend's running and waiting requests."""
    now = time.time() if now_epoch_s is None else now_epoch_s
    return {
        "k6": tail.series(origin_epoch_s=origin_epoch_s, until_epoch_s=now),
        "cpu": samples_series(resource_samples, origin_epoch_s=origin_epoch_s, keys=("other_cpu_percent",),
                              suffixes=("_cpu_percent",), exclude=("host_cpu_percent", "steal_cpu_percent")),
        "server": samples_series(server_samples, origin_epoch_s=origin_epoch_s,
                                 keys=("running_requests", "waiting_requests")),
    }
