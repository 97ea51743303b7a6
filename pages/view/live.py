"""The live panel of the active run: its phase in the lab's one status vocabulary,
start-up you can follow (elapsed, the service's last log line, the expected time), the
load's progress and figures, the drain, and the live per-second charts.

Rendering only: the page passes the state it read (``pages.common.live_state``) and the
start-up facts; the Runs page and Run detail call it inside their refreshing fragment.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import streamlit as st

from pages.view.charts import show_charts
from pages.view.figures import live_figures
from pages.view.tables import format_progress, metric_tiles, phase_text, plural, progress_fraction, status_badge
from pages.view.text import plain


def seconds_since(iso: str | None) -> float | None:
    """Seconds from an ISO timestamp (UTC when it has no zone) to now."""
    if not iso:
        return None
    moment = datetime.fromisoformat(iso)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max(0.0, (datetime.now(UTC) - moment).total_seconds())


def panel_heading(run: dict[str, Any], queued: int) -> str:
    """``Live: run #7 · 🚀 starting · naive · backend=naive vus=1 · 2 more queued`` (Markdown, user text escaped)."""
    return (
        f"**Live: run #{run['id']}** · {status_badge(run['status'], run['progress'])}"
        f" · {plain(run['backend'])} · {plain(run['cell_label'])}"
        + (f" · {plural(queued, 'more run')} queued" if queued else "")
    )


def render_startup(
    run: dict[str, Any], *, service: str | None, last_line: str | None, expected_s: float | None
) -> None:
    """Starting: how long it has taken, what the service last logged, how long it took last time."""
    elapsed_s = seconds_since(run.get("started_at"))
    parts = [f"starting {plain(service or run['backend'])}"]
    if elapsed_s is not None:
        parts.append(f"{elapsed_s:.0f} s elapsed")
    parts.append(
        f"the last start of this configuration took {expected_s:.0f} s"
        if expected_s is not None
        else "no earlier start of this configuration to compare with"
    )
    st.caption(" · ".join(parts))
    if expected_s and elapsed_s is not None:
        st.progress(min(1.0, elapsed_s / expected_s) if expected_s else 0.0)
    if last_line:
        st.caption("last log line:")
        st.code(last_line[-300:], language=None)


def render_load(run: dict[str, Any]) -> None:
    """Load or draining: the bar, what is left or what is waited for, the counts, the live charts."""
    progress = run.get("progress") or {}
    figures = format_progress(progress)
    if progress.get("phase") == "draining":
        in_flight = progress.get("in_flight")
        grace = progress.get("graceful_stop_s")
        st.progress(
            1.0,
            text=(
                "load time over: waiting for "
                f"{plural(in_flight, 'request') if in_flight is not None else 'the requests'} "
                f"still in flight (graceful stop, at most {grace:g} s)"
                if grace is not None
                else "load time over: waiting for the requests still in flight"
            ),
        )
    else:
        st.progress(progress_fraction(progress), text=f"{figures['elapsed']} elapsed, {figures['remaining']} remaining")
    metric_tiles(
        [
            ("req/s so far", figures["req/s"], None),
            ("requests done", figures["requests"], None),
            ("failed requests", figures["errors"], None),
            ("VUs", figures["VUs"], None),
        ]
    )
    render_live_charts(progress.get("live"), key=f"live_{run['id']}")


def render_live_charts(live: dict[str, Any] | None, *, key: str) -> None:
    """The live per-second charts, two a row (none until the first second is complete)."""
    smooth_s = (
        5
        if st.toggle(
            "Smooth the per-second series (5 s moving average)",
            key=f"{key}_smooth",
            help="At low load the per-second counts jump between 0 and a few requests.",
        )
        else 1
    )
    figures = live_figures(live, smooth_s=smooth_s)
    if not figures:
        st.caption("Live charts appear after the first second of load.")
        return
    show_charts(figures, key=key)


PHASE_NOTES = {
    "warming": "sending warm-up requests straight to the backend (not measured)",
    "parsing": "collecting: reading k6's results and the server metrics",
}


def render_phase(run: dict[str, Any], *, startup: dict[str, Any] | None = None) -> None:
    """The body of the live panel for the run's current phase."""
    status = run["status"]
    if status == "starting":
        render_startup(run, **(startup or {"service": None, "last_line": None, "expected_s": None}))
    elif status == "running":
        render_load(run)
    else:
        st.caption(PHASE_NOTES.get(status, phase_text(status, run.get("progress"))))
