"""Plotly figures of the pages: a run's per-second charts and the Compare charts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from pages.view.names import header

SERIES_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")

def series_frame(series: dict[str, Any] | None) -> pd.DataFrame:
    """k6's per-second lists as a frame indexed by second, plus output tokens/s and req/s."""
    series = series or {}
    time_s = series.get("time_s") or []
    columns = {
        key: value for key, value in series.items()
        if isinstance(value, list) and len(value) == len(time_s) and key != "time_s"
    }
    frame = pd.DataFrame({"time_s": time_s, **columns})
    if frame.empty:
        return frame
    bucket_s = float(series.get("bucket_s") or 1.0)
    if "output_tokens" in frame:
        frame["output_tok_per_s"] = pd.to_numeric(frame["output_tokens"], errors="coerce") / bucket_s
    if "requests_ok" in frame:
        frame["req_per_s"] = pd.to_numeric(frame["requests_ok"], errors="coerce") / bucket_s
    return frame


def resources_frame(series: dict[str, Any] | None, key: str = "resources") -> pd.DataFrame:
    """Samples taken by the runner on the k6 series' clock (seconds from its start):
    ``resources`` (CPU %, RSS MiB, GPU) or ``server`` (the backend's running and waiting requests)."""
    resources = (series or {}).get(key) or {}
    times = resources.get("t") or []
    if not times:
        return pd.DataFrame()
    origin = (series or {}).get("start_epoch_s") or times[0]
    data = {"time_s": [t - origin for t in times]}
    for key, values in resources.items():
        if key != "t" and isinstance(values, list) and len(values) == len(times):
            data[key] = values
    return pd.DataFrame(data)


def line_figure(frame: pd.DataFrame, columns: Sequence[str], *, title: str, y_title: str) -> go.Figure:
    """Lines of ``columns`` against ``time_s``."""
    figure = go.Figure()
    for index, column in enumerate(columns):
        if column in frame:
            figure.add_trace(go.Scatter(
                # Markers too when there are few points: a single point draws no line.
                x=frame["time_s"], y=frame[column], mode="lines+markers" if len(frame) < 30 else "lines",
                name=header(column),
                line={"color": SERIES_PALETTE[index % len(SERIES_PALETTE)]},
                connectgaps=False,
            ))
    figure.update_layout(title=title, xaxis_title=header("time_s"), yaxis_title=y_title, height=320,
                         margin={"l": 40, "r": 10, "t": 40, "b": 40}, legend={"orientation": "h"})
    return figure


def run_detail_figures(series: dict[str, Any] | None) -> list[go.Figure]:
    """The per-second charts of one run: throughput, latency, VUs, CPU, RSS, GPU and the backend's
    running/waiting requests (those with data)."""
    frame = series_frame(series)
    figures: list[go.Figure] = []
    if not frame.empty:
        if has_data(frame, ["output_tok_per_s", "req_per_s"]):
            figures.append(line_figure(frame, ["output_tok_per_s", "req_per_s"], title="Throughput",
                                       y_title="per second"))
        if has_data(frame, ["latency_avg_s", "latency_p50_s", "latency_p95_s"]):
            figures.append(line_figure(frame, ["latency_avg_s", "latency_p50_s", "latency_p95_s"],
                                       title="Latency of requests finished each second", y_title="seconds"))
        if has_data(frame, ["vus"]):
            figures.append(line_figure(frame, ["vus"], title="Running virtual users (requests in flight)",
                                       y_title="VUs"))
        if "requests_failed" in frame and pd.to_numeric(frame["requests_failed"], errors="coerce").fillna(0).sum():
            figures.append(line_figure(frame, ["requests_failed"], title="Failed requests", y_title="per second"))
    resources = resources_frame(series)
    if not resources.empty:
        cpu = [c for c in resources.columns if c.endswith("_cpu_percent") and not c.startswith("gpu")
               and c not in ("host_cpu_percent", "steal_cpu_percent") and has_data(resources, [c])]
        rss = [c for c in resources.columns if c.endswith("_rss_mb")]
        gpu = [c for c in resources.columns if c.startswith("gpu_")]
        if cpu:
            figures.append(line_figure(resources, cpu, title="CPU", y_title="% of one core"))
        if rss:
            figures.append(line_figure(resources, rss, title="Resident memory", y_title="MiB"))
        gpu_utilization = [c for c in gpu if c.endswith("_percent")]
        gpu_memory = [c for c in gpu if c.endswith("_mb")]
        if gpu_utilization:
            figures.append(line_figure(resources, gpu_utilization, title="GPU utilisation", y_title="%"))
        if gpu_memory:
            figures.append(line_figure(resources, gpu_memory, title="GPU memory used", y_title="MiB"))
    server = resources_frame(series, "server")
    if has_data(server, ["running_requests", "waiting_requests"]):
        figures.append(line_figure(server, [c for c in ("running_requests", "waiting_requests") if c in server],
                                   title="Requests running and waiting in the backend", y_title="requests"))
    return figures


def has_data(frame: pd.DataFrame, columns: Sequence[str]) -> bool:
    """True when any of ``columns`` holds a number (a chart of nothing is left out)."""
    return any(column in frame and pd.to_numeric(frame[column], errors="coerce").notna().any() for column in columns)


LIVE_CHARTS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    # (title, part of progress["live"], columns, y axis)
    ("Output tokens per second", "k6", ("output_tok_per_s",), "tokens/s"),
    ("Requests finished per second", "k6", ("req_per_s", "requests_failed"), "requests/s"),
    ("Latency of requests finished each second", "k6", ("latency_avg_s", "latency_p95_s"), "seconds"),
    ("Requests running and waiting in the backend", "server", ("running_requests", "waiting_requests"), "requests"),
)


def live_figures(live: dict[str, Any] | None) -> list[go.Figure]:
    """The live charts of a run under load (``progress["live"]`` written by the runner), those
    with data: throughput, requests, latency, the backend's queue, CPU of each process and the
    host's other work."""
    live = live or {}
    figures: list[go.Figure] = []
    for title, part, columns, y_title in LIVE_CHARTS:
        frame = pd.DataFrame(live.get(part) or {})
        present = [column for column in columns if has_data(frame, [column])]
        if column_sum := [c for c in present if c == "requests_failed"]:
            if not pd.to_numeric(frame[column_sum[0]], errors="coerce").fillna(0).sum():
                present.remove("requests_failed")  # no failures: no line for them
        if present:
            figures.append(line_figure(frame, present, title=title, y_title=y_title))
    cpu = pd.DataFrame(live.get("cpu") or {})
    cpu_columns = [c for c in cpu.columns if c != "time_s" and has_data(cpu, [c])]
    if cpu_columns:
        figures.append(line_figure(cpu, cpu_columns, title="CPU", y_title="% of one core"))
    return figures


def _done_frame(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame([r for r in records if r.get("status") == "done"])
    return frame


def throughput_vs_vus_figure(records: Sequence[dict[str, Any]]) -> go.Figure:
    """Mean output tokens/s against VUs, one line per backend."""
    figure = go.Figure()
    frame = _done_frame(records)
    if not frame.empty and "vus" in frame:
        grouped = frame.dropna(subset=["vus"]).groupby(["backend", "vus"], as_index=False)["output_tok_per_s"].mean()
        for backend, part in grouped.groupby("backend"):
            figure.add_trace(go.Scatter(x=part["vus"], y=part["output_tok_per_s"], mode="lines+markers", name=backend))
    figure.update_layout(title="Throughput against VUs", xaxis_title="VUs", yaxis_title="output tokens/s",
                         height=360, margin={"l": 40, "r": 10, "t": 40, "b": 40})
    return figure


def latency_vs_vus_figure(records: Sequence[dict[str, Any]]) -> go.Figure:
    """Mean p50/p95/p99 latency against VUs, per backend (dash style per percentile)."""
    figure = go.Figure()
    frame = _done_frame(records)
    dashes = {"latency_p50_s": "solid", "latency_p95_s": "dash", "latency_p99_s": "dot"}
    if not frame.empty and "vus" in frame:
        present = [c for c in dashes if c in frame]
        grouped = frame.dropna(subset=["vus"]).groupby(["backend", "vus"], as_index=False)[present].mean()
        for index, (backend, part) in enumerate(grouped.groupby("backend")):
            color = SERIES_PALETTE[index % len(SERIES_PALETTE)]
            for column in present:
                figure.add_trace(go.Scatter(
                    x=part["vus"], y=part[column], mode="lines+markers",
                    name=f"{backend} {column.removeprefix('latency_').removesuffix('_s')}",
                    line={"color": color, "dash": dashes[column]},
                ))
    figure.update_layout(title="Latency percentiles against VUs", xaxis_title="VUs", yaxis_title="seconds",
                         height=360, margin={"l": 40, "r": 10, "t": 40, "b": 40})
    return figure


def overlaid_series_figure(series_by_label: dict[str, dict[str, Any]], column: str, *, title: str) -> go.Figure:
    """One per-second column (e.g. ``output_tok_per_s``) of several runs on one time axis."""
    figure = go.Figure()
    for label, series in series_by_label.items():
        frame = series_frame(series)
        if column in frame:
            figure.add_trace(go.Scatter(x=frame["time_s"], y=frame[column], mode="lines", name=label))
    figure.update_layout(title=title, xaxis_title=header("time_s"), yaxis_title=header(column), height=360,
                         margin={"l": 40, "r": 10, "t": 40, "b": 40})
    return figure


def hit_rates_figure(records: Sequence[dict[str, Any]]) -> go.Figure | None:
    """Mean prefix (vLLM KV) and response (Redis) cache hit rates per backend; None when no
    run involved a cache (no chart of nothing)."""
    figure = go.Figure()
    frame = _done_frame(records)
    columns = {"prefix_cache_hit_rate": "vLLM prefix cache", "response_cache_hit_rate": "Redis response cache"}
    if not frame.empty:
        for column, name in columns.items():
            if column in frame:
                grouped = frame.groupby("backend")[column].mean().dropna()
                if not grouped.empty:
                    figure.add_trace(go.Bar(x=list(grouped.index), y=[v * 100 for v in grouped.values], name=name))
    if not figure.data:
        return None
    figure.update_layout(title="Cache hit rates", yaxis_title="% of requests / prompt tokens", barmode="group",
                         height=360, margin={"l": 40, "r": 10, "t": 40, "b": 40})
    return figure
