"""A trace replay's figures: lateness from k6's summary, the trace's record, the late-schedule warning."""

from __future__ import annotations

import json
from pathlib import Path

from lab.measurement.checks import measurement_warnings, recomputed_warnings
from lab.measurement.k6_results import K6Summary
from lab.measurement.results import RunResults, TraceFigures
from lab.measurement.trace_figures import lateness_figures, trace_part


def summary(late: int | None) -> K6Summary:
    metrics: dict = {"lab_trace_lateness": {"type": "trend", "values": {"med": 1.0, "p(99)": 7.5, "max": 80.0}}}
    if late is not None:
        metrics["lab_trace_late"] = {"type": "counter", "values": {"count": late, "rate": 0.1}}
    return {"metrics": metrics}


def test_lateness_comes_from_the_summary_and_no_late_counter_means_none_late() -> None:
    assert lateness_figures(summary(3)) == {
        "lateness_p50_ms": 1.0,
        "lateness_p99_ms": 7.5,
        "lateness_max_ms": 80.0,
        "requests_late_over_50ms": 3,
    }
    assert lateness_figures(summary(None))["requests_late_over_50ms"] == 0
    assert lateness_figures({"metrics": {}}) == {}


def test_the_trace_part_joins_the_record_and_the_summary(tmp_path: Path) -> None:
    assert trace_part(tmp_path, tmp_path / "summary.json") is None  # not a trace run
    record = {
        "name": "prod.jsonl",
        "sha256": "a" * 64,
        "response_cache_ceiling": 0.25,
        "prefix_reuse_ceiling": 0.5,
        "requests_clipped": 2,
        "requests_skipped": 0,
        "requests_cut": 10,
        "cut_at_s": 60.0,
    }
    (tmp_path / "trace.json").write_text(json.dumps(record))
    (tmp_path / "summary.json").write_text(json.dumps(summary(0)))
    part = trace_part(tmp_path, tmp_path / "summary.json")
    assert part == TraceFigures(
        trace_name="prod.jsonl",
        trace_sha256="a" * 64,
        lateness_p50_ms=1.0,
        lateness_p99_ms=7.5,
        lateness_max_ms=80.0,
        requests_late_over_50ms=0,
        trace_response_cache_ceiling=0.25,
        trace_prefix_reuse_ceiling=0.5,
        trace_requests_clipped=2,
        trace_requests_skipped=0,
        trace_requests_cut=10,
        trace_cut_at_s=60.0,
    )
    assert RunResults.from_parts(part).as_columns()["trace_name"] == "prod.jsonl"


def test_late_requests_are_warned_like_dropped_iterations_and_recomputed_from_stored_figures() -> None:
    (warning,) = measurement_warnings(requests_late=12, lateness_p99_ms=140.0)
    assert warning.startswith(
        "12 requests were sent more than 50 ms after their time in the trace (p99 lateness 140 ms)"
    )
    assert "raise load.max_vus" in warning
    assert measurement_warnings(requests_late=0, lateness_p99_ms=3.0) == []
    stored = warning + "; the cache proxy failed open"
    assert recomputed_warnings(
        stored, results=RunResults(requests_late_over_50ms=0), load_duration_s=None, count_check=None
    ) == ("the cache proxy failed open")
