"""Compare: what differs between the chosen runs first (every setting that is not the same
in all of them), then their figures: the seed's table beside ours, ratios only between cells
one setting apart (any other pair side by side without one, saying why), cost, charts and
CSV downloads.

Opened from Runs' "Compare these" with ``?runs=3,5``; otherwise the newest experiment's runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import streamlit as st

from lab import history
from lab.analysis.compare import LAB_SOURCE, RunRecord, experiments_spanned, generic_table, split_warned
from lab.analysis.cost import cost_table
from lab.analysis.run_diff import CellPair, cell_pairs, recorded_by_all, setting_values_differ_only_in, settings_diff
from lab.analysis.safe_csv import dataframe_to_csv
from lab.analysis.seed import matching_seed_preset, seed_ratios
from lab.measurement.results import RunResults
from lab.specs.schema import load_preset
from pages.common import NEW_EXPERIMENT_PAGE, session
from pages.view.baseline import compare_baselines
from pages.view.charts import CHART_WIDTH_PX
from pages.view.compare_picker import DEFAULT_TEXT, default_choice, run_labels
from pages.view.figures import (
    CHART_CONFIG,
    hit_rates_figure,
    latency_vs_vus_figure,
    overlaid_series_figure,
    req_per_s_vs_vus_figure,
    throughput_vs_vus_figure,
)
from pages.view.members import person_filter
from pages.view.names import csv_frame, display_frame, display_name, header, setting_label, setting_value
from pages.view.page_guard import only_through_entry_file
from pages.view.semantic_chart import semantic_block
from pages.view.series import LOAD_AXIS, NO_AXIS, VUS_AXIS, run_line_label, with_series
from pages.view.tables import interval_text, plural, ratios_rows, seed_comparison_table
from pages.view.text import chart_label, plain, show_plain

only_through_entry_file()  # run on its own (not from the entry file), a page renders nothing

RECENT_RUNS_LISTED = 1000
MAX_OVERLAID_RUNS = 12
MAX_DIFF_COLUMNS = 12
MAX_PAIRS_SHOWN = 30
# The figures a pair of cells is compared on.
PAIR_FIGURES = ("output_tok_per_s", "req_per_s", "latency_p95_s")


@dataclass
class Chosen:
    """The chosen runs: their records and their stored specs (by run id)."""

    records: list[RunRecord]
    specs: dict[int, dict]

    def specs_of(self, records: Sequence[Mapping[str, Any]]) -> list[dict]:
        return [self.specs.get(record["run_id"]) or {} for record in records]


def apply_link() -> None:
    """``?runs=3,5`` (Runs' "Compare these") chooses those runs, once per link."""
    link = st.query_params.get("runs")
    if not link or st.session_state.get("compare_link_applied") == link:
        return
    st.session_state["compare_link_applied"] = link
    st.session_state["compare_mode"] = "individual runs"
    st.session_state["compare_runs"] = [int(part) for part in link.split(",") if part.strip().isdigit()]


def choose_runs(person: str | None) -> Chosen:
    """The mode and the experiments or runs chosen (launched by ``person`` when named); their
    records and specs. Both modes start from one default (pages.view.compare_picker), said on the page."""
    apply_link()
    mode = st.radio("Compare", ["whole experiments", "individual runs"], horizontal=True, key="compare_mode")
    with session() as db_session:
        done = [
            run
            for run in history.list_runs(session=db_session, statuses=["done"], limit=RECENT_RUNS_LISTED)
            if person is None or run.launched_by == person
        ]
        default = default_choice(done)
        if mode == "whole experiments":
            experiments = history.list_experiments(session=db_session)
            names = {e.id: f"#{e.id} {e.name}" + (f" ({e.scale})" if e.preset else "") for e in experiments}
            chosen = st.multiselect(
                "Experiments",
                list(names),
                default=[eid for eid in default.experiment_ids if eid in names],
                format_func=lambda option: names[option],
                key="compare_experiments",
            )
            runs = history.list_runs(session=db_session, experiment_ids=chosen, newest_first=False) if chosen else []
        else:
            linked = [rid for rid in st.session_state.get("compare_runs", []) if rid not in {r.id for r in done}]
            extra = history.list_runs(session=db_session, run_ids=linked) if linked else []
            names = run_labels([*done, *extra])
            if "compare_runs" in st.session_state:  # a link may name runs deleted since
                st.session_state["compare_runs"] = [rid for rid in st.session_state["compare_runs"] if rid in names]
            chosen = st.multiselect(
                "Runs",
                list(names),
                default=None if "compare_runs" in st.session_state else default.run_ids,
                format_func=lambda option: names[option],
                key="compare_runs",
                help="Done runs, each named by its backend, its load and what differs from the runs listed "
                "beside it; runs ticked on Runs too.",
            )
            runs = history.list_runs(session=db_session, run_ids=chosen, newest_first=False) if chosen else []
        st.caption(DEFAULT_TEXT)
        runs = [run for run in runs if person is None or run.launched_by == person]
        return Chosen([RunRecord.of(run) for run in runs], {run.id: run.spec for run in runs})


def diff_section(chosen: Chosen) -> None:
    """Every setting that differs between the chosen runs, one column per run (per cell when many)."""
    st.subheader("What differs between the chosen runs")
    records = chosen.records
    rows = settings_diff([(record["run_id"], chosen.specs.get(record["run_id"])) for record in records])
    imported = [record["run_id"] for record in records if record.get("source") not in (None, LAB_SOURCE)]
    rows, unrecorded, tool_only = recorded_by_all(rows, imported)
    if unrecorded or tool_only:
        st.caption(
            f"Imported: {plural(unrecorded, 'setting')} of the lab's not recorded by the imported run's tool"
            + (f", {plural(tool_only, 'setting')} only the tool records" if tool_only else "")
            + "; left out, so only the settings every chosen run has are compared."
        )
    if len(records) < 2:
        st.caption("One run chosen: nothing to set beside it. Choose two or more.")
        return
    if not rows:
        st.caption(
            f"The {plural(len(records), 'chosen run')} have the same settings (their random seeds aside): "
            "repeats of one cell."
        )
        return
    shown = records[:MAX_DIFF_COLUMNS]
    labels = {record["run_id"]: f"#{record['run_id']} {record['backend']}" for record in shown}
    table = pd.DataFrame(
        [
            {
                "setting": setting_label(row["setting"]),
                **{labels[rid]: setting_value(row[rid], row["setting"]) for rid in labels},
            }
            for row in rows
        ]
    )
    st.caption(
        f"{plural(len(rows), 'setting')} {'differs' if len(rows) == 1 else 'differ'}: "
        + ", ".join(setting_label(row["setting"]) for row in rows)
        + ". Every other setting is the same."
        + (f" Columns show the first {MAX_DIFF_COLUMNS} runs." if len(records) > MAX_DIFF_COLUMNS else "")
    )
    st.dataframe(table, hide_index=True, width="stretch", key="compare_diff")


def runs_to_average(records: Sequence[Mapping[str, Any]]) -> Sequence[Mapping[str, Any]] | None:
    """The done runs the means use: one worker's if asked, without warned runs unless asked;
    None (after saying why) when none of the chosen runs is done."""
    done = [record for record in records if record["status"] == "done"]
    if not done:
        st.info("None of the chosen runs is done yet. Pick others, or wait for the queue (see Runs).")
        return None
    if len(done) < len(records):
        st.caption(f"{plural(len(records) - len(done), 'chosen run')} not done: left out of the figures.")
    workers = sorted({record["worker_name"] for record in done if record["worker_name"]})
    if len(workers) > 1:
        worker = st.selectbox(
            "Worker",
            ["all workers", *workers],
            key="compare_worker",
            help="The runs came from several machines: compare one machine's at a time.",
        )
        done = done if worker == "all workers" else [record for record in done if record["worker_name"] == worker]
    return without_warned(done)


def without_warned(done: Sequence[Mapping[str, Any]]) -> Sequence[Mapping[str, Any]]:
    """Runs with measurement warnings are shown with their warnings, not hidden (a busy machine warns
    every native run, and hiding them left only an imported one); a toggle leaves them out."""
    clean, warned = split_warned(done)
    leave_out = st.toggle(
        "Leave out runs with measurement warnings",
        value=False,
        key="compare_leave_out_warned",
        help="Contention, an overloaded k6, dropped iterations, a count mismatch or a run too short for its "
        "latency: in the means by default, each named below with its warning.",
    )
    if not warned:
        return done
    if leave_out and clean:
        st.caption(f"{plural(len(warned), 'run')} with measurement warnings left out of the means.")
        return clean
    lines = "; ".join(
        f"#{record['run_id']}: {str(RunResults.of_record(record).measurement_warnings).split('; ')[0]}"
        for record in warned[:6]
    )
    more = f" and {len(warned) - 6} more" if len(warned) > 6 else ""
    if leave_out:
        st.warning("Every chosen run carries a measurement warning, so the means use them all: read them with care.")
    show_plain(
        f"{plural(len(warned), 'run')} in the means {'carries' if len(warned) == 1 else 'carry'} a measurement "
        f"warning (read with care): {lines}{more}.",
        kind="caption",
    )
    return done


def main_table(done: Sequence[Mapping[str, Any]], preset: str | None, price_per_hour: float) -> pd.DataFrame:
    """Show the seed's table of ``preset`` (ours beside the seed's) or, without one, the generic table."""
    if preset:
        ran_on = "; ".join(sorted({f"{r['worker_name']}: {r['hardware']}" for r in done if r["hardware"]}))
        several = len({r["experiment_id"] for r in done}) > 1
        st.subheader(f"The seed's table ({plain(preset)}), ours beside the seed's")
        st.caption(
            "`seed ...` columns are the published figures (RTX 4060, Qwen3-0.6B); "
            "ours are means over repeats with their 95% confidence interval [low, high], of "
            f"{plural(len(done), 'run')} from experiment{'s' if several else ''} "
            f"{experiments_spanned(done)}; throughput is k6's (whole test, drain included, like the seed's), "
            "steady throughput the load window only" + (f", measured on {plain(ran_on)}." if ran_on else ".")
        )
        table = seed_comparison_table(preset, done)
    else:
        st.subheader("Figures by backend and load")
        st.caption(
            f"Means over repeats of {plural(len(done), 'done run')} from experiments "
            f"{experiments_spanned(done)} (the experiments column says which each row spans). "
            "No single seed preset matches the choice, so no seed figures."
        )
        table = generic_table(done, price_per_hour=price_per_hour)
    st.dataframe(display_frame(table), hide_index=True, width="stretch", key="compare_table")
    return table


def downloads(table: pd.DataFrame, records: Sequence[Mapping[str, Any]]) -> None:
    """The shown table and the raw per-run records as CSV, machine or human column names;
    missing values are empty cells either way."""
    human = st.toggle(
        "Human column names in the CSV files",
        value=False,
        key="compare_csv_human",
        help="Off: machine names (output_tok_per_s) for scripts. Either way numbers keep full precision.",
    )
    table_csv = dataframe_to_csv(csv_frame(table, human=human))
    raw_csv = dataframe_to_csv(csv_frame(pd.DataFrame(records), human=human))
    # Kept for the page's tests, which cannot read a download's bytes.
    st.session_state["compare_table_csv"] = table_csv
    st.session_state["compare_raw_csv"] = raw_csv
    left, right = st.columns(2)
    left.download_button(
        "Download this table (CSV)",
        table_csv,
        file_name="comparison.csv",
        mime="text/csv",
        key="download_table",
        on_click="ignore",
    )
    right.download_button(
        "Download raw per-run data (CSV)",
        raw_csv,
        file_name="runs.csv",
        mime="text/csv",
        key="download_raw",
        on_click="ignore",
    )


def seed_ratio_section(done: Sequence[Mapping[str, Any]], chosen: Chosen, preset: str | None) -> bool:
    """The seed's ratios when the runs come from one seed preset and differ only along its grid;
    True when shown."""
    if not preset:
        return False
    axes = list(load_preset(preset).grid)
    others = setting_values_differ_only_in(done, chosen.specs_of(done), axes)
    if others:
        st.caption(
            "The seed's ratios are left out: besides the seed's own axes the runs also differ in "
            + ", ".join(setting_label(name) for name in others)
            + "."
        )
        return False
    rows = [row for row in ratios_rows(seed_ratios(preset, done)) if row["value"] is not None]
    if not rows:
        return False
    st.caption(
        "The seed's ratios over our runs (each cell one setting apart from the other), "
        "with their 95% interval over the repeats."
    )
    frame = pd.DataFrame(rows)
    st.dataframe(display_frame(frame), hide_index=True, width="stretch", key="compare_seed_ratios")
    return True


def ratios_section(done: Sequence[Mapping[str, Any]], chosen: Chosen, preset: str | None) -> None:
    """Ratios only between cells one setting apart; other pairs side by side with the reason."""
    st.subheader("Ratios")
    seed_shown = seed_ratio_section(done, chosen, preset)
    pairs = cell_pairs(done, chosen.specs_of(done), PAIR_FIGURES)
    comparable = [pair for pair in pairs if pair.comparable]
    apart = [pair for pair in pairs if not pair.comparable]
    if comparable:
        st.caption(
            "Cells one setting apart, every other setting the same: the ratio, second over first (the "
            "geometric mean of per-round ratios when both ran the same rounds, else the ratio of means: the "
            "centre of its 95% interval, as in the reports), and Welch's t-test on the repeats (under 3 "
            "repeats a side: n too small)."
        )
        st.dataframe(
            display_frame(pd.DataFrame(ratio_rows(comparable))), hide_index=True, width="stretch", key="compare_ratios"
        )
    if apart:
        st.caption(
            "No ratio between these cells: they differ in more than one setting, so a ratio would mix "
            "the effects. Their means side by side:"
        )
        st.dataframe(
            display_frame(pd.DataFrame(side_by_side_rows(apart[:MAX_PAIRS_SHOWN]))),
            hide_index=True,
            width="stretch",
            key="compare_no_ratio",
        )
    if not (seed_shown or comparable):
        st.info(
            "No ratio applies: a ratio needs two cells that differ in one setting and agree on all others"
            + (" (the chosen runs are all one cell)." if not pairs else ".")
        )


def cell_text(pair: CellPair, which: str) -> str:
    """A cell by its runs: "runs #3, #4"."""
    cell = pair.first if which == "first" else pair.second
    return ("run " if len(cell.run_ids) == 1 else "runs ") + ", ".join(f"#{rid}" for rid in cell.run_ids[:8])


def ratio_rows(pairs: list[CellPair]) -> list[dict]:
    """One row per comparable pair and figure, in words."""
    rows = []
    for pair in pairs:
        ((name, low, high),) = pair.differences
        for found in pair.ratios:
            rows.append(
                {
                    "what_changes": f"{setting_label(name)} {setting_value(low, name)} → {setting_value(high, name)}",
                    "figure": display_name(found.figure).header,
                    "ratio": f"{found.ratio:,.2f}x" if found.ratio is not None else None,
                    # The verdict before the interval: on screen at 800 px.
                    "significance": found.significance,
                    "ratio_interval": interval_text(found),
                    "first": cell_text(pair, "first"),
                    "second": cell_text(pair, "second"),
                }
            )
    return rows


def side_by_side_rows(pairs: list[CellPair]) -> list[dict]:
    """One row per pair of cells more than one setting apart: what differs, and their means."""
    rows = []
    for pair in pairs:
        row: dict[str, str | None] = {
            "first": cell_text(pair, "first"),
            "second": cell_text(pair, "second"),
            "differ_in": "; ".join(
                f"{setting_label(name)} {setting_value(a, name)} vs {setting_value(b, name)}"
                for name, a, b in pair.differences
            ),
        }
        for figure in PAIR_FIGURES:
            for which, cell in (("first", pair.first), ("second", pair.second)):
                values = [record[figure] for record in cell.records if record.get(figure) is not None]
                row[f"{header(figure)}, {which}"] = (
                    None if not values else f"{sum(values) / len(values):,.{display_name(figure).decimals or 0}f}"
                )
        rows.append(row)
    return rows


def charts_section(done: Sequence[Mapping[str, Any]], chosen: Chosen) -> None:
    """Throughput, requests and latency by VUs, the runs' output tok/s over time, cache hit rates,
    the Pareto chart: a line joins only runs that differ in the chart's own axis (pages.view.series)."""
    st.subheader("Charts")
    specs = chosen.specs_of(done)
    by_vus = with_series(done, specs, VUS_AXIS)
    charts = {
        "compare_throughput": throughput_vs_vus_figure(by_vus),
        "compare_requests": req_per_s_vs_vus_figure(by_vus),
        "compare_latency": latency_vs_vus_figure(by_vus),
        "compare_hits": hit_rates_figure(done),
    }
    if len({record["series"] for record in by_vus}) > len({record["backend"] for record in by_vus}):
        st.caption(
            "A line joins only runs that differ in the chart's own axis: runs that differ in more "
            "are separate series, each named by what else differs."
        )
    with st.container(horizontal=True, wrap=True, gap="small"):
        for key, figure in charts.items():
            if figure is not None:  # no cache involved: no chart of nothing
                st.plotly_chart(figure, key=key, width=CHART_WIDTH_PX, config=CHART_CONFIG)
    smooth_s = 5 if st.toggle("Smooth the per-second series (5 s moving average)", key="compare_smooth") else 1
    one_by_one = with_series(done, specs, NO_AXIS)
    with session() as db_session:
        series_by_run = {}
        for record in one_by_one[:MAX_OVERLAID_RUNS]:
            row = history.get_run_series(session=db_session, run_id=record["run_id"])
            if row is not None:
                label = chart_label(run_line_label(record, record["series"]))
                series_by_run[label] = (record["backend"], row.series)
    st.plotly_chart(
        overlaid_series_figure(series_by_run, "output_tok_per_s", title="Output tokens/s over time", smooth_s=smooth_s),
        key="compare_series",
        config=CHART_CONFIG,
    )
    if len(done) > MAX_OVERLAID_RUNS:
        st.caption(f"Time series show the first {MAX_OVERLAID_RUNS} runs.")
    st.subheader("Throughput against latency (Pareto)")
    from pages.view.capacity_form import pareto_block

    pareto_block(with_series(done, specs, LOAD_AXIS), key="compare_pareto")
    semantic_block([record["run_id"] for record in done])


def page() -> None:
    st.title("Compare")
    with session() as db_session:
        has_runs = bool(history.list_runs(session=db_session, statuses=["done"], limit=1))
    if not has_runs:
        st.info(
            "Nothing to compare yet: no run has finished. Launch a seed preset on New experiment "
            "(the quick scale takes minutes), then come back."
        )
        st.page_link(NEW_EXPERIMENT_PAGE, label="New experiment", icon=":material/science:")
        return
    with session() as db_session:
        person = person_filter(st, history.run_launchers(session=db_session), key="compare_launched_by")
    chosen = choose_runs(person)
    diff_section(chosen)
    done = runs_to_average(chosen.records)
    if done is None:
        return
    price_per_hour = st.number_input(
        "Machine price per hour (any currency)",
        min_value=0.0,
        value=1.0,
        step=0.1,
        key="compare_price",
        help="What an hour of this hardware costs you.",
    )
    match = matching_seed_preset(done)
    if match.why_not:
        st.caption(f"The seed's table is not shown: {plain(match.why_not)}.")
    preset = match.preset if match.applies else None
    table = main_table(done, preset, price_per_hour)
    downloads(table, chosen.records)
    ratios_section(done, chosen, preset)
    compare_baselines(done)
    st.subheader("Cost per million output tokens")
    st.dataframe(display_frame(cost_table(done, price_per_hour)), hide_index=True, key="compare_cost")
    charts_section(done, chosen)


page()
