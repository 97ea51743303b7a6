"""Charts laid out for any page width: each chart a fixed width in a row that wraps, so two sit
side by side at 1280 px and each gets the whole width at 800 px (never two squeezed halves)."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
import streamlit as st

from pages.view.figures import CHART_CONFIG

# Two fit beside each other in the main area at 1280 px with the sidebar open; one at 800 px.
CHART_WIDTH_PX = 395


def show_charts(figures: Sequence[go.Figure], *, key: str) -> None:
    """``figures`` in a wrapping row, each ``CHART_WIDTH_PX`` wide, keyed ``{key}_{index}``."""
    with st.container(horizontal=True, wrap=True, gap="small"):
        for index, figure in enumerate(figures):
            st.plotly_chart(figure, key=f"{key}_{index}", width=CHART_WIDTH_PX, config=CHART_CONFIG)
