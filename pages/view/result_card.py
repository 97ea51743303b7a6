"""The result card of a finished run on Runs: what the live panel turns into when the run ends.

Its status, the headline figures with their units, its warnings or failure reason, and links
to its Run detail and to Compare (with its experiment's done runs chosen).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st

from db.figures import RunFigures, figure_by
from lab.measurement.results import RunResults
from pages.common import COMPARE_PAGE, RUN_DETAIL_PAGE
from pages.view.names import format_value, local_time
from pages.view.tables import metric_tiles, status_badge
from pages.view.text import plain, show_failure, show_plain

# (label with unit, record field) of the card's tiles: the figures a person looks for first.
CARD_FIGURES: tuple[Callable[[RunFigures], Any], ...] = (
    lambda f: f.req_per_s,
    lambda f: f.output_tok_per_s,
    lambda f: f.latency_p95_s,
    lambda f: f.latency_avg_s,
    lambda f: f.requests_failed,
)


def card_heading(card: dict[str, Any]) -> str:
    """``Run #7 · ✅ done · naive · backend=naive vus=1 · finished 2026-12-01 12:03:04``.

    Markdown, user text escaped."""
    return (
        f"**Run #{card['run_id']}** · {status_badge(card['status'])} · {plain(card['backend'])}"
        f" · {plain(card['cell_label'])} · finished {local_time(card.get('finished_at'))}"
    )


def render_result_card(card: dict[str, Any]) -> None:
    """The newest finished run's card (``lab.history.finished_run_card``)."""
    with st.container(border=True, key="result_card"):
        st.markdown(card_heading(card))
        if card["status"] == "done":
            results = RunResults.of_record(card)
            metric_tiles(
                [
                    (figure_by(select).header, format_value(figure_by(select).name, select(results)), None)
                    for select in CARD_FIGURES
                ]
            )
        elif card.get("status_reason"):
            show_failure(card["status_reason"], kind="error" if card["status"] == "failed" else "info")
        if warnings := RunResults.of_record(card).measurement_warnings:
            show_plain(warnings, kind="warning")
        with st.container(horizontal=True, wrap=True, gap="medium"):  # one under the other when narrow
            st.page_link(
                RUN_DETAIL_PAGE,
                label=f"Open run #{card['run_id']}",
                icon=":material/search:",
                query_params={"run": str(card["run_id"])},
            )
            siblings = card.get("experiment_done_run_ids") or []
            if len(siblings) >= 2:
                st.page_link(
                    COMPARE_PAGE,
                    label=f"Compare its experiment's {len(siblings)} done runs",
                    icon=":material/bar_chart:",
                    query_params={"runs": ",".join(map(str, siblings))},
                )
