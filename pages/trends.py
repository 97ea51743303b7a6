"""Trends: one figure of one configuration over time, run by run, each experiment's mean with
its 95% interval, the baseline marked, and each run's lab commit, engine version and model
hash in its hover, so a step change can be traced to what changed."""

from __future__ import annotations

import streamlit as st

from lab import baselines
from lab.analysis.regression import FIGURE_DIRECTIONS
from pages.common import session, show_flash
from pages.view.baseline import trend_figure, trend_table
from pages.view.names import header
from pages.view.page_guard import only_through_entry_file
from pages.view.tables import plural
from pages.view.text import show_plain

only_through_entry_file()  # run on its own (not from the entry file), a page renders nothing


def choose_configuration() -> baselines.KnownConfiguration | None:
    """The configuration to follow (those with a baseline first); None when no run is done."""
    with session() as db_session:
        configurations = baselines.known_configurations(session=db_session)
    if not configurations:
        st.info("No run has finished yet: a trend needs done runs. Launch one on New experiment.")
        return None
    by_key = {item["key"]: item for item in configurations}
    labels = {
        key: f"{'★ ' if item['has_baseline'] else ''}{item['label']} ({plural(item['runs'], 'run')})"
        for key, item in by_key.items()
    }
    if st.session_state.get("trends_configuration") not in by_key:
        st.session_state.pop("trends_configuration", None)  # a key from another database or a deleted run
    key = st.selectbox(
        "Configuration (★: has a baseline)",
        list(labels),
        format_func=lambda configuration: labels[configuration],
        key="trends_configuration",
        help="A configuration is a run spec without its seed.",
    )
    return by_key[key]


def page() -> None:
    st.title("Trends")
    show_flash()
    chosen = choose_configuration()
    if chosen is None:
        return
    figure = st.selectbox("Figure", list(FIGURE_DIRECTIONS), format_func=header, key="trends_figure")
    with session() as db_session:
        points = baselines.configuration_trend(session=db_session, configuration=chosen["configuration"], figure=figure)
    if not any(point.value is not None for point in points):
        show_plain(f"No run of this configuration measured {header(figure)}.", kind="info")
        return
    st.plotly_chart(trend_figure(points, figure), key="trends_chart")
    st.caption(
        "One point a done run, by when it was queued; bars: each experiment's mean with its 95% interval; "
        "stars and the band: the baseline's runs, their mean and its 95% interval. Hover a run for its "
        "lab commit, engine version and model hash."
    )
    st.dataframe(trend_table(points, figure), hide_index=True, width="stretch")


page()
