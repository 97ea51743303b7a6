"""Tables and display text of the pages: the Runs table, status badges, live progress,
a run's headline figures, server metrics, the generic Compare tables, uptime.

Numbers are formatted with :mod:`lab.compare`'s formatters (one way to write a figure).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from lab.compare import aggregate, cost_per_million_output_tokens, format_rate, format_seconds, format_share

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
    "measurement_warnings": "warnings",
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
        "req/s": format_rate(req_per_s),
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
    def with_unit(value: float | None, unit: str) -> str:
        text = format_rate(value, 0)
        return text if value is None else f"{text}{unit}"

    return [
        ("req/s", format_rate(record.get("req_per_s"))),
        ("output tok/s", format_rate(record.get("output_tok_per_s"), 1)),
        ("input tok/s", format_rate(record.get("input_tok_per_s"), 1)),
        ("avg latency", format_seconds(record.get("latency_avg_s"))),
        ("p50 latency", format_seconds(record.get("latency_p50_s"))),
        ("p95 latency", format_seconds(record.get("latency_p95_s"))),
        ("p99 latency", format_seconds(record.get("latency_p99_s"))),
        ("max latency", format_seconds(record.get("latency_max_s"))),
        ("requests ok", format_rate(record.get("requests_ok"), 0)),
        ("failed requests", format_rate(record.get("requests_failed"), 0)),
        ("prefix cache hit", format_share(record.get("prefix_cache_hit_rate"))),
        ("response cache hit", format_share(record.get("response_cache_hit_rate"))),
        ("server TTFT avg", format_seconds(record.get("server_ttft_avg_s"))),
        ("backend CPU avg", with_unit(record.get("backend_cpu_percent_avg"), "%")),
        ("backend RSS max", with_unit(record.get("backend_rss_max_mb"), " MiB")),
        ("k6 CPU avg", with_unit(record.get("k6_cpu_percent_avg"), "%")),
        ("other processes' CPU avg", with_unit(record.get("other_cpu_percent_avg"), "%")),
        (f"steady output tok/s ({record.get('steady_source') or 'n/a'})",
         format_rate(record.get("steady_output_tok_per_s"), 1)),
        ("steady req/s", format_rate(record.get("steady_req_per_s"))),
    ]


# -- compare -----------------------------------------------------------------------------

GENERIC_KEYS = ("backend", "workload", "vus", "arrival_rate_per_s", "prompts", "max_tokens")
GENERIC_FIGURES = ("req_per_s", "output_tok_per_s", "steady_output_tok_per_s", "latency_avg_s", "latency_p50_s", "latency_p95_s",
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
    rows = aggregate(records, GENERIC_KEYS, GENERIC_FIGURES)
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    if price_per_hour is not None:
        frame["cost per 1M output tokens"] = [
            cost_per_million_output_tokens(value, price_per_hour) for value in frame["output_tok_per_s"]
        ]
    frame = frame.dropna(axis="columns", how="all")
    sort_keys = [key for key in ("backend", "vus", "prompts") if key in frame]
    return frame.sort_values(sort_keys, na_position="last").reset_index(drop=True)


def cost_table(records: Sequence[dict[str, Any]], price_per_hour: float) -> pd.DataFrame:
    """Per backend and VUs: mean output tok/s and what a million output tokens cost."""
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
