"""Helpers for the web pages that need no Streamlit: tables, Plotly figures, form checks.

The pages (``pages/*.py``) stay thin: they collect input, call the domain
(``db.store``, ``lab.specs``, ``lab.compare``) and render what these helpers build.
Nothing here imports Streamlit, so every helper is testable on its own.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from pydantic import BaseModel, ValidationError

from lab.compare import cost_per_million_output_tokens, format_seconds
from lab.specs import (
    MAX_VUS,
    CacheSpec,
    ExperimentSpec,
    LoadSpec,
    RunSpec,
    WorkloadSpec,
    format_validation_error,
)

# Status -> what the Runs table shows (an emoji reads as a badge in a data frame cell).
STATUS_BADGES: dict[str, str] = {
    "queued": "⏳ queued",
    "starting": "🚀 starting",
    "warming": "🔥 warming",
    "running": "▶️ running",
    "parsing": "🧮 parsing",
    "done": "✅ done",
    "failed": "❌ failed",
    "cancelled": "⏹️ cancelled",
    "interrupted": "⚠️ interrupted",
}

# Columns of the Runs table, in order; labels are what the user sees.
RUNS_TABLE_COLUMNS: dict[str, str] = {
    "run_id": "run",
    "status_badge": "status",
    "experiment": "experiment",
    "cell_label": "cell",
    "repeat_index": "repeat",
    "backend": "backend",
    "worker_name": "worker",
    "model_name": "model",
    "workload": "workload",
    "vus": "VUs",
    "duration_s": "duration (s)",
    "req_per_s": "req/s",
    "output_tok_per_s": "output tok/s",
    "latency_avg_s": "avg latency (s)",
    "latency_p95_s": "p95 latency (s)",
    "requests_failed": "failed requests",
    "tags": "tags",
    "created_at": "created",
}

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

SERIES_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def status_badge(status: str) -> str:
    """The badge text of a run status."""
    return STATUS_BADGES.get(status, status)


def model_short_name(model: str | None) -> str:
    """The last path part of a model folder or the HF id as given."""
    if not model:
        return ""
    return Path(model).name if "/" in model and Path(model).is_absolute() else model


def runs_table(records: Sequence[dict[str, Any]], *, sort_by: str = "run_id", descending: bool = True) -> pd.DataFrame:
    """The Runs page table from run records (``lab.compare.run_record``), sorted.

    Missing figures sort last whichever the direction.
    """
    frame = pd.DataFrame(list(records))
    if frame.empty:
        return pd.DataFrame(columns=list(RUNS_TABLE_COLUMNS.values()))
    frame["status_badge"] = frame["status"].map(status_badge)
    frame["model_name"] = frame["model"].map(model_short_name)
    if sort_by in frame.columns:
        frame = frame.sort_values(sort_by, ascending=not descending, na_position="last", kind="stable")
    frame = frame[list(RUNS_TABLE_COLUMNS)].rename(columns=RUNS_TABLE_COLUMNS)
    return frame.reset_index(drop=True)


def format_progress(progress: dict[str, Any] | None) -> dict[str, str]:
    """Live figures of a running run as display strings (elapsed, remaining, req/s, errors)."""
    progress = progress or {}
    elapsed_s = progress.get("elapsed_s")
    planned_s = progress.get("planned_s")
    remaining_s = max(0.0, planned_s - elapsed_s) if elapsed_s is not None and planned_s else None

    def seconds(value: float | None) -> str:
        return "–" if value is None else f"{value:.0f} s"

    req_per_s = progress.get("req_per_s")
    return {
        "elapsed": seconds(elapsed_s),
        "remaining": seconds(remaining_s),
        "req/s": "–" if req_per_s is None else f"{req_per_s:.2f}",
        "requests": str(progress.get("requests_completed") or 0),
        "errors": str(progress.get("requests_failed") or 0),
        "VUs": "–" if progress.get("vus") is None else str(progress.get("vus")),
    }


def progress_fraction(progress: dict[str, Any] | None) -> float:
    """The fraction of the planned load time done, clamped to [0, 1]."""
    value = (progress or {}).get("fraction")
    if not isinstance(value, (int, float)) or math.isnan(value):
        return 0.0
    return min(1.0, max(0.0, float(value)))


# -- the grid form -----------------------------------------------------------------------

@dataclass
class GridForm:
    """What the New experiment grid form collects (raw text where the user types lists)."""

    name: str = "my experiment"
    backends: list[str] = field(default_factory=lambda: ["naive"])
    model: str = ""
    target_url: str = ""
    workload: str = "number-story"
    prompts: int = 50
    sessions: int = 100
    dataset_path: str | None = None
    requests_path: str | None = None
    load_kind: str = "constant-vus"
    vus_text: str = "1"
    rates_text: str = "1"
    duration_s: float = 20.0
    max_tokens: int = 128
    repeats: int = 1
    cache_policy: str = "all"


def parse_number_list(text: str, *, integers: bool) -> list[float] | list[int]:
    """``"1, 8 32"`` -> ``[1, 8, 32]``; raises ValueError with a message for the user."""
    parts = [part for part in text.replace(",", " ").split() if part]
    if not parts:
        raise ValueError("enter at least one value, e.g. 1, 8, 32")
    values: list[Any] = []
    for part in parts:
        try:
            number = float(part)
        except ValueError:
            raise ValueError(f"{part!r} is not a number") from None
        if integers:
            if not number.is_integer():
                raise ValueError(f"{part!r} is not a whole number")
            number = int(number)
        values.append(number)
    return list(dict.fromkeys(values))  # keep order, drop repeats


def _field_error(schema: type[BaseModel], /, **values: Any) -> str | None:
    """The validation message for ``values`` of ``schema`` (only those fields), or None."""
    try:
        schema.model_validate(values)
    except ValidationError as error:
        relevant = [item for item in error.errors() if item["loc"] and item["loc"][0] in values]
        if not relevant:
            return None
        return "; ".join(item["msg"].removeprefix("Value error, ") for item in relevant)
    return None


def check_grid_form(form: GridForm) -> tuple[ExperimentSpec | None, dict[str, str]]:
    """Validate the grid form field by field and build its ExperimentSpec.

    Returns ``(spec, {})`` when valid, else ``(None, {field: message})`` where field is
    a GridForm attribute name, so each message can be shown beside its field.
    """
    errors: dict[str, str] = {}
    if not form.name.strip():
        errors["name"] = "give the experiment a name"
    if not form.backends:
        errors["backends"] = "choose at least one backend"
    if any(backend.startswith("external") for backend in form.backends) and not form.target_url.strip():
        errors["target_url"] = "external backends need the server's base URL, e.g. http://127.0.0.1:8000"
    if form.model.strip():
        message = _field_error(RunSpec, model=form.model.strip())
        if message:
            errors["model"] = message
    else:
        errors["model"] = "enter a model folder or Hugging Face id"

    grid_values: dict[str, list[Any]] = {}
    if form.load_kind == "constant-arrival-rate":
        try:
            rates = parse_number_list(form.rates_text, integers=False)
            bad = [rate for rate in rates if _field_error(LoadSpec, kind="constant-arrival-rate", rate_per_s=rate)]
            if bad:
                errors["rates_text"] = f"arrival rates must be above 0 and at most 100,000 per second (got {bad[0]:g})"
            grid_values["load.rate_per_s"] = rates
        except ValueError as error:
            errors["rates_text"] = str(error)
    else:
        try:
            vus = parse_number_list(form.vus_text, integers=True)
            bad = [value for value in vus if _field_error(LoadSpec, vus=value)]
            if bad:
                errors["vus_text"] = f"VUs must be whole numbers from 1 to {MAX_VUS} (got {bad[0]})"
            grid_values["load.vus"] = vus
        except ValueError as error:
            errors["vus_text"] = str(error)

    message = _field_error(LoadSpec, duration_s=form.duration_s)
    if message:
        errors["duration_s"] = f"duration: {message}"
    message = _field_error(RunSpec, max_tokens=form.max_tokens)
    if message:
        errors["max_tokens"] = f"max tokens: {message}"
    message = _field_error(ExperimentSpec, repeats=form.repeats)
    if message:
        errors["repeats"] = f"repeats: {message}"
    if form.workload == "number-story":
        message = _field_error(WorkloadSpec, prompts=form.prompts)
        if message:
            errors["prompts"] = f"prompts: {message}"
    if form.workload == "sharegpt-chat":
        message = _field_error(WorkloadSpec, sessions=form.sessions)
        if message:
            errors["sessions"] = f"sessions: {message}"
    if form.workload == "custom" and not form.requests_path:
        errors["requests_path"] = "the custom workload needs a JSONL file of requests: upload one below"
    message = _field_error(CacheSpec, policy=form.cache_policy)
    if message:
        errors["cache_policy"] = message
    if errors:
        return None, errors

    workload: dict[str, Any] = {"kind": form.workload}
    if form.workload == "number-story":
        workload["prompts"] = form.prompts
    elif form.workload == "sharegpt-chat":
        workload["sessions"] = form.sessions
        if form.dataset_path:
            workload["dataset_path"] = form.dataset_path
    else:
        workload["requests_path"] = form.requests_path
    load: dict[str, Any] = {"kind": form.load_kind, "duration_s": form.duration_s}
    if form.load_kind == "constant-arrival-rate":
        load["rate_per_s"] = grid_values["load.rate_per_s"][0]
    base: dict[str, Any] = {
        "backend": form.backends[0],
        "model": form.model.strip(),
        "workload": workload,
        "load": load,
        "max_tokens": form.max_tokens,
        "cache": {"policy": form.cache_policy},
    }
    if form.target_url.strip():
        base["target_url"] = form.target_url.strip()
    grid: dict[str, list[Any]] = {}
    if len(form.backends) > 1:
        grid["backend"] = list(form.backends)
    for path, values in grid_values.items():
        if len(values) > 1:
            grid[path] = values
        elif path == "load.vus":
            base["load"]["vus"] = values[0]
    try:
        spec = ExperimentSpec.model_validate(
            {"name": form.name.strip(), "base": base, "grid": grid, "repeats": form.repeats}
        )
    except ValidationError as error:
        return None, {"form": format_validation_error(error)}
    except ValueError as error:  # a grid cell that is invalid as a whole
        return None, {"form": str(error)}
    return spec, {}


# -- uploads -----------------------------------------------------------------------------

UPLOAD_META_SUFFIX = ".meta.json"


def record_upload(saved: Any) -> Path:
    """Write a small sidecar beside an accepted upload (original name, counts) for the pages."""
    meta_path = saved.path.with_name(saved.path.name + UPLOAD_META_SUFFIX)
    meta = {
        "original_name": saved.original_name, "kind": saved.kind, "size_bytes": saved.size_bytes,
        "items": saved.items, "usable": saved.usable,
        "saved_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    meta_path.write_text(json.dumps(meta), encoding="utf-8")
    return meta_path


def list_uploads(upload_dir: Path, kind: str) -> list[tuple[str, str]]:
    """``(path, label)`` of stored uploads of ``kind`` (``sharegpt`` or ``jsonl``), newest first."""
    suffix = ".json" if kind == "sharegpt" else ".jsonl"
    if not upload_dir.is_dir():
        return []
    files = [p for p in upload_dir.iterdir() if p.suffix == suffix and not p.name.endswith(UPLOAD_META_SUFFIX)]
    result = []
    for path in sorted(files, key=lambda p: p.stat().st_mtime, reverse=True):
        meta_path = path.with_name(path.name + UPLOAD_META_SUFFIX)
        label = path.name
        if meta_path.is_file():
            try:
                meta = json.loads(meta_path.read_text(encoding="utf-8"))
                label = f"{meta['original_name']} ({meta['usable']:,} usable, saved {meta['saved_at']})"
            except (ValueError, KeyError):
                pass
        result.append((str(path), label))
    return result


# -- run detail --------------------------------------------------------------------------

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
                name=column,
                line={"color": SERIES_PALETTE[index % len(SERIES_PALETTE)]},
            ))
    figure.update_layout(title=title, xaxis_title="time (s)", yaxis_title=y_title, height=320,
                         margin={"l": 40, "r": 10, "t": 40, "b": 40}, legend={"orientation": "h"})
    return figure


def run_detail_figures(series: dict[str, Any] | None) -> list[go.Figure]:
    """The per-second charts of one run: throughput, latency, VUs, CPU, RSS, GPU and the backend's
    running/waiting requests (those with data)."""
    frame = series_frame(series)
    figures: list[go.Figure] = []
    if not frame.empty:
        figures.append(line_figure(frame, ["output_tok_per_s", "req_per_s"], title="Throughput", y_title="per second"))
        figures.append(line_figure(frame, ["latency_avg_s", "latency_p50_s", "latency_p95_s"],
                                   title="Latency of requests finished each second", y_title="seconds"))
        if "vus" in frame:
            figures.append(line_figure(frame, ["vus"], title="Running virtual users (requests in flight)",
                                       y_title="VUs"))
        if "requests_failed" in frame and pd.to_numeric(frame["requests_failed"], errors="coerce").fillna(0).sum():
            figures.append(line_figure(frame, ["requests_failed"], title="Failed requests", y_title="per second"))
    resources = resources_frame(series)
    if not resources.empty:
        cpu = [c for c in resources.columns if c.endswith("_cpu_percent") and not c.startswith("gpu")]
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
    if not server.empty:
        figures.append(line_figure(server, [c for c in ("running_requests", "waiting_requests") if c in server],
                                   title="Requests running and waiting in the backend", y_title="requests"))
    return figures


def server_metrics_table(server_metrics: dict[str, Any] | None) -> pd.DataFrame:
    """Server metrics before and after the load, and the change, one row per sample name."""
    server_metrics = server_metrics or {}
    before = server_metrics.get("before") or {}
    after = server_metrics.get("after") or {}
    rows = []
    for service in sorted(set(before) | set(after)):
        first = before.get(service) or {}
        last = after.get(service) or {}
        for name in sorted(set(first) | set(last)):
            start, end = first.get(name), last.get(name)
            rows.append({
                "service": service, "metric": name, "before": start, "after": end,
                "change": end - start if isinstance(start, (int, float)) and isinstance(end, (int, float)) else None,
            })
    return pd.DataFrame(rows, columns=["service", "metric", "before", "after", "change"])


def figures_summary(record: dict[str, Any]) -> list[tuple[str, str]]:
    """``(label, value)`` of a run's headline figures, formatted for ``st.metric``."""
    def rate(value: Any, digits: int = 2) -> str:
        return "–" if value is None else f"{value:,.{digits}f}"

    def share(value: Any) -> str:
        return "–" if value is None else f"{value * 100:.1f}%"

    return [
        ("req/s", rate(record.get("req_per_s"))),
        ("output tok/s", rate(record.get("output_tok_per_s"), 1)),
        ("input tok/s", rate(record.get("input_tok_per_s"), 1)),
        ("avg latency", format_seconds(record.get("latency_avg_s"))),
        ("p50 latency", format_seconds(record.get("latency_p50_s"))),
        ("p95 latency", format_seconds(record.get("latency_p95_s"))),
        ("p99 latency", format_seconds(record.get("latency_p99_s"))),
        ("max latency", format_seconds(record.get("latency_max_s"))),
        ("requests ok", rate(record.get("requests_ok"), 0)),
        ("failed requests", rate(record.get("requests_failed"), 0)),
        ("prefix cache hit", share(record.get("prefix_cache_hit_rate"))),
        ("response cache hit", share(record.get("response_cache_hit_rate"))),
        ("server TTFT avg", format_seconds(record.get("server_ttft_avg_s"))),
        ("backend CPU avg", "–" if record.get("backend_cpu_percent_avg") is None
         else f"{record['backend_cpu_percent_avg']:.0f}%"),
        ("backend RSS max", "–" if record.get("backend_rss_max_mb") is None
         else f"{record['backend_rss_max_mb']:,.0f} MiB"),
        ("k6 CPU avg", "–" if record.get("k6_cpu_percent_avg") is None else f"{record['k6_cpu_percent_avg']:.0f}%"),
    ]


# -- compare -----------------------------------------------------------------------------

GENERIC_KEYS = ("backend", "workload", "vus", "arrival_rate_per_s", "prompts", "max_tokens")
GENERIC_FIGURES = ("req_per_s", "output_tok_per_s", "latency_avg_s", "latency_p50_s", "latency_p95_s",
                   "latency_p99_s", "latency_max_s", "prefix_cache_hit_rate", "response_cache_hit_rate")


def matching_seed_preset(records: Sequence[dict[str, Any]], seed_presets: Sequence[str]) -> str | None:
    """The seed preset all ``records`` come from, if exactly one (so its seed table applies)."""
    presets = {record.get("preset") for record in records}
    if len(presets) == 1:
        preset = presets.pop()
        if preset in seed_presets:
            return preset
    return None


def generic_table(records: Sequence[dict[str, Any]], *, price_per_hour: float | None = None) -> pd.DataFrame:
    """Done runs grouped by backend, workload and load, with means (and repeat count), plus cost."""
    from lab.compare import aggregate

    rows = aggregate(records, GENERIC_KEYS, GENERIC_FIGURES)
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    frame = frame.drop(columns=[c for c in frame.columns if c.endswith("_sd")])
    if price_per_hour is not None:
        frame["cost per 1M output tokens"] = [
            cost_per_million_output_tokens(value, price_per_hour) for value in frame["output_tok_per_s"]
        ]
    frame = frame.dropna(axis="columns", how="all")
    sort_keys = [key for key in ("backend", "vus", "prompts") if key in frame]
    return frame.sort_values(sort_keys, na_position="last").reset_index(drop=True)


def cost_table(records: Sequence[dict[str, Any]], price_per_hour: float) -> pd.DataFrame:
    """Per backend and VUs: mean output tok/s and what a million output tokens cost."""
    from lab.compare import aggregate

    rows = aggregate(records, ("backend", "vus"), ("output_tok_per_s",))
    frame = pd.DataFrame(
        [{"backend": row["backend"], "VUs": row["vus"], "output tok/s": row["output_tok_per_s"],
          "cost per 1M output tokens": cost_per_million_output_tokens(row["output_tok_per_s"], price_per_hour)}
         for row in rows],
        columns=["backend", "VUs", "output tok/s", "cost per 1M output tokens"],
    )
    return frame.sort_values(["backend", "VUs"], na_position="last").reset_index(drop=True)


def ratios_rows(ratios: dict[str, Any], prefix: str = "") -> list[dict[str, Any]]:
    """A nested ratio dict (``exp1_ratios`` etc.) flattened to ``{"ratio", "value"}`` rows."""
    rows: list[dict[str, Any]] = []
    for key, value in ratios.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            rows.extend(ratios_rows(value, prefix=f"{name} · "))
        else:
            rows.append({"ratio": name.replace("_", " "), "value": value})
    return rows


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
    figure.update_layout(title=title, xaxis_title="time (s)", height=360, margin={"l": 40, "r": 10, "t": 40, "b": 40})
    return figure


def hit_rates_figure(records: Sequence[dict[str, Any]]) -> go.Figure:
    """Mean prefix (vLLM KV) and response (Redis) cache hit rates per backend."""
    figure = go.Figure()
    frame = _done_frame(records)
    columns = {"prefix_cache_hit_rate": "vLLM prefix cache", "response_cache_hit_rate": "Redis response cache"}
    if not frame.empty:
        for column, name in columns.items():
            if column in frame:
                grouped = frame.groupby("backend")[column].mean().dropna()
                if not grouped.empty:
                    figure.add_trace(go.Bar(x=list(grouped.index), y=[v * 100 for v in grouped.values], name=name))
    figure.update_layout(title="Cache hit rates", yaxis_title="% of requests / prompt tokens", barmode="group",
                         height=360, margin={"l": 40, "r": 10, "t": 40, "b": 40})
    return figure


def uptime_text(started_at: str | None, now: datetime | None = None) -> str:
    """``"1h 02m"`` since an ISO timestamp; ``"–"`` when not running."""
    if not started_at:
        return "–"
    try:
        started = datetime.fromisoformat(started_at)
    except ValueError:
        return "–"
    if started.tzinfo is None:
        started = started.replace(tzinfo=timezone.utc)
    seconds = max(0, int(((now or datetime.now(timezone.utc)) - started).total_seconds()))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {secs:02d}s"
