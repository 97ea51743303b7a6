"""Runs: the history with filters and sorting, the running one live, and run actions.

The live view is a fragment that polls the database every few seconds while a run is
queued or active, and not at all otherwise (``run_every=None``).
"""

from __future__ import annotations

from datetime import UTC, datetime, time
from typing import Any

import streamlit as st

from db.models import RunStatus
from lab import history, run_actions
from lab.analysis.compare import RunRecord
from lab.queue.dispatch import queue_order
from lab.specs.schema import BACKENDS, list_presets
from pages.common import (
    COMPARE_PAGE,
    NEW_EXPERIMENT_PAGE,
    RECOMMENDED_TEXT,
    live_poll_interval,
    live_state,
    open_run_detail,
    session,
    show_flash,
    startup_facts,
)
from pages.view.imported import import_upload
from pages.view.live import panel_heading, render_phase
from pages.view.members import current_member, person_filter, run_permission
from pages.view.names import header
from pages.view.outage import view_survives_database_outage
from pages.view.page_guard import only_through_entry_file
from pages.view.result_card import render_result_card
from pages.view.tables import SORTABLE_COLUMNS, plural, runs_table, status_badge
from pages.view.text import plain, show_plain

only_through_entry_file()  # run on its own (not from the entry file), a page renders nothing

ALL = "all"


def live_panel(state: dict) -> None:
    """The active run's phase and figures (or the queue waiting for a worker, or a capacity
    search between two probes)."""
    run, queued = state["run"], state["queued"]
    if run is None:
        searches_panel(state.get("searches") or [])
        if queued:
            with st.container(border=True):
                st.info(
                    f"{plural(queued, 'run')} queued; waiting for the worker "
                    "(`python -m lab start` runs one beside the web lab)."
                )
                queue_line()
        return
    with st.container(border=True):
        st.markdown(panel_heading(run, queued))
        render_phase(run, startup=startup_facts(run) if run["status"] == RunStatus.STARTING else None)
        stop_buttons(run)
        if queued:
            queue_line()


def queue_line() -> None:
    """The queue in the order the workers take it: priority first (a long experiment's rounds
    have a lower one, so a single run queued later goes before them), then the oldest."""
    with session() as db_session:
        first, total = queue_order(session=db_session)
    if not first:
        return
    more = f", then {plural(total - len(first), 'more run')}" if total > len(first) else ""
    runs = ", ".join(f"#{run.run_id} {plain(run.cell_label)} (priority {run.priority})" for run in first)
    st.caption(f"Next in the queue: {runs}{more}.")


def stop_buttons(run: dict) -> None:
    """ "Cancel this run" and, when its experiment has more to run, "Stop the experiment"."""
    if run["cancel_requested"]:
        st.warning("Cancel requested; the worker is stopping the run.")
        return
    with session() as db_session:
        rest = (
            []
            if run["experiment_id"] is None
            else [
                other.id
                for other in history.list_runs(
                    session=db_session,
                    experiment_ids=[run["experiment_id"]],
                    statuses=[RunStatus.QUEUED, *RunStatus.ACTIVE],
                )
            ]
        )
    left, right = st.columns(2)
    permitted = disabled_unless(
        "cancel", [run.get("launched_by")], help="Stops this run; the rest of its experiment carries on."
    )
    if left.button("Cancel this run", key=f"cancel_live_{run['id']}", **permitted):
        cancel_runs([run["id"]], f"Cancel requested for run #{run['id']}.")
    if len(rest) > 1 and right.button(
        f"Stop experiment #{run['experiment_id']} ({plural(len(rest), 'run')} left)",
        key=f"stop_experiment_{run['experiment_id']}",
        **disabled_unless(
            "cancel", [run.get("launched_by")], help="Cancels this run and every queued run of its experiment."
        ),
    ):
        cancel_runs(rest, f"Experiment #{run['experiment_id']} stopped: {plural(len(rest), 'run')} cancelled.")


def cancel_runs(run_ids: list[int], message: str) -> None:
    """Ask to cancel ``run_ids`` (queued ones at once, a running one through its worker), then say so."""
    try:
        with session() as db_session:
            run_actions.cancel_runs(session=db_session, member=current_member(), run_ids=run_ids)
    except run_actions.PermissionDenied as refused:  # a forged click on a disabled control
        show_plain(f"Refused: {refused}", kind="error")
        return
    st.session_state["runs_message"] = message
    st.rerun()


def searches_panel(searches: list[dict]) -> None:
    """Capacity searches still probing: their driver queues one probe at a time."""
    for search in searches:
        with st.container(border=True):
            st.markdown(
                f"**Live: capacity search #{search['id']}** · {plain(search['state'])} · "
                f"{plural(search['probes'], 'probe')} so far"
            )
            st.caption(
                f"{plain(search['name'])}: the search queues its next probe as the last one ends; "
                "each probe shows here as a run while it runs."
            )


def runs_view(query: dict, sort_by: str, descending: bool) -> None:
    """The live panel, the alerts and the table, refreshed together while a run is pending
    (one fragment: panel, table and the sidebar's counts read the same state)."""
    polling = live_poll_interval(live_state(fresh=True))

    @st.fragment(run_every=polling)
    @view_survives_database_outage
    def view() -> None:
        state = live_state()
        if polling and not state["pending"]:
            st.rerun()  # the last run just ended: redraw everything once and stop polling
        show_flash()
        live_panel(state)
        with session() as db_session:
            card = history.finished_run_card(session=db_session)
        if card is not None:
            render_result_card(card)
        with session() as db_session:
            runs = history.list_runs(session=db_session, **query)
            records = [dict(RunRecord.of(run)) for run in runs]
            progress_by_run = {run.id: run.progress for run in runs if run.status in RunStatus.ACTIVE}
        as_the_sidebar_shows(records, progress_by_run, state)
        if not records:
            if any(value for key, value in query.items() if key != "limit"):
                st.info("No run matches these filters. Widen them (open Filters above).")
            else:
                st.info(
                    f"No runs yet. Start from the recommended first experiment on New experiment: {RECOMMENDED_TEXT}."
                )
                st.page_link(NEW_EXPERIMENT_PAGE, label="New experiment", icon=":material/science:")
            return
        table = runs_table(records, sort_by=sort_by, descending=descending, progress_by_run=progress_by_run)
        st.caption(
            plural(len(table), "run") + (" (limit reached: narrow the filters)" if len(table) >= query["limit"] else "")
        )
        event = st.dataframe(
            table, key="runs_table", on_select="rerun", selection_mode="multi-row", hide_index=True, width="stretch"
        )
        chosen = [int(table.iloc[row][header("run_id")]) for row in event.selection.rows if row < len(table)]
        if chosen != st.session_state.get("runs_table_chosen", []):
            # A selection made in the table drives the actions below it: redraw the whole page.
            st.session_state["runs_table_chosen"] = chosen
            st.session_state["runs_selected"] = chosen
            st.rerun()

    view()


def as_the_sidebar_shows(records: list[dict], progress_by_run: dict[int, Any], state: dict) -> None:
    """A pending run's phase as the live state read it (the sidebar and the panel show that
    reading): the table's own read is a moment newer and would disagree with them for a second."""
    for record in records:
        status = state.get("pending_statuses", {}).get(record["run_id"])
        if status is not None:
            record["status"] = status
    if state["run"] is not None:
        progress_by_run[state["run"]["id"]] = state["run"]["progress"]


def filters() -> dict:
    """The filter widgets; returns the keyword arguments for ``history.list_runs``."""
    with session() as db_session:
        experiment_choices = [(e.id, e.name) for e in history.list_experiments(session=db_session)]
        workers = history.run_worker_names(session=db_session)
        launchers = history.run_launchers(session=db_session)
    with st.expander("Filters", expanded=False):
        row1 = st.columns(4)
        experiment_names = dict(experiment_choices)
        experiment_id = row1[0].selectbox(
            "Experiment",
            [ALL] + [eid for eid, _ in experiment_choices],
            key="filter_experiment",
            format_func=lambda value: "all experiments" if value == ALL else f"#{value} {experiment_names[value]}",
        )
        preset = row1[1].selectbox("Preset", [ALL, *list_presets()], key="filter_preset")
        backends = row1[2].multiselect("Backend", BACKENDS, key="filter_backends")
        statuses = row1[3].multiselect("Status", RunStatus.ALL, key="filter_statuses", format_func=status_badge)
        row2 = st.columns(5)
        model = row2[0].text_input("Model contains", key="filter_model")
        tag = row2[1].text_input("Tag", key="filter_tag")
        dates = row2[2].date_input("Created between", value=[], key="filter_dates")
        limit = row2[3].number_input(
            "Show at most", min_value=10, max_value=100_000, value=2000, step=100, key="filter_limit"
        )
        worker = row2[4].selectbox("Worker", [ALL, *workers], key="filter_worker")
        launched_by = person_filter(st, launchers, key="filter_launched_by")
    created_after = created_before = None
    if isinstance(dates, (list, tuple)) and len(dates) == 2:
        created_after = datetime.combine(dates[0], time.min, tzinfo=UTC)
        created_before = datetime.combine(dates[1], time.max, tzinfo=UTC)
    return {
        "experiment_ids": None if experiment_id == ALL else [experiment_id],
        "preset": None if preset == ALL else preset,
        "backends": backends or None,
        "statuses": statuses or None,
        "model_contains": model.strip() or None,
        "tag": tag.strip() or None,
        "worker_name": None if worker == ALL else worker,
        "launched_by": launched_by,
        "created_after": created_after,
        "created_before": created_before,
        "limit": int(limit),
    }


def selection_actions(records: list[dict]) -> None:
    """Open, cancel, edit tags and notes, or delete the selected runs."""
    by_id = {record["run_id"]: record for record in records}
    selected = st.multiselect(
        "Selected runs",
        list(by_id),
        key="runs_selected",
        format_func=lambda rid: (
            f"#{rid} {by_id[rid]['backend']} {by_id[rid]['cell_label']} ({status_badge(by_id[rid]['status'])})"
        ),
        help="Select rows in the table or pick runs here.",
    )
    if not selected:
        st.caption("Select runs in the table (or above) to open, cancel, tag or delete them.")
        return
    first = by_id[selected[0]]
    buttons = st.columns(4)
    if buttons[0].button(f"Open run #{first['run_id']}", key="open_detail"):
        open_run_detail(first["run_id"])
    if buttons[3].button(
        f"Compare these {len(selected)}",
        key="compare_selected",
        disabled=len(selected) < 2,
        help="Open Compare with the selected runs: what differs between them first.",
    ):
        st.switch_page(COMPARE_PAGE, query_params={"runs": ",".join(str(rid) for rid in selected)})
    cancellable = [rid for rid in selected if by_id[rid]["status"] in (RunStatus.QUEUED, *RunStatus.ACTIVE)]
    if buttons[1].button(
        "Cancel",
        key="cancel_selected",
        **disabled_unless(
            "cancel",
            [by_id[rid]["launched_by"] for rid in cancellable],
            nothing=not cancellable,
            help="Queued runs are cancelled at once, a running one through its worker.",
        ),
    ):
        with session() as db_session:
            cancelled = run_actions.cancel_runs(session=db_session, member=current_member(), run_ids=cancellable)
        st.session_state["runs_message"] = f"Cancel requested for {plural(len(cancelled), 'run')}." + left_as_they_are(
            cancellable, cancelled, "ended since the page was drawn"
        )
        st.rerun()
    deletable = [rid for rid in selected if by_id[rid]["status"] not in RunStatus.ACTIVE]
    if buttons[2].button(
        "Delete…",
        key="delete_selected",
        **disabled_unless(
            "delete",
            [by_id[rid]["launched_by"] for rid in deletable],
            nothing=not deletable,
            help="A running run cannot be deleted; cancel it first.",
        ),
    ):
        st.session_state["confirm_delete"] = deletable
    delete_confirmation()
    notes_form(first)


def delete_confirmation() -> None:
    """The confirmation a Delete asked for."""
    pending_delete = st.session_state.get("confirm_delete")
    if pending_delete:
        st.warning(
            f"Delete {plural(len(pending_delete), 'run')} and their series for good? "
            f"({', '.join('#' + str(r) for r in pending_delete[:20])})"
        )
        yes, no = st.columns(2)
        if yes.button(f"Yes, delete {plural(len(pending_delete), 'run')}", type="primary", key="confirm_delete_yes"):
            with session() as db_session:
                deleted = run_actions.delete_runs(session=db_session, member=current_member(), run_ids=pending_delete)
            st.session_state.pop("confirm_delete", None)
            st.session_state.pop("runs_selected", None)
            st.session_state["runs_message"] = f"Deleted {plural(len(deleted), 'run')}." + left_as_they_are(
                pending_delete, deleted, "started since the page was drawn: cancel it first"
            )
            st.rerun()
        if no.button("Keep them", key="confirm_delete_no"):
            st.session_state.pop("confirm_delete", None)
            st.rerun()


def left_as_they_are(asked: list[int], done: list[int], why: str) -> str:
    """The runs an action, checked again at the click, left alone, and why (a stale page)."""
    left = [run_id for run_id in asked if run_id not in done]
    return f" Left as they are: {', '.join(f'#{run_id}' for run_id in left)} ({why})." if left else ""


def notes_form(first: dict) -> None:
    """Tags and notes of the first selected run."""
    with st.form(key=f"notes_{first['run_id']}"):
        st.markdown(f"**Tags and notes of run #{first['run_id']}** (the notes thread is on Run detail)")
        tags_value = st.text_input(
            "Tags (comma separated)",
            value=first.get("tags") or "",
            key=f"edit_tags_{first['run_id']}",
            **disabled_unless("tag", [first["launched_by"]]),
        )
        notes_value = st.text_area("Add a note", value="", key=f"edit_notes_{first['run_id']}")
        if st.form_submit_button("Save tags and notes"):
            with session() as db_session:
                if tags_value != (first.get("tags") or ""):
                    run_actions.set_tags(
                        session=db_session, member=current_member(), run_id=first["run_id"], tags=tags_value
                    )
                run_actions.add_note(
                    session=db_session, member=current_member(), run_id=first["run_id"], text=notes_value
                )
            st.session_state["runs_message"] = f"Saved tags and notes of run #{first['run_id']}."
            st.rerun()


def disabled_unless(action: str, launchers: list, *, nothing: bool = False, help: str | None = None) -> dict:
    """A control's ``disabled`` and ``help``: off when nothing applies or the member may not."""
    refused = next((d for d in (run_permission(action, who) for who in launchers) if not d.allowed), None)
    return {"disabled": nothing or refused is not None, "help": refused.reason if refused else help}


def page() -> None:
    st.title("Runs")
    message = st.session_state.pop("runs_message", None)
    if message:
        st.success(message)
    query = filters()
    import_upload()
    sort_col, order_col = st.columns([3, 1])
    sort_label = sort_col.selectbox("Sort by", list(SORTABLE_COLUMNS), key="runs_sort")
    descending = order_col.toggle("Descending", value=True, key="runs_descending")
    runs_view(query, SORTABLE_COLUMNS[sort_label], descending)
    with session() as db_session:
        records = [dict(RunRecord.of(run)) for run in history.list_runs(session=db_session, **query)]
    if records:
        try:
            selection_actions(records)
        except run_actions.PermissionDenied as refused:  # a forged click on a disabled control
            show_plain(f"Refused: {refused}", kind="error")


page()
