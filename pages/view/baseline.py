"""Baselines on the pages: mark a run or its experiment as the baseline of its configuration,
later runs against it (each headline figure's change with its 95% interval and whether it is
significant), the spec file download, and the Trends chart."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from db.models import Run, RunStatus
from lab import baselines
from lab.analysis.trends import ExperimentMean, TrendPoint, baseline_band, experiment_means
from lab.baselines import BaselineComparison, BaselineError, Subject
from lab.specs.configuration import configuration_key
from lab.specs.spec_files import experiment_spec_document, run_spec_document, spec_file_text
from pages.common import TRENDS_PAGE, flash, session
from pages.view.figures import readable
from pages.view.names import header
from pages.view.text import chart_label, show_plain


def _number(value: Any) -> str:
    return "–" if value is None else f"{value:,.4g}"


CHANGE_COLUMNS = ("later runs", "figure", "change", "verdict", "95% interval", "baseline", "later", "runs")


def change_frame(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """The change rows with human figure names and readable numbers."""
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    # The verdict right after what changed, so a narrow page still shows it without scrolling.
    frame = frame[[c for c in CHANGE_COLUMNS if c in frame] + [c for c in frame if c not in CHANGE_COLUMNS]]
    frame["figure"] = [header(name) for name in frame["figure"]]
    frame["baseline"] = [_number(value) for value in frame["baseline"]]
    frame["later"] = [_number(value) for value in frame["later"]]
    return frame


def comparison_block(comparison: BaselineComparison) -> None:
    """One configuration's baseline and its later runs' changes."""
    show_plain(
        f"{comparison.configuration_label} · baseline: {comparison.baseline_label} (runs "
        f"#{', #'.join(map(str, comparison.baseline_run_ids))})",
        kind="caption",
    )
    if not comparison.rows:
        st.caption("No later run of this configuration yet.")
        return
    st.dataframe(
        change_frame(comparison.rows),
        hide_index=True,
        width="stretch",
        key=f"baseline_changes_{comparison.configuration_key[:16]}",
    )


def mark(subject: Subject, *, clear: bool = False) -> None:
    """Mark (or unmark) ``subject`` as its configuration's baseline, then redraw with a message.
    Checked at the click: the member may still use the lab, and the subject's done runs are read now."""
    from pages.view.members import current_member

    member = current_member()
    if member.signed_in and not member.may_use_lab:
        flash("error", f"Cannot mark it: {member.name} is not a member of this lab; nothing changed.")
        st.rerun()
    try:
        with session() as db_session:
            if clear:
                count = baselines.clear_baselines(session=db_session, subject=subject)
                flash("success", f"Baseline removed from {count} configuration(s).")
            else:
                count = len(baselines.mark_baseline(session=db_session, subject=subject))
                flash("success", f"{subject} is now the baseline of {count} configuration(s).")
    except BaselineError as error:
        flash("error", f"Cannot mark it: {error}")
    st.rerun()


def spec_downloads(run: Run) -> None:
    """The run's (and its experiment's) spec file, to rerun with ``python -m lab run --spec``."""
    document = run_spec_document(
        run_id=run.id,
        stored_spec=run.spec,
        cell_label=run.cell_label,
        experiment_name=run.experiment.name if run.experiment else None,
    )
    # A row that wraps, each button as wide as its label: nothing cut at 800 px.
    row = st.container(horizontal=True, wrap=True, gap="small")
    row.download_button(
        "Run's spec file (JSON)",
        spec_file_text(document),
        file_name=f"run-{run.id}-spec.json",
        mime="application/json",
        key="download_run_spec",
        on_click="ignore",
    )
    if run.experiment is not None:
        row.download_button(
            f"Experiment #{run.experiment.id}'s spec file (JSON)",
            spec_file_text(experiment_spec_document(stored_spec=run.experiment.spec)),
            file_name=f"experiment-{run.experiment.id}-spec.json",
            mime="application/json",
            key="download_experiment_spec",
            on_click="ignore",
        )
    # A code block, not inline code: inline, the command broke at its hyphens on a narrow page.
    st.caption("Rerun a spec file, gated against this baseline (the README lists the figures):")
    st.code("python -m lab run --spec FILE --baseline auto --fail-on-regression FIGURE=PERCENT", language="bash")


def mark_buttons(run: Run, in_baseline: bool) -> None:
    """Mark the run, or its experiment, as the baseline; or unmark it."""
    row = st.container(horizontal=True, wrap=True, gap="small")
    if row.button(
        "Mark this run as the baseline",
        key="baseline_mark_run",
        help="The baseline of its configuration: the spec without its seed.",
    ):
        mark(Subject("run", run.id))
    if run.experiment is not None and row.button(
        f"Mark experiment #{run.experiment.id} as the baseline",
        key="baseline_mark_experiment",
        help="Each configuration it ran (one per grid cell) gets its done runs as the baseline.",
    ):
        mark(Subject("experiment", run.experiment.id))
    if in_baseline and row.button("Unmark the baseline", key="baseline_clear"):
        mark(Subject("run", run.id), clear=True)


def baseline_panel(run: Run) -> None:
    """Run detail: the spec file, the baseline of the run's configuration and later runs against it."""
    with session() as db_session:
        baseline = baselines.baseline_of_run(session=db_session, run=run)
        comparison = baselines.comparison_of(session=db_session, baseline=baseline) if baseline else None
    st.markdown("#### Baseline and spec file")
    spec_downloads(run)
    if comparison is None:
        st.caption("No baseline is marked for this run's configuration.")
    else:
        if run.id in comparison.baseline_run_ids:
            st.caption("This run is part of its configuration's baseline.")
        comparison_block(comparison)
    if run.status == RunStatus.DONE:
        mark_buttons(run, in_baseline=comparison is not None)
    else:
        st.caption("Only a done run can be a baseline.")
    if st.button("Open this configuration's trend", key="baseline_trend"):
        st.session_state["trends_configuration"] = configuration_key(run.spec)
        st.switch_page(TRENDS_PAGE)


def compare_baselines(records: Sequence[Mapping[str, Any]]) -> None:
    """Compare: the chosen runs' configurations that have a baseline, later runs against it."""
    with session() as db_session:
        comparisons = baselines.comparisons_for_runs(session=db_session, run_ids=[r["run_id"] for r in records])
    st.subheader("Against the baseline")
    if not comparisons:
        st.caption("No baseline is marked for these runs' configurations: mark one on Run detail, or with")
        st.code("python -m lab runs baseline ID", language="bash")
        return
    st.caption(
        "Each later experiment of a configuration against its baseline: the change of its mean, the 95% "
        "interval of the change (log scale, unpaired) and whether it is significant (the interval leaves "
        "out no change; under 3 runs a side, too few to tell)."
    )
    for comparison in comparisons:
        comparison_block(comparison)


HOVER = (
    "run #%{customdata[0]} · experiment %{customdata[1]}<br>%{x}<br>%{y:,.4g}<br>lab commit %{customdata[2]}"
    "<br>engine %{customdata[3]}<br>model hash %{customdata[4]}<extra></extra>"
)


def _experiment_means_trace(means: Sequence[ExperimentMean]) -> go.Scatter:
    """Each experiment's mean as a tick, its 95% interval as an error bar (none where unknown)."""
    return go.Scatter(
        x=[mean.created_at for mean in means],
        y=[mean.mean for mean in means],
        mode="markers",
        name="experiment mean, 95% CI",
        marker={"symbol": "line-ew-open", "size": 18},
        error_y={
            "type": "data",
            "symmetric": False,
            "array": [(m.ci95_high - m.mean) if m.ci95_high is not None and m.mean is not None else 0 for m in means],
            "arrayminus": [
                (m.mean - m.ci95_low) if m.ci95_low is not None and m.mean is not None else 0 for m in means
            ],
        },
        hovertemplate="experiment mean %{y:,.4g}<extra></extra>",
    )


# Runs queued together share one time: each gets its own x, this share of the chart's span apart.
SPREAD_SHARE = 0.02
MIN_SPREAD = timedelta(seconds=60)


def spread_times(points: Sequence[TrendPoint]) -> list[datetime | str]:
    """Each point's x: its queue time, with the runs of one time (one experiment, queued at
    once) spread apart around it, so three runs read as three dots and not one (as stored
    when a time cannot be read)."""
    try:
        times = [datetime.fromisoformat(point.created_at) for point in points]
        return list(_spread(times))
    except (TypeError, ValueError):  # a missing time, or zoned and unzoned mixed
        return [point.created_at for point in points]


def _spread(times: list[datetime]) -> list[datetime]:
    if not times:
        return []
    step = max((max(times) - min(times)) * SPREAD_SHARE, MIN_SPREAD)
    groups: dict[datetime, list[int]] = {}
    for index, moment in enumerate(times):
        groups.setdefault(moment, []).append(index)
    spread = list(times)
    for moment, indexes in groups.items():
        for rank, index in enumerate(indexes):
            spread[index] = moment + step * (rank - (len(indexes) - 1) / 2)
    return spread


def trend_figure(points: Sequence[TrendPoint], figure: str) -> go.Figure:
    """Each run's ``figure`` over time (the baseline's as stars, its mean and 95% band behind),
    each experiment's mean with its 95% interval; the hover says what each run ran with."""
    measured = [point for point in points if point.value is not None]
    chart = go.Figure()
    band = baseline_band(measured)
    if band is not None and band.ci95_low is not None:
        chart.add_hrect(y0=band.ci95_low, y1=band.ci95_high, opacity=0.15, line_width=0, fillcolor="green")
    if band is not None and band.mean is not None:
        chart.add_hline(y=band.mean, line_dash="dash", line_color="green", annotation_text="baseline mean")
    chart.add_trace(_experiment_means_trace(experiment_means(measured)))
    x_of = dict(zip((point.run_id for point in measured), spread_times(measured), strict=True))
    for in_baseline, name, symbol in ((False, "runs", "circle"), (True, "baseline runs", "star")):
        subset = [point for point in measured if point.in_baseline == in_baseline]
        if subset:
            chart.add_trace(
                go.Scatter(
                    x=[x_of[point.run_id] for point in subset],
                    y=[point.value for point in subset],
                    mode="markers",
                    name=name,
                    marker={"symbol": symbol, "size": 12 if in_baseline else 8},
                    customdata=[
                        [
                            point.run_id,
                            point.experiment_id or "–",
                            chart_label(point.lab_commit),
                            chart_label(point.engine_version),
                            point.model_hash,
                        ]
                        for point in subset
                    ],
                    hovertemplate=HOVER,
                )
            )
    # The charts' one layout: the legend in its own row above the plot, never over the time axis.
    return readable(chart, title=f"{header(figure)} over time", x_title="queued at", y_title=header(figure))


def trend_table(points: Sequence[TrendPoint], figure: str) -> pd.DataFrame:
    """The trend's points as a table: run, experiment, time, the figure and what each ran with."""
    return pd.DataFrame(
        [
            {
                "run": point.run_id,
                "experiment": point.experiment_id,
                "queued at": point.created_at[:19],
                header(figure): _number(point.value),
                "lab commit": point.lab_commit,
                "engine": point.engine_version,
                "model hash": point.model_hash,
                "baseline": "yes" if point.in_baseline else "",
            }
            for point in points
        ]
    )
