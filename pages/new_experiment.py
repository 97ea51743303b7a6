"""New experiment: launch a seed preset (full or quick scale) or a grid of your own.

Launching only queues runs (rows in the database); the lab's worker executes them.
The page then switches to Runs, where the live view follows the running one.
"""

from __future__ import annotations

import streamlit as st

from lab.queue import experiments, long_status
from lab.specs.grid_form import check_grid_form
from lab.specs.schema import ExperimentSpec, SpecError, list_presets, load_preset
from lab.user_input.fields import UploadKind
from lab.workloads.input_files import DatasetError
from lab.workloads.uploads import list_uploads, record_upload, save_upload
from pages.common import RECOMMENDED_PRESET, RECOMMENDED_TEXT, RUNS_PAGE, engine, flash, session, settings, show_flash
from pages.view.grid_form import checked_launch, field_error, grid_form_fields
from pages.view.launch import experiment_run_specs, launch_button, overridden, overrides_box
from pages.view.long_experiments import long_experiments_table
from pages.view.members import current_member
from pages.view.page_guard import only_through_entry_file
from pages.view.text import plain, show_plain

only_through_entry_file()  # run on its own (not from the entry file), a page renders nothing

UPLOAD_KIND_LABELS: dict[UploadKind, str] = {
    "sharegpt": "ShareGPT (JSON array)",
    "jsonl": "requests (JSONL)",
    "trace": "trace (Mooncake JSONL, with timestamps)",
}


def launch(spec: ExperimentSpec, tags: str) -> None:
    """Queue ``spec`` and go to the Runs page."""
    with session() as db_session:
        experiment = experiments.enqueue_experiment(
            session=db_session, spec=spec, tags=tags, launched_by=current_member().name
        )
        count, experiment_id = len(experiment.runs), experiment.id
    st.session_state.pop("run_again_spec", None)
    flash(
        "success",
        f"Experiment #{experiment_id} queued: {count} run{'s' if count != 1 else ''}. "
        "The worker runs them one at a time; this page follows the running one.",
    )
    st.switch_page(RUNS_PAGE)


def preset_choice() -> tuple[str, bool, int]:
    """The preset (the recommended first experiment by default), its scale and repeats, in one row."""
    presets = list_presets()
    name_col, quick_col, repeats_col = st.columns([3, 2, 1])
    name = name_col.selectbox(
        "Preset",
        presets,
        key="preset_name",
        index=presets.index(RECOMMENDED_PRESET) if RECOMMENDED_PRESET in presets else 0,
        help=f"Recommended first: {RECOMMENDED_TEXT}.",
    )
    quick_col.write("")
    quick = quick_col.toggle(
        "Quick scale", value=True, key="preset_quick", help="Shorter cells for a small CPU machine."
    )
    repeats = repeats_col.number_input("Repeats per cell", min_value=1, max_value=100, value=1, key="preset_repeats")
    return name, quick, int(repeats)


def preset_section() -> None:
    """Pick one of the seed's presets, at full or quick scale: the estimate and Launch first,
    what it runs and the overrides below."""
    if not list_presets():
        st.warning("No presets found in lab/specs/presets/.")
        return
    name, quick, repeats = preset_choice()
    try:
        spec = load_preset(name, quick=quick, overrides=[("repeats", repeats)])
    except SpecError as error:
        show_plain(f"This preset cannot be used: {error}", kind="error")
        return
    launch_slot = st.container()
    show_plain(f"{spec.name}: {spec.description}", kind="caption")
    if spec.scale_note:
        show_plain(spec.scale_note, kind="caption")
    with st.expander("Change settings, tags, the grid"):
        overrides = overrides_box("preset_overrides")
        tags = st.text_input("Tags (comma separated)", key="preset_tags")
        changed = overridden(spec, overrides) if overrides is not None else None
        if changed is not None:
            st.json(
                {"grid": changed.grid, "repeats": changed.repeats, "base": changed.base.model_dump(mode="json")},
                expanded=False,
            )
    with launch_slot:
        if changed is None:
            st.button("Launch preset", type="primary", key="launch_preset", disabled=True)
        elif launch_button(experiment_run_specs(changed), label="Launch preset", key="launch_preset"):
            launch(changed, tags)


def grid_section() -> None:
    """Build a grid: backends x VUs (or arrival rates), with validation beside each field; its
    estimate once the fields are valid; overrides for any setting the fields lack."""
    errors: dict[str, str] = st.session_state.get("grid_errors", {})
    form = grid_form_fields(errors)
    tags = st.text_input("Tags (comma separated)", key="grid_tags")
    overrides = overrides_box("grid_overrides")
    field_error(errors, "form")
    spec, problems = check_grid_form(form)
    specs = experiment_run_specs(spec) if spec is not None else []
    if spec is None and problems:
        # The estimate needs a valid grid: say what stops it rather than leave a gap.
        show_plain(f"No estimate yet: {next(iter(problems.values()))}", kind="caption")
    if spec is not None and overrides:
        changed = overridden(spec, overrides)
        specs = experiment_run_specs(changed) if changed is not None else []
    clicked = (
        launch_button(specs, label="Launch grid", key="launch_grid")
        if specs
        else st.button("Launch grid", type="primary", key="launch_grid")
    )
    spec = checked_launch(form, errors, clicked=clicked)
    if spec is not None and overrides is not None:
        spec = overridden(spec, overrides)
        if spec is not None:
            launch(spec, tags)
    if errors:
        st.error("Fix the fields marked above, then launch again.")


def run_again_section(run_again: dict) -> None:
    """Run again: the run's spec as a one-cell experiment, every setting editable, then Launch."""
    with st.container(border=True):
        st.markdown(f"**Run again: run #{run_again['run_id']}'s spec**")
        st.caption("Change any setting below (key=value, one a line; the rest stays as the run had it), then launch.")
        overrides = overrides_box("run_again_overrides", value=run_again["lines"])
        base = ExperimentSpec(name=f"run #{run_again['run_id']} again", base=run_again["spec"])
        spec = overridden(base, overrides) if overrides is not None else None
        with st.expander("The whole spec"):
            st.json((spec or base).base.model_dump(mode="json"), expanded=False)
        left, right = st.columns([3, 1])
        with left:
            clicked = spec is not None and launch_button(
                experiment_run_specs(spec), label="Launch", key="run_again_launch"
            )
        if right.button("Close", key="run_again_close"):
            st.session_state.pop("run_again_spec", None)
            st.rerun()
        if clicked and spec is not None:
            launch(spec, "")


def upload_section() -> None:
    """Upload a ShareGPT JSON file or a JSONL of requests; it is checked, then stored under a generated name."""
    st.caption(
        f"Up to {settings().upload_max_bytes // 2**20} MiB. The file is checked before it is kept; "
        "it is stored under a generated name."
    )
    kind = st.radio(
        "File kind",
        list(UPLOAD_KIND_LABELS),
        horizontal=True,
        key="upload_kind",
        format_func=lambda upload_kind: UPLOAD_KIND_LABELS[upload_kind],
    )
    uploaded = st.file_uploader(
        "Dataset file", type=["json"] if kind == "sharegpt" else ["jsonl"], key=f"upload_file_{kind}"
    )
    if uploaded is not None and st.button("Check and save", key="upload_save"):
        try:
            saved = save_upload(
                data=uploaded.getvalue(),
                original_name=uploaded.name,
                kind=kind,
                upload_dir=settings().uploads_dir,
                max_bytes=settings().upload_max_bytes,
            )
        except DatasetError as error:
            show_plain(f"Not saved: {error}", kind="error")
        else:
            record_upload(saved)
            show_plain(
                f"{'Already stored' if saved.already_stored else 'Saved'} {saved.original_name}: {saved.items:,} "
                f"items, {saved.usable:,} usable. Choose it in the grid's workload field (Build a grid tab).",
                kind="success",
            )
            for note in saved.notes:
                show_plain(note, kind="info")
    stored = list_uploads(settings().uploads_dir, kind)
    if stored:
        show_plain("Stored: " + "; ".join(label for _, label in stored[:10]), kind="caption")


def reproduce_section() -> None:
    """Queue the seed's three experiments as a long experiment the worker drives; follow its claims
    as they form; write its report (interim until it ends)."""
    st.write(
        "Runs the seed's experiments 1 to 3 with the default model on this machine, then writes a report "
        "that sets the seed's tables and ours side by side and gives a verdict on each of its claims. "
        "The lab's worker drives it round by round: stopping the lab pauses it, and it goes on by itself when "
        "the lab starts again (a run cut by the stop is run again in its round)."
    )
    _queue_reproduction()
    st.divider()
    long_experiments_table()
    st.divider()
    _reproduction_report()


def _queue_reproduction() -> None:
    """The reproduction's scale, rounds and budget, and its queue button."""
    from lab.queue.long_experiments import DirtyTreeError, create_reproduction
    from lab.specs.schema import SCALES, UntilDecided

    scale = st.selectbox(
        "Scale",
        SCALES,
        index=SCALES.index("quick"),
        key="reproduce_scale",
        help="seed: the seed's 60 s cells; adapted: cells the seed's length cannot measure here run longer "
        "(from this machine's stored runs, up to 600 s; with none stored, the seed's length); quick: short "
        "cells for a small CPU box",
    )
    repeats = st.number_input("Repeats per cell", min_value=1, max_value=10, value=3, key="reproduce_repeats")
    until_decided = st.checkbox(
        "Until decided: add rounds for undecided claims after the planned ones",
        key="reproduce_until_decided",
        help="After the planned rounds, the worker adds one round at a time of only the cells whose claims are "
        "still undecided, until every claim is decided, the budget is spent or 20 rounds are reached. The "
        "intervals are widened so that looking after every round stays valid.",
    )
    budget_h = st.number_input(
        "Budget (hours of running, planned rounds included)",
        min_value=0.25,
        max_value=24.0,
        value=4.0,
        step=0.25,
        key="reproduce_budget_h",
        disabled=not until_decided,
        help="Counts only the time runs run: a pause (the lab stopped) costs nothing. No round starts that "
        "would pass it.",
    )
    allow_dirty = st.checkbox(
        "Allow uncommitted changes in the lab's code (the report will say so)", key="reproduce_allow_dirty"
    )
    refused = _reproduction_estimate(scale, int(repeats), float(budget_h) * 3600 if until_decided else None)
    if not st.button("Queue the reproduction", type="primary", key="reproduce_queue", disabled=refused):
        return
    output_dir = settings().data_dir / "reports" / f"reproduction-{scale}"
    try:
        long_id = create_reproduction(
            engine=engine(),
            scale=scale,
            repeats=int(repeats),
            until=UntilDecided(budget_s=float(budget_h) * 3600) if until_decided else None,
            report_dir=output_dir,
            allow_dirty=allow_dirty,
        )
    except DirtyTreeError as error:
        st.error(plain(str(error)), icon="⚠️")
        return
    flash("success", f"Long experiment #{long_id} queued: its claims show below as rounds finish.")
    st.rerun()


def _reproduction_estimate(scale: str, repeats: int, budget_s: float | None) -> bool:
    """The planned rounds' predicted time, and a warning when the budget is short; True when the
    budget is under one round (the button is then refused)."""
    from lab.analysis.measurability import DEFAULT_MAX_CELL_S
    from lab.queue.reproduction_plan import plan_reproduction

    plan = plan_reproduction(settings=settings(), scale=scale, repeats=repeats, max_cell_s=DEFAULT_MAX_CELL_S)
    estimate = f"Planned rounds: {plan.runs} runs, about {plan.predicted_wall_s / 60:,.0f} min"
    if budget_s is not None:
        estimate += f"; then rounds of the undecided claims, up to the budget ({budget_s / 3600:g} h in all)"
    st.caption(estimate)
    if scale == "adapted" and not any(" instead of " in cell.why for cell in plan.cells):
        unknown = sum(1 for cell in plan.cells if "no done run of this configuration" in cell.why)
        st.caption(
            "The adapted scale lengthens no cell here, so it runs like the seed's: "
            + (
                f"{unknown} of {len(plan.cells)} cells have no stored run on this machine to predict from "
                "(a quick reproduction stores them)."
                if unknown
                else "this machine's stored runs say the seed's lengths measure every cell."
            )
        )
    one_round_s = plan.predicted_wall_s / max(1, plan.repeats)
    if budget_s is not None and budget_s < one_round_s:
        st.warning(
            f"A budget of {budget_s / 3600:g} h is under one round's predicted {one_round_s / 3600:.1f} h.", icon="⚠️"
        )
        return True
    if budget_s is not None and budget_s < plan.predicted_wall_s:
        st.warning(
            f"The budget ends before the planned rounds' predicted {plan.predicted_wall_s / 3600:.1f} h: "
            "the last planned rounds may not run.",
            icon="⚠️",
        )
    return False


def _reproduction_report() -> None:
    """Write the report of the newest long experiment as it stands, and offer its files."""
    from lab.queue.long_status import write_report as write_long_experiment_report

    with session() as db_session:
        newest = next(iter(long_status.all_ids(db_session)), None)
    if newest is None:
        return
    if st.button(f"Write the report of #{newest} as it stands", key="reproduce_report"):
        output_dir = settings().data_dir / "reports" / f"long-{newest}"
        with st.spinner("Writing the report (charts are rendered to PNG too)..."):
            written = write_long_experiment_report(settings=settings(), long_id=newest, output_dir=output_dir)
        if written is not None:
            st.session_state["reproduction_report"] = str(written.parent)
    folder = st.session_state.get("reproduction_report")
    if folder:
        from pathlib import Path

        show_plain(f"Report written to {folder}", kind="success")
        st.download_button(
            "Download report.html",
            (Path(folder) / "report.html").read_bytes(),
            file_name="report.html",
            mime="text/html",
            key="reproduce_html",
        )


def page() -> None:
    st.title("New experiment")
    show_flash()
    st.caption("Launching queues runs; the lab's worker executes them one at a time and you follow them on Runs.")
    if st.session_state.get("run_again_spec"):
        run_again_section(st.session_state["run_again_spec"])
    preset_tab, grid_tab, upload_tab, reproduce_tab, capacity_tab = st.tabs(
        ["Preset", "Build a grid", "Upload", "Reproduce the seed", "Find capacity"]
    )
    with preset_tab:
        preset_section()
    with grid_tab:
        grid_section()
    with upload_tab:
        upload_section()
    with reproduce_tab:
        reproduce_section()
    with capacity_tab:
        from pages.view.capacity_form import find_capacity_section

        find_capacity_section()


page()
