"""Capacity pages' blocks: the "Find capacity" form, a search shown live, the Pareto chart.

Presentation and input only: the plan, its checks and the search live in
``lab.queue.capacity_plan``; the charts in ``lab.report.capacity_section``.
"""

from __future__ import annotations

from typing import Any, Literal

import streamlit as st
from pydantic import ValidationError

from lab.analysis.capacity_search import CapacityError
from lab.analysis.slo import SloError
from lab.backends import get_backend, managed_backend_names
from lab.queue.capacity_plan import (
    CAPACITY_DEFAULTS,
    LOAD_DIMENSIONS,
    CapacityPlan,
    capacity_plan,
    capacity_preset_note,
    capacity_state,
    check_plan,
    create_experiment,
    default_max_load,
    list_capacity_presets,
    load_capacity_preset,
    start_search_in_background,
)
from lab.report.capacity_section import capacity_table, pareto_figure, search_figure
from lab.specs.schema import BACKENDS, SpecError, format_validation_error
from pages.common import RUNS_PAGE, flash, session
from pages.view.figures import CHART_CONFIG, by_backend, readable
from pages.view.launch import launch_button, overrides_box
from pages.view.members import current_member
from pages.view.names import display_name, header
from pages.view.outage import view_survives_database_outage
from pages.view.text import plain, show_plain

LIVE_REFRESH_S = 5.0


def _plan_from_form() -> CapacityPlan | None:
    """Build the plan from the form's widgets; shows the one-line reason when it cannot."""
    presets = ["(none: set it up below)", *list_capacity_presets()]
    preset = st.selectbox("Capacity preset", presets, key="capacity_preset")
    quick = st.toggle("Quick scale (short probes for a small CPU machine)", value=True, key="capacity_quick")
    try:
        if preset in list_capacity_presets():
            description, note = capacity_preset_note(preset, quick=quick)
            show_plain(description, kind="caption")
            if note:
                show_plain(note, kind="info")
            return load_capacity_preset(preset, quick=quick)
        return _plan_from_fields(quick)
    except (SpecError, CapacityError, SloError) as error:
        show_plain(f"This search cannot run: {error}", kind="error")
    except ValidationError as error:
        show_plain(f"This search cannot run: {format_validation_error(error)}", kind="error")
    return None


def _plan_from_fields(quick: bool) -> CapacityPlan | None:
    """The plan set up field by field (no preset); None while the settings box does not parse.
    Raises what :func:`capacity_plan` raises on a plan that cannot run."""
    backends = st.multiselect("Backends", BACKENDS, default=managed_backend_names()[:2], key="capacity_backends")
    target_url = None
    if any(not get_backend(name).managed for name in backends):
        target_url = st.text_input("Target URL (external server)", key="capacity_target_url") or None
    slo_text = st.text_input(
        "SLO (comma separated)",
        value="latency_p95_s<=10",
        key="capacity_slo",
        help="Limits on per-request figures: latency_p95_s<=10, ttft_p99_s<=1 (streamed runs), failure_rate<=0.01",
    )
    by_name = st.radio(
        "Load dimension",
        list(LOAD_DIMENSIONS),
        horizontal=True,
        key="capacity_by",
        format_func=lambda name: f"{LOAD_DIMENSIONS[name].load_kind} ({LOAD_DIMENSIONS[name].unit})",
    )
    by: Literal["vus", "rate"] = "rate" if by_name == "rate" else "vus"  # the radio offers these two
    defaults = CAPACITY_DEFAULTS["quick" if quick else "full"]
    columns = st.columns(5)
    min_load = columns[0].number_input(
        "Smallest load", value=float(LOAD_DIMENSIONS[by].default_min), key="capacity_min"
    )
    max_load = columns[1].number_input(
        "Largest load", value=float(default_max_load(by, quick=quick)), key="capacity_max"
    )
    max_probes = columns[2].number_input(
        "Probes per backend", value=int(defaults["max_probes"]), step=1, key="capacity_probes"
    )
    probe_s = columns[3].number_input("Seconds per probe", value=defaults["probe_s"], key="capacity_probe_s")
    repeats = columns[4].number_input("Repeats per probe", min_value=1, max_value=20, value=1, key="capacity_repeats")
    overrides = overrides_box("capacity_overrides")
    if not backends:
        raise CapacityError("choose at least one backend")
    if overrides is None:
        return None
    return capacity_plan(
        backends=backends,
        slo=[slo_text],
        by=by,
        quick=quick,
        min_load=min_load,
        max_load=max_load,
        max_probes=int(max_probes),
        probe_s=probe_s,
        repeats=int(repeats),
        target_url=target_url,
        settings=overrides or None,
    )


def find_capacity_section() -> None:
    """The "Find capacity" tab: per backend, the largest load that meets an SLO."""
    st.write(
        "Finds, per backend, the largest load that meets an SLO: the load grows geometrically until the "
        "SLO fails or the backend saturates, then bisects. Every probe is a run of one experiment; "
        "follow the search on Run detail."
    )
    plan = _plan_from_form()
    if plan is None:
        return
    try:
        check_plan(plan)
    except (CapacityError, SloError) as error:
        show_plain(f"This search cannot run: {error}", kind="error")
        return
    st.caption(
        f"SLO {plain(str(plan.parsed_slo()))}; the search stops early once it has found the limit, "
        "so the estimate below is the most it can take."
    )
    if launch_button(probe_specs(plan), label="Find capacity", key="capacity_launch"):
        with session() as db_session:
            experiment_id = create_experiment(session=db_session, plan=plan, launched_by=current_member().name)
        start_search_in_background(experiment_id)
        flash("success", f"Capacity search #{experiment_id} started: it queues one probe at a time.")
        st.switch_page(RUNS_PAGE)


def probe_specs(plan: CapacityPlan) -> list[dict[str, Any]]:
    """The runs a search queues at most: every backend's probes and repeats, at the largest load."""
    base = plan.base.model_dump(mode="json")
    load = {**base["load"], "duration_s": plan.probe_s}
    return [
        {**base, "backend": backend, "load": load}
        for backend in plan.backends
        for _ in range(plan.max_probes * plan.repeats)
    ]


def _search_state(experiment_id: int) -> dict[str, Any] | None:
    with session() as db_session:
        return capacity_state(session=db_session, experiment_id=experiment_id)


def _render_search(experiment_id: int, key: str) -> None:
    state = _search_state(experiment_id)
    if state is None:
        return
    st.markdown(f"#### Capacity search #{experiment_id} ({plain(state.get('state', ''))})")
    figure_name = state.get("slo_figure") or ""
    chart = readable(
        search_figure(state),
        title="The probes: green passed the SLO, red did not; numbers give the order",
        x_title=f"load ({state.get('unit', '')})",
        y_title=header(figure_name) if figure_name else "SLO figure",
        height=400,
    )
    st.plotly_chart(chart, key=f"{key}_search", config=CHART_CONFIG)
    st.dataframe(capacity_table(state), hide_index=True, width="stretch")


def capacity_search_panel(experiment_id: int, key: str) -> None:
    """A search as it stands: each probe a point (pass/fail), the limit as a line, results so
    far; redrawn every few seconds while the search runs."""
    state = _search_state(experiment_id)
    if state is None:
        return
    if state.get("state") == "done":
        _render_search(experiment_id, key)
        return
    st.fragment(view_survives_database_outage(lambda: _render_search(experiment_id, key)), run_every=LIVE_REFRESH_S)()


def pareto_block(records: list[dict[str, Any]], key: str) -> None:
    """Throughput against an SLO latency figure, one curve per backend across its loads (per
    series when the records carry one: :mod:`pages.view.series`)."""
    figures = ["latency_p95_s", "latency_p99_s", "latency_p50_s", "latency_avg_s", "latency_max_s"]
    figure = st.selectbox("SLO latency figure", figures, key=f"{key}_figure", format_func=header)
    chart = by_backend(
        pareto_figure(records, figure, series="series" if any("series" in r for r in records) else "backend"),
        x_title=header(figure),
        y_title=header("req_per_s"),
        title=f"Requests/s against {display_name(figure).label} (labels: the load)",
    )
    st.plotly_chart(chart, key=f"{key}_chart", config=CHART_CONFIG)
