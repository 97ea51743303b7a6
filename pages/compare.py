"""Compare: runs or whole experiments side by side; the seed's tables with the seed's
figures beside ours, ratios, charts, cost per million output tokens and CSV downloads."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from db import store
from lab.analysis.compare import cell_comparisons, experiments_spanned, generic_table, run_record, split_warned
from lab.analysis.cost import cost_table
from lab.analysis.safe_csv import dataframe_to_csv, records_to_csv
from lab.analysis.seed import SEED_EXPERIMENTS, matching_seed_preset, seed_ratios
from pages.view.figures import (
    hit_rates_figure,
    latency_vs_vus_figure,
    overlaid_series_figure,
    throughput_vs_vus_figure,
)
from pages.common import NEW_EXPERIMENT_PAGE, session
from pages.view.baseline import compare_baselines
from pages.view.members import person_filter
from pages.view.names import display_frame, human_headers
from pages.view.tables import plural, ratios_rows, seed_comparison_table
from pages.view.text import chart_label, plain
from pages.view.page_guard import only_through_entry_file

only_through_entry_file()  # run on its own (not from the entry file), a page renders nothing

RECENT_RUNS_LISTED = 1000
MAX_OVERLAID_RUNS = 12


def choose_records() -> list[dict]:
    """The chosen experiments' or runs' records."""
    mode = st.radio("Compare", ["whole experiments", "individual runs"], horizontal=True, key="compare_mode")
    with session() as db_session:
        if mode == "whole experiments":
            experiments = store.list_experiments(session=db_session)
            names = {e.id: f"#{e.id} {e.name}" + (f" ({e.scale})" if e.preset else "") for e in experiments}
            # Default: the newest experiment with a finished run.
            finished = {r.experiment_id for r in store.list_runs(session=db_session, statuses=["done"],
                                                                  limit=RECENT_RUNS_LISTED)}
            default = next((eid for eid in names if eid in finished), None)
            chosen = st.multiselect("Experiments", list(names), default=[default] if default else [],
                                    format_func=names.get, key="compare_experiments")
            runs = store.list_runs(session=db_session, experiment_ids=chosen, newest_first=False) if chosen else []
        else:
            recent = store.list_runs(session=db_session, statuses=["done"], limit=RECENT_RUNS_LISTED)
            names = {r.id: f"#{r.id} {r.backend} {r.cell_label}" for r in recent}
            chosen = st.multiselect("Runs (done)", list(names), default=list(names)[:2], format_func=names.get,
                                    key="compare_runs")
            runs = store.list_runs(session=db_session, run_ids=chosen, newest_first=False) if chosen else []
        return [run_record(run) for run in runs]


def runs_to_average(records: list[dict]) -> list[dict] | None:
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
        worker = st.selectbox("Worker", ["all workers", *workers], key="compare_worker",
                              help="The runs came from several machines: compare one machine's at a time.")
        done = done if worker == "all workers" else [record for record in done if record["worker_name"] == worker]
    clean, warned = split_warned(done)
    include_warned = st.toggle("Include runs with measurement warnings", value=False, key="compare_include_warned",
                               help="Contention, an overloaded k6, dropped iterations, a count mismatch or a run "
                                    "too short for its latency: left out of the means by default.")
    if warned:
        st.caption(f"{len(warned)} run(s) with measurement warnings "
                   + ("included in the means." if include_warned or not clean else "left out of the means."))
    if not include_warned and clean:
        return clean
    if warned and not include_warned:
        st.warning("Every chosen run carries a measurement warning (see Run detail): shown anyway, read with care.")
    return done


def main_table(done: list[dict], preset: str | None, price_per_hour: float) -> pd.DataFrame:
    """Show the seed's table of ``preset`` (ours beside the seed's) or, without one, the generic table."""
    if preset:
        ran_on = "; ".join(sorted({f"{r['worker_name']}: {r['hardware']}" for r in done if r["hardware"]}))
        several = len({r["experiment_id"] for r in done}) > 1
        st.subheader(f"The seed's table ({plain(preset)}), ours beside the seed's")
        st.caption("`seed ...` columns are the published figures (RTX 4060, Qwen3-0.6B); "
                   "ours are means over repeats with their 95% confidence interval [low, high], of "
                   f"{plural(len(done), 'run')} from experiment{'s' if several else ''} "
                   f"{experiments_spanned(done)}; throughput is k6's (whole test, drain included, like the seed's), "
                   "steady throughput the load window only"
                   + (f", measured on {plain(ran_on)}." if ran_on else "."))
        table = seed_comparison_table(preset, done)
    else:
        st.subheader("Figures by backend and load")
        st.caption(f"Means over repeats of {plural(len(done), 'done run')} from experiments "
                   f"{experiments_spanned(done)} (the experiments column says which each row spans). "
                   "No single seed preset matches the choice, so no seed figures.")
        table = generic_table(done, price_per_hour=price_per_hour)
    st.dataframe(display_frame(table), hide_index=True, width="stretch")
    return table


def downloads(table: pd.DataFrame, records: list[dict]) -> None:
    """The shown table and the raw per-run records as CSV, machine or human column names."""
    human = st.toggle("Human column names in the CSV files", value=False, key="compare_csv_human",
                      help="Off: machine names (output_tok_per_s) for scripts. Either way numbers keep full precision.")
    table_csv = dataframe_to_csv(human_headers(table) if human else table)
    raw_frame = pd.DataFrame(records)
    raw_csv = dataframe_to_csv(human_headers(raw_frame)) if human else records_to_csv(records)
    # Kept for the page's tests, which cannot read a download's bytes.
    st.session_state["compare_table_csv"] = table_csv
    st.session_state["compare_raw_csv"] = raw_csv
    left, right = st.columns(2)
    left.download_button("Download this table (CSV)", table_csv, file_name="comparison.csv", mime="text/csv",
                         key="download_table", on_click="ignore")
    right.download_button("Download raw per-run data (CSV)", raw_csv, file_name="runs.csv", mime="text/csv",
                          key="download_raw", on_click="ignore")


def ratios_section(done: list[dict], preset: str | None) -> None:
    """The seed's ratios (of ``preset``, or of every seed experiment) and the one-setting comparisons."""
    st.subheader("Ratios")
    presets = [preset] if preset else list(SEED_EXPERIMENTS)
    rows = [row for name in presets for row in ratios_rows(seed_ratios(name, done)) if row["value"] is not None]
    if rows:
        st.dataframe(display_frame(pd.DataFrame(rows)), hide_index=True)
    else:
        st.caption("No ratio applies: they need the backends they compare (e.g. vLLM and naive at the same VUs).")
    significance = [row for figure in ("output_tok_per_s", "req_per_s")
                    for row in cell_comparisons(done, ("backend", "vus", "prompts"), figure)]
    if significance:
        st.caption("Cells that differ in one setting: the ratio of their means and Welch's t-test on the repeats "
                   "(significant at p < 0.05; under 3 repeats a side, n too small).")
        st.dataframe(display_frame(pd.DataFrame(significance)), hide_index=True)


def charts_section(done: list[dict]) -> None:
    """Throughput and latency by VUs, the first runs' output tok/s over time, cache hit rates."""
    st.subheader("Charts")
    charts = st.columns(2)
    charts[0].plotly_chart(throughput_vs_vus_figure(done), key="compare_throughput")
    charts[1].plotly_chart(latency_vs_vus_figure(done), key="compare_latency")
    overlaid_ids = [record["run_id"] for record in done][:MAX_OVERLAID_RUNS]
    with session() as db_session:
        series_by_label = {}
        for record in done[:MAX_OVERLAID_RUNS]:
            row = store.get_run_series(session=db_session, run_id=record["run_id"])
            if row is not None:
                label = chart_label(f"#{record['run_id']} {record['backend']} {record['cell_label']}")
                series_by_label[label] = row.series
    charts = st.columns(2)
    charts[0].plotly_chart(overlaid_series_figure(series_by_label, "output_tok_per_s",
                                                  title="Output tokens/s over time"), key="compare_series")
    hits = hit_rates_figure(done)
    if hits is not None:  # no cache involved: no chart of nothing
        charts[1].plotly_chart(hits, key="compare_hits")
    if len(done) > len(overlaid_ids):
        st.caption(f"Time series show the first {MAX_OVERLAID_RUNS} runs.")


def page() -> None:
    st.title("Compare")
    with session() as db_session:
        has_runs = bool(store.list_runs(session=db_session, statuses=["done"], limit=1))
    if not has_runs:
        st.info("Nothing to compare yet: no run has finished. Launch a seed preset on New experiment "
                "(the quick scale takes minutes), then come back.")
        st.page_link(NEW_EXPERIMENT_PAGE, label="New experiment", icon=":material/science:")
        return
    with session() as db_session:
        person = person_filter(st, store.run_launchers(session=db_session), key="compare_launched_by")
    records = [record for record in choose_records() if person is None or record["launched_by"] == person]
    done = runs_to_average(records)
    if done is None:
        return
    price_per_hour = st.number_input("Machine price per hour (any currency)", min_value=0.0, value=1.0, step=0.1,
                                     key="compare_price", help="What an hour of this hardware costs you.")
    preset = matching_seed_preset(done)
    table = main_table(done, preset, price_per_hour)
    downloads(table, records)
    ratios_section(done, preset)
    compare_baselines(done)
    st.subheader("Cost per million output tokens")
    st.dataframe(display_frame(cost_table(done, price_per_hour)), hide_index=True)
    charts_section(done)
    st.subheader("Throughput against latency (Pareto)")
    from pages.view.capacity_form import pareto_block

    pareto_block(done, key="compare_pareto")


page()
