"""Compare's semantic-cache chart: hit rate against false-hit rate per threshold
(:func:`lab.report.semantic_cache.tradeoff_figure`), shown when a compared run ran the semantic tier."""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

from lab.report.semantic_cache import sweep_points, tradeoff_figure
from pages.common import session
from pages.view.figures import CHART_CONFIG


def semantic_block(run_ids: Sequence[int]) -> None:
    """The chart and a line on how to read it; nothing when no run ran the semantic tier."""
    with session() as db_session:
        points = sweep_points(session=db_session, run_ids=run_ids)
    figure = tradeoff_figure(points)
    if figure is None:
        return
    st.subheader("Semantic cache: hit rate against false hits (Pareto)")
    st.plotly_chart(figure, key="compare_semantic", config=CHART_CONFIG)
    st.caption(
        "Each run at its hit rate (exact and semantic hits over the requests looked up) and its false-hit rate "
        "(verified semantic hits whose fresh answer's text differed; bars: 95% Wilson interval). The exact cache "
        "and the cache off have no false hit by construction. The dotted line joins the thresholds no other run "
        "beats on both."
    )
