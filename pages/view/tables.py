"""Tables and display text of the pages: the Runs table, status badges, live progress,
a run's headline figures, server metrics, the seed's table and ratios on Compare, uptime.

Numbers are written with :mod:`lab.report.formatting` (one way to write a figure); the figures
themselves come from the domain (:mod:`lab.analysis`), computed once for the pages and the report.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from db.figures import RunFigures, figure_by
from lab.analysis.compare import LAB_SOURCE
from lab.analysis.seed import GrowthRatio, Ratio, seed_table_rows
from lab.backends import SeedSetup, UnknownBackendError, get_backend, seed_setup_backend
from lab.measurement.results import RunResults
from lab.report.formatting import format_rate, format_seconds, format_share
from lab.report.seed_tables import our_cells, seed_cells
from pages.view.names import display_frame, display_name

# One status vocabulary for the live panel, the Runs table and the sidebar: a run's
# status, and while it loads its phase (load, then draining while in-flight requests finish).
STATUS_ICONS: dict[str, str] = {
    "queued": "⏳",
    "starting": "🚀",
    "warming": "🔥",
    "running": "▶️",
    "parsing": "🧮",
    "done": "✅",
    "failed": "❌",
    "cancelled": "⏹️",
    "interrupted": "⚠️",
}
STATUS_WORDS: dict[str, str] = {"warming": "warming up", "running": "load", "parsing": "collecting"}


def phase_text(status: str, progress: dict[str, Any] | None = None) -> str:
    """What a run is doing, in the words every view uses: queued, starting, warming up, load,
    draining (N requests in flight), collecting, done, failed..."""
    progress = progress or {}
    if status == "starting" and progress.get("phase") == "preparing":
        return "starting: preparing the requests"
    if status == "running" and progress.get("phase") == "draining":
        in_flight = progress.get("in_flight")
        if in_flight is None:
            return "draining"
        return f"draining ({in_flight} request{'' if in_flight == 1 else 's'} in flight)"
    return STATUS_WORDS.get(status, status)


def status_badge(status: str, progress: dict[str, Any] | None = None) -> str:
    """The badge text of a run status (its phase while it runs)."""
    icon = STATUS_ICONS.get(status)
    text = phase_text(status, progress)
    return f"{icon} {text}" if icon else text


def plural(count: int, noun: str) -> str:
    """``"1 run"``, ``"2 runs"``."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


# Columns of the Runs table, in order (machine names; headers come from pages.view.names).
# The figures a person looks for come right after the run's identity, so they are on screen at 800 px.
RUNS_TABLE_COLUMNS: tuple[str, ...] = (
    "run_id",
    "status",
    "backend",
    "cell_label",
    "req_per_s",
    "output_tok_per_s",
    "latency_p95_s",
    "latency_avg_s",
    "requests_failed",
    "vus",
    "duration_s",
    "experiment",
    "repeat_index",
    "model",
    "workload",
    "worker_name",
    "measurement_warnings",
    "tags",
    "launched_by",
    "created_at",
)

SORTABLE_COLUMNS: dict[str, str] = {
    "newest first": "run_id",
    "output tok/s": "output_tok_per_s",
    "req/s": "req_per_s",
    "p95 latency": "latency_p95_s",
    "avg latency": "latency_avg_s",
    "VUs": "vus",
    "backend": "backend",
    "status": "status",
}


def model_short_name(model: str | None) -> str:
    """The last path part of a model folder or the HF id as given."""
    if not model:
        return ""
    return Path(model).name if "/" in model and Path(model).is_absolute() else model


def runs_table(
    records: Sequence[Mapping[str, Any]],
    *,
    sort_by: str = "run_id",
    descending: bool = True,
    progress_by_run: dict[int, dict[str, Any] | None] | None = None,
) -> pd.DataFrame:
    """The Runs page table from run records (``lab.analysis.compare.RunRecord``), sorted, for display:
    human headers, rounded figures, "–" for missing, local times, a running run's phase.

    Missing figures sort last whichever the direction.
    """
    frame = pd.DataFrame(list(records))
    if frame.empty:
        return display_frame(pd.DataFrame(columns=list(RUNS_TABLE_COLUMNS)))
    if sort_by in frame.columns:
        frame = frame.sort_values(sort_by, ascending=not descending, na_position="last", kind="stable")
    progress_by_run = progress_by_run or {}
    sources = frame["source"] if "source" in frame else pd.Series([None] * len(frame), index=frame.index)
    frame["status"] = [
        # An imported run says so where a person reads its state first, with the tool it came from.
        f"📥 imported: {source}"
        if source not in (None, LAB_SOURCE) and status == "done"
        else status_badge(status, progress_by_run.get(run_id))
        for status, run_id, source in zip(frame["status"], frame["run_id"], sources, strict=True)
    ]
    frame["model"] = frame["model"].map(model_short_name)
    # Repeats are counted from 1 wherever a person reads them (stored from 0).
    frame["repeat_index"] = pd.to_numeric(frame["repeat_index"], errors="coerce") + 1
    return display_frame(frame[list(RUNS_TABLE_COLUMNS)])


def format_progress(progress: dict[str, Any] | None) -> dict[str, str]:
    """Live figures of a running run as display strings (elapsed, remaining, req/s, errors)."""
    progress = progress or {}
    elapsed_s = progress.get("elapsed_s")
    planned_s = progress.get("planned_s")
    remaining_s = max(0.0, planned_s - elapsed_s) if elapsed_s is not None and planned_s else None

    def seconds(value: float | None) -> str:
        return "–" if value is None else f"{value:.0f} s"

    # The live progress keeps k6's running counts under the names of the figures they become.
    req_per_s = progress.get(figure_by(lambda f: f.req_per_s).name)
    return {
        "elapsed": seconds(elapsed_s),
        "remaining": seconds(remaining_s),
        "req/s": format_rate(req_per_s),
        "requests": str(progress.get("requests_completed") or 0),
        "errors": str(progress.get(figure_by(lambda f: f.requests_failed).name) or 0),
        "VUs": "–" if progress.get("vus") is None else str(progress.get("vus")),
    }


def progress_fraction(progress: dict[str, Any] | None) -> float:
    """The fraction of the planned load time done, clamped to [0, 1]."""
    value = (progress or {}).get("fraction")
    if not isinstance(value, (int, float)) or math.isnan(value):
        return 0.0
    return min(1.0, max(0.0, float(value)))


# The lab's words for the samples it reads (lab.backends.MetricNames' fields).
LAB_METRIC_WORDS: dict[str, str] = {
    "ttft_sum": "time to first token, sum (s)",
    "ttft_count": "time to first token, count",
    "time_per_output_token_sum": "time per output token, sum (s)",
    "time_per_output_token_count": "time per output token, count",
    "inter_token_latency_sum": "inter-token latency, sum (s)",
    "inter_token_latency_count": "inter-token latency, count",
    "prefix_cache_hits": "prefix cache hits (tokens)",
    "prefix_cache_queries": "prefix cache queries (tokens)",
    "running_requests": "requests running",
    "waiting_requests": "requests waiting",
    "requests_ok": "requests finished ok",
    "e2e_requests": "requests timed end to end",
    "output_tokens": "output tokens",
    "prompt_tokens": "prompt tokens",
}


def lab_metric_names(backend: str) -> dict[str, str]:
    """``{sample name on the wire: the lab's words}`` for ``backend``'s samples: the naive server
    exports vLLM's names (one reader serves both), which would read as vLLM's figures on its page."""
    try:
        metrics = get_backend(backend).metrics
    except UnknownBackendError:
        return {}
    return {
        wire: LAB_METRIC_WORDS[field]
        for field, wire in metrics.__dict__.items()
        if field in LAB_METRIC_WORDS and isinstance(wire, str)
    }


def server_metrics_table(server_metrics: dict[str, Any] | None, backend: str = "") -> pd.DataFrame:
    """Server metrics before and after the load, and the change, one row per sample: under the
    lab's name where it reads the sample (its name on /metrics beside it)."""
    words = lab_metric_names(backend)
    server_metrics = server_metrics or {}
    before = server_metrics.get("before") or {}
    after = server_metrics.get("after") or {}
    rows = []
    for service in sorted(set(before) | set(after)):
        first = before.get(service) or {}
        last = after.get(service) or {}
        for name in sorted(set(first) | set(last)):
            start, end = first.get(name), last.get(name)
            rows.append(
                {
                    "service": service,
                    "metric": words.get(name, name),
                    "wire_name": name,
                    "before": start,
                    "after": end,
                    "change": end - start
                    if isinstance(start, (int, float)) and isinstance(end, (int, float))
                    else None,
                }
            )
    return display_frame(pd.DataFrame(rows, columns=["service", "metric", "before", "after", "change", "wire_name"]))


# A run's headline tiles: the figure (its tile label and tooltip come from its declaration) and
# how its value is written. A figure read by an attribute, never by a string.
Tile = tuple[Callable[[RunFigures], Any], Callable[[Any], str]]


def _with_unit(unit: str) -> Callable[[float | None], str]:
    def written(value: float | None) -> str:
        text = format_rate(value, 0)
        return text if value is None else f"{text}{unit}"

    return written


HEADLINE_TILES: tuple[Tile, ...] = (
    (lambda f: f.req_per_s, format_rate),
    (lambda f: f.output_tok_per_s, lambda v: format_rate(v, 1)),
    (lambda f: f.input_tok_per_s, lambda v: format_rate(v, 1)),
    (lambda f: f.latency_avg_s, format_seconds),
    (lambda f: f.latency_p50_s, format_seconds),
    (lambda f: f.latency_p95_s, format_seconds),
    (lambda f: f.latency_p99_s, format_seconds),
    (lambda f: f.latency_max_s, format_seconds),
    (lambda f: f.requests_ok, lambda v: format_rate(v, 0)),
    (lambda f: f.requests_failed, lambda v: format_rate(v, 0)),
    (lambda f: f.prefix_cache_hit_rate, format_share),
    (lambda f: f.response_cache_hit_rate, format_share),
    (lambda f: f.server_ttft_avg_s, format_seconds),
    (lambda f: f.backend_cpu_percent_avg, _with_unit("%")),
    (lambda f: f.backend_rss_max_mb, _with_unit(" MiB")),
    (lambda f: f.k6_cpu_percent_avg, _with_unit("%")),
    (lambda f: f.other_cpu_percent_avg, _with_unit("%")),
)
# The load window's tiles: their help says whose counters they come from.
STEADY_TILES: tuple[Tile, ...] = (
    (lambda f: f.steady_output_tok_per_s, lambda v: format_rate(v, 1)),
    (lambda f: f.steady_req_per_s, format_rate),
)
TileText = tuple[str, str, str | None]


def _tile(results: RunResults, select: Callable[[RunFigures], Any], written: Callable[[Any], str]) -> TileText:
    declared = figure_by(select)
    return declared.tile_label, written(select(results)), declared.description


def figures_summary(results: RunResults) -> list[TileText]:
    """``(label, value, help)`` of a run's headline figures for ``st.metric`` tiles: labels short
    enough for a narrow tile, the figure's description as the help, values with their unit."""
    tiles = [_tile(results, select, written) for select, written in HEADLINE_TILES]
    for select, written in STEADY_TILES:
        label, value, help_text = _tile(results, select, written)
        tiles.append((label, value, f"{help_text} (from {results.steady_source or 'n/a'})"))
    return tiles + _trace_tiles(results) + _semantic_tiles(results)


def _trace_tiles(results: RunResults) -> list[TileText]:
    """A trace replay's tiles: lateness against the trace's schedule and the ceilings the
    measured hit rates stand beside (none for a run that replayed no trace)."""
    if not results.trace_name:
        return []
    cut = results.trace_requests_cut
    clipped = figure_by(lambda f: f.trace_requests_clipped)
    return [
        (figure_by(lambda f: f.trace_name).tile_label, str(results.trace_name), f"sha256 {results.trace_sha256}"),
        _tile(results, lambda f: f.lateness_p99_ms, with_ms),
        _tile(results, lambda f: f.lateness_max_ms, with_ms),
        _tile(results, lambda f: f.requests_late_over_50ms, lambda v: format_rate(v, 0)),
        _tile(results, lambda f: f.trace_response_cache_ceiling, format_share),
        _tile(results, lambda f: f.trace_prefix_reuse_ceiling, format_share),
        *(
            [_tile(results, lambda f: f.trace_semantic_cache_ceiling, format_share)]
            if results.trace_semantic_cache_ceiling is not None
            else []
        ),
        (
            "clipped / skipped / cut",
            f"{results.trace_requests_clipped or 0} / {results.trace_requests_skipped or 0} / {cut or 0}",
            f"{clipped.description} Requests cut at {results.trace_cut_at_s} s."
            if cut
            else f"{clipped.description} The trace was not cut.",
        ),
    ]


def _semantic_tiles(results: RunResults) -> list[TileText]:
    """The semantic cache's tiles: each tier's hit rate, the false hits with their interval and the
    latency the tier added (none for a run without the semantic tier)."""
    if results.semantic_cache_hit_rate is None:
        return []
    low, high = results.semantic_cache_false_hit_rate_ci95_low, results.semantic_cache_false_hit_rate_ci95_high
    false_hits = figure_by(lambda f: f.semantic_cache_false_hit_rate)
    interval = "" if low is None or high is None else f" 95% interval {format_share(low)} to {format_share(high)}."
    return [
        _tile(results, lambda f: f.response_cache_exact_hit_rate, format_share),
        _tile(results, lambda f: f.semantic_cache_hit_rate, format_share),
        (
            false_hits.tile_label,
            format_share(results.semantic_cache_false_hit_rate),
            f"{false_hits.description} Of {results.semantic_cache_verified_hits or 0} verified.{interval}",
        ),
        _tile(results, lambda f: f.semantic_cache_added_hit_p50_ms, with_ms),
        _tile(results, lambda f: f.semantic_cache_added_miss_p50_ms, with_ms),
    ]


def with_ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.1f} ms"


def metric_tiles(tiles: Sequence[tuple[str, str, str | None]]) -> None:
    """Metric tiles in a row that wraps: each as wide as its label and value (a fixed width cut
    "240.1 ms" to "240.1..."), so it keeps its whole value at any page width."""
    import streamlit as st

    with st.container(horizontal=True, wrap=True, gap="small"):
        for label, value, help_text in tiles:
            st.metric(label, value, help=help_text, width="content", border=True)


# -- compare -----------------------------------------------------------------------------


def seed_comparison_table(preset: str, records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """The seed's table of ``preset`` with ours (mean [95% CI] over repeats) and the seed's
    published figures beside them (``seed ...`` columns)."""
    return pd.DataFrame(
        [
            {
                **our_cells(preset, row),
                **{f"seed {column}": text for column, text in seed_cells(preset, row.seed).items()},
            }
            for row in seed_table_rows(preset, records)
        ]
    )


# How a ratio's words name the seed's set-ups.
SETUP_WORDS: dict[SeedSetup, str] = {
    SeedSetup.NAIVE: "naive",
    SeedSetup.VLLM: "vLLM",
    SeedSetup.VLLM_CACHE: "vLLM + Redis",
}


def ratio_label(ratio: Ratio) -> str:
    """A seed ratio in words: "vLLM over naive output tok/s at 8 VUs", "vllm avg latency growth from 1 to 32 VUs"."""
    what = display_name(ratio.figure).label
    if isinstance(ratio, GrowthRatio):
        return f"{seed_setup_backend(ratio.setup)} {what} growth from {ratio.low_vus} to {ratio.high_vus} VUs"
    text = f"{SETUP_WORDS[ratio.numerator]} over {SETUP_WORDS[ratio.denominator]} {what}"
    if ratio.vus is not None:
        text += f" at {plural(ratio.vus, 'VU')}"
    if ratio.prompts is not None:
        text += f" at PROMPTS={ratio.prompts}"
    return text


def ratios_rows(ratios: Sequence[Ratio]) -> list[dict[str, Any]]:
    """Seed ratios as ``{"ratio", "value", "95% interval"}`` rows in words."""
    return [
        {"ratio": ratio_label(ratio), "value": ratio.value, "ratio_interval": interval_text(ratio.interval)}
        for ratio in ratios
    ]


def interval_text(interval: Any) -> str:
    """'[4.20x, 6.31x]' for a ratio's 95% interval; '–' without one (under two repeats a side)."""
    if interval is None or interval.ci95_low is None:
        return "–"
    return f"[{interval.ci95_low:,.2f}x, {interval.ci95_high:,.2f}x]"


def uptime_text(started_at: str | None, now: datetime | None = None) -> str:
    """``"1h 02m"`` since an ISO timestamp; ``"–"`` when not running."""
    if not started_at:
        return "–"
    try:
        started = datetime.fromisoformat(started_at)
    except ValueError:
        return "–"
    if started.tzinfo is None:
        started = started.replace(tzinfo=UTC)
    seconds = max(0, int(((now or datetime.now(UTC)) - started).total_seconds()))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {secs:02d}s"
