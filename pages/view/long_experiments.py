"""The live table of long experiments (lab.queue.long_status): each claim's ratio, interval and
verdict so far, rounds, budget, wall time, machine and estimated end, read again every few seconds
while one runs."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import streamlit as st

from lab.queue import long_status
from pages.common import session
from pages.view.outage import view_survives_database_outage
from pages.view.text import show_plain

# How often the table is read again while a long experiment runs.
LONG_REFRESH_S = 5.0
# Finished long experiments shown under the running ones.
FINISHED_SHOWN = 3


def _figures_frame(found: long_status.LongExperimentStatus) -> pd.DataFrame:
    """One row a claim: what it says, its verdict so far (second, so a narrow page shows it), its ratio."""

    def ratio(value: float | None) -> str:
        return f"{value:,.2f}x" if value is not None else "–"

    return pd.DataFrame(
        [
            {
                "claim": figure.words,
                "verdict so far": f"{figure.verdict}: {figure.progress}",
                "ratio [95% interval]": ratio(figure.ratio)
                + (f" [{ratio(figure.low)}, {ratio(figure.high)}]" if figure.low is not None else ""),
            }
            for figure in found.figures
        ]
    )


def _one(found: long_status.LongExperimentStatus) -> None:
    label = "interim" if found.interim else "ended"
    st.markdown(f"**#{found.id} {found.name}** · {found.state} ({label})")
    for line in long_status.summary_lines(found)[1:]:
        show_plain(line, kind="caption")
    if found.state_reason:
        show_plain(f"Why: {found.state_reason}", kind="caption")
    if found.figures:
        # A static table: its cells wrap, so every column (the verdict above all) stays on a narrow page.
        st.table(_figures_frame(found).set_index("claim"))
    else:
        st.caption("No claim has a figure yet: the first round is running.")


def _shown_ids(ids_running: Sequence[int], ids_all: Sequence[int]) -> list[int]:
    finished = [long_id for long_id in ids_all if long_id not in ids_running][:FINISHED_SHOWN]
    return [*ids_running, *finished]


def long_experiments_table() -> None:
    """Every running or paused long experiment, then the newest finished ones; follows the lab
    without a reload while one runs."""
    with session() as db_session:
        running = long_status.all_ids(db_session, unfinished_only=True)
    _table(refresh=bool(running))


def _table(*, refresh: bool) -> None:
    @st.fragment(run_every=LONG_REFRESH_S if refresh else None)
    @view_survives_database_outage
    def table() -> None:
        with session() as db_session:
            running = long_status.all_ids(db_session, unfinished_only=True)
            shown = _shown_ids(running, long_status.all_ids(db_session))
            statuses = [long_status.status(db_session, long_id) for long_id in shown]
        if not statuses:
            st.info("No long experiment yet: queue the reproduction above; its claims show here as they form.")
            return
        for found in statuses:
            with st.container(border=True):
                _one(found)

    table()
