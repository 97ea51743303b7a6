"""A trace replay's figures: what the trace workload recorded when it prepared the run
(``trace.json`` in the run folder: the trace's identity, its ceilings, what was clipped,
skipped or cut) and the lateness k6 measured (``k6/trace_replay.js``: ``lab_trace_lateness``,
ms from each request's time in the trace to its send, and ``lab_trace_late``, requests sent
more than ``checks.LATE_WARNING_MS`` late).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypedDict

from lab.measurement.k6_results import K6Summary, load_summary, metric_statistics
from lab.measurement.results import TraceFigures

TRACE_RECORD = "trace.json"
LATENESS_METRIC = "lab_trace_lateness"
LATE_METRIC = "lab_trace_late"


class LatenessFigures(TypedDict, total=False):
    """The lateness k6 measured (ms) and the late count; none of them without the lateness trend."""

    lateness_p50_ms: float | None
    lateness_p99_ms: float | None
    lateness_max_ms: float | None
    requests_late_over_50ms: int


def lateness_figures(summary: K6Summary | None) -> LatenessFigures:
    """p50, p99 and max lateness (ms) and the late count from a k6 summary; empty without them."""
    metrics = summary["metrics"] if summary else {}
    values = metric_statistics(metrics, LATENESS_METRIC)
    if values is None:
        return {}
    late_values = metric_statistics(metrics, LATE_METRIC) or {}

    def figure(key: str) -> float | None:
        value = values.get(key)
        return None if value is None else float(value)

    return {
        "lateness_p50_ms": figure("med"),
        "lateness_p99_ms": figure("p(99)"),
        "lateness_max_ms": figure("max"),
        # No late request: k6 leaves the counter out of its summary.
        "requests_late_over_50ms": round(float(late_values.get("count") or 0)),
    }


def trace_part(run_dir: Path, summary_path: Path) -> TraceFigures | None:
    """The run's trace figures; None when the run replayed no trace (no ``trace.json``)."""
    record_path = run_dir / TRACE_RECORD
    if not record_path.is_file():
        return None
    record = json.loads(record_path.read_text(encoding="utf-8"))
    summary = load_summary(summary_path) if summary_path.is_file() else None
    return TraceFigures(
        trace_name=record.get("name"),
        trace_sha256=record.get("sha256"),
        trace_response_cache_ceiling=record.get("response_cache_ceiling"),
        trace_prefix_reuse_ceiling=record.get("prefix_reuse_ceiling"),
        trace_semantic_cache_ceiling=record.get("semantic_cache_ceiling"),
        trace_requests_clipped=record.get("requests_clipped"),
        trace_requests_skipped=record.get("requests_skipped"),
        trace_requests_cut=record.get("requests_cut"),
        trace_cut_at_s=record.get("cut_at_s"),
        **lateness_figures(summary),
    )
