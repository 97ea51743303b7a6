"""Run detail: one run's spec, environment, figures, per-second charts, server metrics,
service log tails, and "run again"."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import streamlit as st
from pydantic import ValidationError

from db.models import Run, RunSeries, RunStatus
from lab import history
from lab.analysis.compare import RunRecord
from lab.measurement.results import RunResults
from lab.specs.schema import RunSpec, format_validation_error
from pages.common import LIVE_POLL_INTERVAL_S, NEW_EXPERIMENT_PAGE, session, show_flash, startup_facts, without_polling
from pages.view.baseline import baseline_panel
from pages.view.charts import show_charts
from pages.view.figures import run_detail_figures
from pages.view.imported import foreign_figures_section, imported_caption
from pages.view.live import render_phase
from pages.view.members import audit_trail, notes_thread
from pages.view.names import local_time
from pages.view.outage import view_survives_database_outage
from pages.view.page_guard import only_through_entry_file
from pages.view.tables import figures_summary, metric_tiles, model_short_name, server_metrics_table, status_badge
from pages.view.text import plain, show_failure, show_plain

only_through_entry_file()  # run on its own (not from the entry file), a page renders nothing

RECENT_RUNS_LISTED = 500
# The largest id the database can hold (SQLite's and PostgreSQL's 64-bit integers).
MAX_RUN_ID = 2**63 - 1


def run_id_from_link(values: list[str]) -> tuple[int | None, str | None]:
    """The link's ``?run=`` as a run id, or None and a message saying why not (several
    values, text, a sign, a fraction, a huge number; nothing when there is none)."""
    if not values:
        return None, None
    if len(values) > 1:
        return None, f"The link names {len(values)} runs; it should name one. Pick a run below."
    text = values[0].strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 19 or not 1 <= int(text) <= MAX_RUN_ID:
        return None, f"“{text[:60]}” in the link is not a run id (a whole number from 1). Pick a run below."
    return int(text), None


def chosen_run_id(recent: list[tuple[int, str]]) -> int | None:
    """The run to show: the URL's ``?run=``, else the one last opened, else the newest."""
    from_url, problem = run_id_from_link(st.query_params.get_all("run"))
    if problem:
        show_plain(problem, kind="warning")
    if from_url is not None:
        return from_url
    if "detail_run_id" in st.session_state:
        return int(st.session_state["detail_run_id"])
    return recent[0][0] if recent else None


def live_run(run_id: int) -> None:
    """A queued or running run, followed live: its phase, the start-up, the load's figures and
    live charts; the page redraws in full once it has finished."""

    @st.fragment(run_every=LIVE_POLL_INTERVAL_S)
    @view_survives_database_outage
    def live() -> None:
        with session() as db_session:
            run = history.get_run(session=db_session, run_id=run_id)
            state: dict[str, Any] | None = (
                None
                if run is None
                else {
                    "id": run.id,
                    "status": run.status,
                    "progress": run.progress,
                    "backend": run.backend,
                    "cell_label": run.cell_label,
                    "started_at": run.started_at.isoformat() if run.started_at else None,
                    "model": run.model,
                    "spec": run.spec,
                    "cancel_requested": run.cancel_requested,
                }
            )
        if state is None or state["status"] not in (RunStatus.QUEUED, *RunStatus.ACTIVE):
            st.rerun()  # finished (or deleted): show the whole page once, without polling
        st.subheader(f"Run #{run_id} · {status_badge(state['status'], state['progress'])}")
        if state["status"] == RunStatus.QUEUED:
            st.info("Queued: it starts when the worker is free (see Runs for the queue).")
            return
        with st.container(border=True):
            render_phase(state, startup=startup_facts(state) if state["status"] == RunStatus.STARTING else None)

    live()


def _ms(value_s: float | None) -> str:
    return "–" if value_s is None else f"{value_s * 1000:,.0f} ms"


def streaming_latency_text(run: Run) -> tuple[str, str] | None:
    """Client vs server TTFT of a streamed run as (kind, text); None when no TTFT was timed."""
    results = RunResults.from_columns(run)
    client_s = results.ttft_avg_s
    unstreamed = results.unstreamed_answers or 0
    if client_s is None:
        return None
    server_s = results.server_ttft_avg_s
    text = (
        f"Client TTFT (time to first byte of a streamed answer): avg {_ms(client_s)}, "
        f"p95 {_ms(results.ttft_p95_s)}; TPOT avg {_ms(results.tpot_avg_s)}, p95 {_ms(results.tpot_p95_s)}"
    )
    if server_s is not None:
        text += f" · server TTFT avg {_ms(server_s)} (client − server: {(client_s - server_s) * 1000:+,.0f} ms)"
    if results.ttft_hit_p95_s is not None or results.ttft_miss_p95_s is not None:
        text += f" · cache HIT TTFT p95 {_ms(results.ttft_hit_p95_s)}, MISS p95 {_ms(results.ttft_miss_p95_s)}"
    if unstreamed:
        return "warning", (
            f"{unstreamed} answers were not streamed (one JSON body): their TTFT is the time to the "
            f"whole answer. " + text
        )
    return "caption", text


def choose_run() -> int | None:
    """The run picker (the run in the URL or the session by default); None when there are no runs."""
    with session() as db_session:
        recent = [
            (run.id, f"#{run.id} {run.backend} {run.cell_label} ({status_badge(run.status, run.progress)})")
            for run in history.list_runs(session=db_session, limit=RECENT_RUNS_LISTED)
        ]
    if not recent:
        st.info("No runs yet. Launch one on New experiment, then open it here from Runs.")
        return None
    default_id = chosen_run_id(recent)
    labels = dict(recent)
    if default_id is not None and default_id not in labels:
        labels[default_id] = f"#{default_id}"
    options = list(labels)
    run_id = st.selectbox(
        "Run",
        options,
        index=options.index(default_id) if default_id in labels else 0,
        format_func=lambda option: labels[option],
        key=f"detail_select_{default_id}",
    )
    if run_id != default_id:
        st.session_state["detail_run_id"] = run_id
        st.query_params["run"] = str(run_id)
    return run_id


def run_again_button(run: Run) -> None:
    """ "Run again": New experiment opens with this run's spec in an editable form."""
    if st.button(
        "Run again…", key="run_again", help="Opens New experiment with this run's spec, every setting editable."
    ):
        try:
            spec = RunSpec.model_validate(run.spec)
        except ValidationError as error:
            show_plain(
                f"Cannot run it again, its spec is no longer valid here: {format_validation_error(error)}", kind="error"
            )
            return
        st.session_state["run_again_spec"] = {
            "run_id": run.id,
            "spec": spec.model_dump(mode="json"),
            "lines": run_again_lines(spec),
        }
        st.switch_page(NEW_EXPERIMENT_PAGE)


def run_again_lines(spec: RunSpec) -> str:
    """The settings a person most often changes, as ``key=value`` lines filled with the run's values."""
    values = spec.model_dump(mode="json")
    paths = (
        "backend",
        "model",
        "load.kind",
        "load.vus",
        "load.rate_per_s",
        "load.duration_s",
        "load.graceful_stop_s",
        "max_tokens",
        "workload.kind",
        "workload.prompts",
        "workload.stream",
        "random_seed",
    )
    lines = []
    for path in paths:
        node: Any = values
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            lines.append(f"{path}={json.dumps(node) if not isinstance(node, str) else node}")
    return "\n".join(lines)


def figures_section(run: Run, record: Mapping[str, Any], series: dict | None) -> None:
    """The figures, streaming latencies, client/server counts and the per-second charts."""
    st.markdown("#### Figures")
    metric_tiles(figures_summary(RunResults.from_columns(run)))
    streaming = streaming_latency_text(run)
    if streaming is not None:
        show_plain(streaming[1], kind=streaming[0])
    if run.count_check:
        show_plain(
            "Client/server counts: "
            + "; ".join(
                f"{name.replace('_', ' ')}: client {check.get('client')}, server {check.get('server')}"
                + (
                    f" (difference {check['difference_ratio'] * 100:+.1f}%)"
                    if check.get("difference_ratio") is not None
                    else ""
                )
                for name, check in run.count_check.items()
                if isinstance(check, dict)
            ),
            kind="caption",
        )

    st.markdown("#### Per second")
    smooth_s = (
        5
        if st.toggle(
            "Smooth the per-second series (5 s moving average)",
            key="detail_smooth",
            help="At low load a second holds one request or none: the raw series zigzags.",
        )
        else 1
    )
    figures = run_detail_figures(series, smooth_s=smooth_s)
    if not figures:
        st.info("No per-second series for this run (it has not run yet, or k6 wrote no samples).")
    show_charts(figures, key="detail_chart")


def stored_details(run: Run, series_row: RunSeries | None) -> None:
    """Server metrics, log tails, spec, environment, tags and notes, each folded away."""
    with st.expander("Server metrics before and after the load"):
        metrics = server_metrics_table(run.server_metrics, run.backend)
        if metrics.empty:
            st.caption("No server metrics were scraped (the service exposes none, or the run did not reach the load).")
        else:
            st.dataframe(metrics, hide_index=True, width="stretch")
    with st.expander("Service log tails"):
        tails = (series_row.service_log_tails if series_row else None) or {}
        if not tails:
            st.caption("No log tails stored for this run.")
        for name, text in tails.items():
            st.markdown(f"**{plain(name)}**")
            st.code(without_polling(text) or "(empty: nothing but health and /metrics polling)", language=None)
    with st.expander("Spec (replayable)"):
        st.json(run.spec, expanded=True)
    with st.expander("Environment"):
        if run.environment:
            st.json(run.environment, expanded=True)
        else:
            st.caption("Not captured yet.")
    with session() as db_session:
        notes, actions = (
            history.list_run_notes(session=db_session, run_id=run.id),
            history.list_run_actions(session=db_session, run_id=run.id),
        )
    st.markdown("#### Tags and notes")
    show_plain(f"tags: {run.tags or '–'}", kind="caption")
    notes_thread(run.notes, notes)
    with st.expander("Who did what (audit trail)"):
        audit_trail(actions)


def _stored_run(run_id: int) -> tuple[Run, RunSeries | None, RunRecord] | None:
    """The run, its per-second series and its figures' record; None when it does not exist."""
    with session() as db_session:
        run = history.get_run(session=db_session, run_id=run_id)
        if run is None:
            return None
        return run, history.get_run_series(session=db_session, run_id=run_id), RunRecord.of(run)


def page() -> None:
    st.title("Run detail")
    show_flash()
    run_id = choose_run()
    if run_id is None:
        return
    stored = _stored_run(run_id)
    if stored is None:
        st.error(f"Run #{run_id} does not exist (deleted?). Pick another above.")
        return
    run, series_row, record = stored

    experiment = f" · experiment #{run.experiment_id} {run.experiment.name}" if run.experiment else ""
    if run.experiment and run.experiment.wall_time_ratio:
        experiment += f" (wall time {run.experiment.wall_time_ratio:.2f}x its measured seconds)"
    if run.status in (RunStatus.QUEUED, *RunStatus.ACTIVE):
        live_run(run.id)
    else:
        st.subheader(f"Run #{run.id} · {status_badge(run.status)}")
    show_plain(
        f"{run.backend} · {model_short_name(run.model)} · {run.workload} · {run.cell_label} · "
        f"repeat {run.repeat_index + 1}{experiment} · created {local_time(run.created_at)} by {run.launched_by}",
        kind="caption",
    )
    if run.status_reason:
        show_failure(run.status_reason, kind="error" if run.status == RunStatus.FAILED else "info")
    if run.measurement_warnings:
        show_plain(run.measurement_warnings, kind="warning")
    if run.experiment is not None and run.experiment.capacity:
        from pages.view.capacity_form import capacity_search_panel

        capacity_search_panel(run.experiment.id, key="detail_capacity")
    if run.status in (RunStatus.QUEUED, *RunStatus.ACTIVE):
        with st.expander("Spec (replayable)"):
            st.json(run.spec, expanded=True)
        return  # figures, charts and logs come once it has finished
    if run.source_tool:
        imported_caption(run)
    else:
        run_again_button(run)
    figures_section(run, record, series_row.series if series_row else None)
    foreign_figures_section(run)
    stored_details(run, series_row)
    baseline_panel(run)


page()
