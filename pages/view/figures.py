"""Plotly figures of the pages: a run's per-second charts, the live charts and the Compare charts.

One look everywhere (:func:`readable`): the title at the top left (the toolbar runs down the
right edge, shown on hover), the legend in its own row between the title and the plot (it never covers an
axis title, and never narrows the plot), axis titles from the names map, one unit per axis
(a chart per unit), and one colour per backend in every chart (:func:`backend_colour`).
Per-second series can be smoothed with a moving average (:func:`smoothed`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from db.figures import figure_by
from lab.backends import spec_backend_names
from lab.measurement.k6_ndjson import SeriesColumn
from pages.view.names import display_name, header
from pages.view.text import chart_label

SERIES_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
# Backends: the registry's order picks the colour, so a backend looks the same in every chart.
BACKEND_PALETTE = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#9467bd",
    "#ff7f0e",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#bcbd22",
    "#7f7f7f",
)
CHART_HEIGHT_PX = 340
# Every chart's template, as Plotly's default: a figure takes the default without validating it
# again, where naming it in each chart's layout validated the whole template per chart (15-20 ms,
# about a quarter of rendering Compare).
pio.templates.default = "plotly_white"
# Series of one backend share its colour: each gets its own dash and marker.
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
MARKERS = ("circle", "square", "diamond", "triangle-up", "x", "star", "cross", "triangle-down")
# The toolbar shows on hover only, at the top right, away from the title at the top left.
CHART_CONFIG = {"displayModeBar": "hover", "displaylogo": False}


def backend_colour(backend: str) -> str:
    """The colour of ``backend`` (``naive``, ``vllm+cache``) in every chart."""
    names = spec_backend_names()
    index = names.index(backend) if backend in names else len(names) + sum(map(ord, backend))
    return BACKEND_PALETTE[index % len(BACKEND_PALETTE)]


# Characters of legend names that fit one row of a chart on a narrow page (800 px).
LEGEND_ROW_CHARS = 60


def _legend_rows(figure: go.Figure) -> int:
    legend_chars = sum(len(str(trace.name or "")) + 6 for trace in figure.data if trace.showlegend is not False)
    return max(1, -(-legend_chars // LEGEND_ROW_CHARS))


def _top_margin_px(figure: go.Figure) -> int:
    """Room above the plot for the title and the legend's row, or two rows when the legend's names
    are long enough to wrap on a narrow page (800 px)."""
    return 80 if _legend_rows(figure) <= 1 else 115


def readable(figure: go.Figure, *, title: str, x_title: str, y_title: str, height: int = CHART_HEIGHT_PX) -> go.Figure:
    """The one layout of every chart: title top left, legend in a row above the plot, room for the axis titles."""
    rows = _legend_rows(figure)
    # Up to two rows the legend sits above the plot; more go below it and the chart grows by them,
    # so a long legend never squeezes or covers the plot.
    below = rows > 2
    legend = (
        # At the foot of the figure, in the margin grown for it: under the x axis's title, never over it.
        {
            "orientation": "h",
            "x": 0.0,
            "xanchor": "left",
            "yref": "container",
            "y": 0.0,
            "yanchor": "bottom",
            "title": None,
        }
        if below
        else {"orientation": "h", "x": 0.0, "xanchor": "left", "y": 1.04, "yanchor": "bottom", "title": None}
    )
    figure.update_layout(
        title={
            "text": title,
            "x": 0.0,
            "xanchor": "left",
            "y": 0.98,
            "yanchor": "top",
            "yref": "container",
            "font": {"size": 15},
        },
        xaxis_title=x_title,
        yaxis_title=y_title,
        height=height + (22 * rows if below else 0),
        margin={"l": 60, "r": 20, "t": 80 if below else _top_margin_px(figure), "b": 50 + (24 * rows if below else 0)},
        legend=legend,
        showlegend=len(figure.data) > 1,
        hovermode="x unified",
        # The toolbar runs down the right edge, never across the title at the top left.
        modebar={"orientation": "v"},
    )
    # Every figure these charts draw (seconds, rates, counts, shares, VUs) is 0 or more:
    # no axis starts below 0, even around a single point.
    figure.update_xaxes(automargin=True, rangemode="nonnegative")
    figure.update_yaxes(automargin=True, rangemode="tozero")
    return figure


def smoothed(values: pd.Series, window_s: int) -> pd.Series:
    """A per-second series as a moving average over ``window_s`` seconds (as is for 1 or less)."""
    numbers = pd.to_numeric(values, errors="coerce")
    return numbers if window_s <= 1 else numbers.rolling(window_s, min_periods=1).mean()


def series_frame(series: dict[str, Any] | None) -> pd.DataFrame:
    """k6's per-second lists as a frame indexed by second, plus output tokens/s and req/s."""
    series = series or {}
    time_s = series.get("time_s") or []
    columns = {
        key: value
        for key, value in series.items()
        if isinstance(value, list) and len(value) == len(time_s) and key != "time_s"
    }
    frame = pd.DataFrame({"time_s": time_s, **columns})
    if frame.empty:
        return frame
    bucket_s = float(series.get("bucket_s") or 1.0)
    # Counts per bucket become rates, named after the figures they stand beside.
    for count, rate in (
        (SeriesColumn.OUTPUT_TOKENS, figure_by(lambda f: f.output_tok_per_s).name),
        (SeriesColumn.REQUESTS_OK, figure_by(lambda f: f.req_per_s).name),
    ):
        if count in frame:
            frame[rate] = pd.to_numeric(frame[count], errors="coerce") / bucket_s
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


def coinciding(frame: pd.DataFrame, columns: Sequence[str]) -> dict[str, str]:
    """``{column: earlier column}`` for each column whose values equal an earlier one's at every
    second (avg, p50 and p95 of a run whose requests all took as long): such lines lie on each
    other, so the legend says so."""
    same: dict[str, str] = {}
    for index, column in enumerate(columns):
        values = pd.to_numeric(frame[column], errors="coerce")
        for earlier in columns[:index]:
            if earlier not in same and values.equals(pd.to_numeric(frame[earlier], errors="coerce")):
                same[column] = earlier
                break
    return same


def line_figure(
    frame: pd.DataFrame, columns: Sequence[str], *, title: str, y_title: str, smooth_s: int = 1
) -> go.Figure:
    """Lines of ``columns`` (one unit) against ``time_s``, optionally smoothed over ``smooth_s`` seconds.

    Lines that may lie on each other stay visible: each later line is thinner and dashed over
    the earlier, and one equal to another at every second says so in its legend name."""
    figure = go.Figure()
    present = [column for column in columns if column in frame]
    same = coinciding(frame, present)
    for index, column in enumerate(present):
        name = display_name(column).label
        if column in same:
            name += f" (= {display_name(same[column]).label})"
        figure.add_trace(
            go.Scatter(
                # Markers too when there are few points: a single point draws no line.
                x=frame["time_s"],
                y=smoothed(frame[column], smooth_s),
                mode="lines+markers" if len(frame) < 30 else "lines",
                name=name,
                line={
                    "color": SERIES_PALETTE[index % len(SERIES_PALETTE)],
                    "dash": DASHES[index % len(DASHES)],
                    "width": max(1.5, 4.0 - 1.25 * index),
                },
                marker={"symbol": MARKERS[index % len(MARKERS)]},
                connectgaps=False,
            )
        )
    return readable(
        figure,
        title=title + (f" ({smooth_s} s moving average)" if smooth_s > 1 else ""),
        x_title=header("time_s"),
        y_title=y_title,
    )


# Per-second charts of a finished run: (title, columns, y axis), one unit each; smoothable.
RUN_CHARTS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("Output tokens per second", ("output_tok_per_s",), "output tokens/s"),
    ("Requests finished per second", ("req_per_s",), "requests/s"),
    ("Latency of requests finished each second", ("latency_avg_s", "latency_p50_s", "latency_p95_s"), "seconds"),
    ("Running virtual users (requests in flight)", ("vus",), "VUs"),
)


def run_detail_figures(series: dict[str, Any] | None, *, smooth_s: int = 1) -> list[go.Figure]:
    """The per-second charts of one run (those with data): throughput, requests, latency, VUs,
    failures, then CPU, memory, GPU and the backend's running/waiting requests."""
    frame = series_frame(series)
    figures: list[go.Figure] = []
    if not frame.empty:
        for title, columns, y_title in RUN_CHARTS:
            present = [column for column in columns if has_data(frame, [column])]
            if present:
                figures.append(line_figure(frame, present, title=title, y_title=y_title, smooth_s=smooth_s))
        failed = SeriesColumn.REQUESTS_FAILED
        if failed in frame and pd.to_numeric(frame[failed], errors="coerce").fillna(0).sum():
            figures.append(line_figure(frame, [failed], title="Failed requests", y_title="per second"))
    figures += resource_figures(resources_frame(series))
    server = resources_frame(series, "server")
    if has_data(server, ["running_requests", "waiting_requests"]):
        figures.append(
            line_figure(
                server,
                [c for c in ("running_requests", "waiting_requests") if c in server],
                title="Requests running and waiting in the backend",
                y_title="requests",
            )
        )
    return figures


def resource_figures(resources: pd.DataFrame) -> list[go.Figure]:
    """CPU per process, resident memory, GPU use and memory (those sampled)."""
    if resources.empty:
        return []
    cpu = [
        c
        for c in resources.columns
        if c.endswith("_cpu_percent")
        and not c.startswith("gpu")
        and c not in ("host_cpu_percent", "steal_cpu_percent")
        and has_data(resources, [c])
    ]
    rss = [c for c in resources.columns if c.endswith("_rss_mb")]
    gpu = [c for c in resources.columns if c.startswith("gpu_")]
    charts = (
        (cpu, "CPU", "% of one core"),
        (rss, "Resident memory", "MiB"),
        ([c for c in gpu if c.endswith("_percent")], "GPU utilisation", "%"),
        ([c for c in gpu if c.endswith("_mb")], "GPU memory used", "MiB"),
    )
    return [
        line_figure(resources, columns, title=title, y_title=y_title) for columns, title, y_title in charts if columns
    ]


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


def live_figures(live: dict[str, Any] | None, *, smooth_s: int = 1) -> list[go.Figure]:
    """The live charts of a run under load (``progress["live"]`` written by the runner), those
    with data: throughput, requests, latency, the backend's queue, CPU of each process and the
    host's other work; the load's series optionally smoothed over ``smooth_s`` seconds."""
    live = live or {}
    figures: list[go.Figure] = []
    for title, part, columns, y_title in LIVE_CHARTS:
        # k6's part holds counts per second, like a stored series: series_frame makes them rates.
        frame = series_frame(live.get(part)) if part == "k6" else pd.DataFrame(live.get(part) or {})
        present = [column for column in columns if has_data(frame, [column])]
        failed = SeriesColumn.REQUESTS_FAILED
        if failed in present and not pd.to_numeric(frame[failed], errors="coerce").fillna(0).sum():
            present.remove(failed)  # no failures: no line for them
        if present:
            figures.append(line_figure(frame, present, title=title, y_title=y_title, smooth_s=smooth_s))
    cpu = pd.DataFrame(live.get("cpu") or {})
    cpu_columns = [c for c in cpu.columns if c != "time_s" and has_data(cpu, [c])]
    if cpu_columns:
        figures.append(line_figure(cpu, cpu_columns, title="CPU", y_title="% of one core"))
    return figures


def _done_frame(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame([r for r in records if r.get("status") == "done"])


def vus_axis(figure: go.Figure, vus: Sequence[float]) -> go.Figure:
    """Ticks at the VUs measured, never fractions of a user; a log axis when they span 8x or more (1, 8, 32)."""
    values = sorted({float(v) for v in vus if v and v > 0})
    if values:
        figure.update_xaxes(
            tickmode="array",
            tickvals=values,
            ticktext=[f"{v:g}" for v in values],
            type="log" if values[-1] / values[0] >= 8 else "linear",
        )
    return figure


def series_of(frame: pd.DataFrame) -> str:
    """The column a chart groups its lines by: the series (Compare's
    :func:`pages.view.series.with_series`) when the records carry one, else the backend."""
    return "series" if "series" in frame else "backend"


def series_style(backend: str, index: int) -> dict[str, Any]:
    """A series' look: its backend's colour; a dash and marker of its own per series of one backend."""
    return {
        "line": {"color": backend_colour(backend), "dash": DASHES[index % len(DASHES)]},
        "marker": {"symbol": MARKERS[index % len(MARKERS)], "size": 9},
    }


def figure_vs_vus(records: Sequence[Mapping[str, Any]], figure_name: str, *, title: str) -> go.Figure:
    """Mean of one figure against VUs, one line per series (per backend unless the records carry
    a series), in its backend's colour; a series of one point is a marker."""
    figure = go.Figure()
    frame = _done_frame(records)
    if not frame.empty and "vus" in frame and figure_name in frame:
        by = series_of(frame)
        frame = frame.assign(backend=frame["backend"].astype(str), **{by: frame[by].astype(str)})
        grouped = frame.dropna(subset=["vus"]).groupby([by, "backend", "vus"], as_index=False)[figure_name].mean()
        seen: dict[str, int] = {}
        for (name, backend), part in grouped.groupby([by, "backend"], sort=False):
            count = seen[str(backend)] = seen.get(str(backend), -1) + 1
            figure.add_trace(
                go.Scatter(
                    x=part["vus"],
                    y=part[figure_name],
                    mode="lines+markers",
                    name=chart_label(name),
                    **series_style(str(backend), count),
                )
            )
        vus_axis(figure, grouped["vus"].tolist())
    return readable(figure, title=title, x_title=header("vus"), y_title=header(figure_name))


def throughput_vs_vus_figure(records: Sequence[Mapping[str, Any]]) -> go.Figure:
    """Mean output tokens/s against VUs, one line per backend."""
    return figure_vs_vus(records, "output_tok_per_s", title="Output tokens/s against VUs")


def req_per_s_vs_vus_figure(records: Sequence[Mapping[str, Any]]) -> go.Figure:
    """Mean requests/s against VUs, one line per backend (its own chart: another unit)."""
    return figure_vs_vus(records, "req_per_s", title="Requests/s against VUs")


def latency_vs_vus_figure(records: Sequence[Mapping[str, Any]]) -> go.Figure:
    """Mean p50/p95/p99 latency against VUs, per series (its backend's colour; dash style per percentile)."""
    figure = go.Figure()
    frame = _done_frame(records)
    dashes = {"latency_p50_s": "solid", "latency_p95_s": "dash", "latency_p99_s": "dot"}
    if not frame.empty and "vus" in frame:
        present = [c for c in dashes if c in frame]
        by = series_of(frame)
        frame = frame.assign(backend=frame["backend"].astype(str), **{by: frame[by].astype(str)})
        grouped = frame.dropna(subset=["vus"]).groupby([by, "backend", "vus"], as_index=False)[present].mean()
        seen: dict[str, int] = {}
        for (name, backend), part in grouped.groupby([by, "backend"], sort=False):
            count = seen[str(backend)] = seen.get(str(backend), -1) + 1
            for column in present:
                figure.add_trace(
                    go.Scatter(
                        x=part["vus"],
                        y=part[column],
                        mode="lines+markers",
                        name=chart_label(f"{name} {display_name(column).label.removesuffix(' latency')}"),
                        line={"color": backend_colour(str(backend)), "dash": dashes[column]},
                        marker={"symbol": MARKERS[count % len(MARKERS)], "size": 8},
                    )
                )
        vus_axis(figure, grouped["vus"].tolist())
    return readable(figure, title="Latency percentiles against VUs", x_title=header("vus"), y_title="seconds")


def overlaid_series_figure(
    series_by_run: dict[str, tuple[str, dict[str, Any]]], column: str, *, title: str, smooth_s: int = 1
) -> go.Figure:
    """One per-second column of several runs on one time axis: ``{label: (backend, series)}``;
    a backend's colour, a dash style per run of the same backend."""
    figure = go.Figure()
    dashes = DASHES
    seen: dict[str, int] = {}
    for label, (backend, series) in series_by_run.items():
        frame = series_frame(series)
        if column in frame:
            count = seen[backend] = seen.get(backend, -1) + 1
            figure.add_trace(
                go.Scatter(
                    x=frame["time_s"],
                    y=smoothed(frame[column], smooth_s),
                    mode="lines",
                    name=label,
                    line={"color": backend_colour(backend), "dash": dashes[count % len(dashes)]},
                )
            )
    return readable(
        figure,
        title=title + (f" ({smooth_s} s moving average)" if smooth_s > 1 else ""),
        x_title=header("time_s"),
        y_title=header(column),
    )


def hit_rates_figure(records: Sequence[Mapping[str, Any]]) -> go.Figure | None:
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
    figure.update_layout(barmode="group")
    return readable(figure, title="Cache hit rates", x_title=header("backend"), y_title="% of requests / prompt tokens")


def by_backend(figure: go.Figure, *, title: str, x_title: str, y_title: str) -> go.Figure:
    """A figure built elsewhere (the report's Pareto and search charts) in the pages' look: each
    trace named after a backend (or a series starting with one) in that backend's colour, a
    marker and dash of its own per series of one backend, the names map's axis titles."""
    seen: dict[str, int] = {}
    for trace in figure.data:
        backend = (trace.name or "").split(" ")[0]
        if backend in spec_backend_names():
            count = seen[backend] = seen.get(backend, -1) + 1
            style = series_style(backend, count)
            trace.update(line=style["line"], marker={**style["marker"], "color": backend_colour(backend)})
        trace.update(name=chart_label(trace.name))
    return readable(figure, title=title, x_title=x_title, y_title=y_title, height=400)
