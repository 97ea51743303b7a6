"""Workers: every queue worker sharing this lab's database, its labels, hardware, heartbeat,
current run and the managed services recorded on its machine."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from lab.queue.worker_identity import WorkerOverview, worker_overview
from pages.common import session, settings
from pages.view.members import lab_permission
from pages.view.outage import view_survives_database_outage
from pages.view.page_guard import only_through_entry_file

only_through_entry_file()  # run on its own (not from the entry file), a page renders nothing

# The table redraws itself this often: heartbeats, current runs and states follow the lab.
WORKERS_REFRESH_S = 3.0


def page() -> None:
    st.title("Workers")
    if not (allowed := lab_permission()).allowed:  # admins only when sign-in is on
        st.info(allowed.reason + ".")
        return
    workers_table(settings().worker_lease_s)


@st.fragment(run_every=WORKERS_REFRESH_S)
@view_survives_database_outage
def workers_table(lease_s: float) -> None:
    """Every worker, its heartbeat age and current run, read again every few seconds."""
    with session() as db_session:
        rows = worker_overview(session=db_session, lease_s=lease_s)
    if not rows:
        st.info(
            "No worker has registered yet. `python -m lab start` starts one named after this host; "
            "more machines join with `python -m lab worker --name NAME --labels gpu` on the same "
            "PostgreSQL database (see docs/SCALING.md)."
        )
        return
    alive = sum(row.state == "alive" for row in rows)
    st.caption(
        f"{alive} of {len(rows)} workers alive (updated every {WORKERS_REFRESH_S:g} s). A worker silent "
        f"for more than {lease_s:g} s is lost: another worker marks its runs interrupted. Services run on each "
        "worker's own machine."
    )
    st.dataframe(pd.DataFrame([shown(row) for row in rows]), hide_index=True, width="stretch", key="workers_table")


def shown(row: WorkerOverview) -> dict[str, str]:
    """One worker as a row that fits 800 px: the host only where it is not the worker's name, the
    heartbeat's age beside the state, what a person follows first on the left."""
    worker = row.name if row.host in (row.name, "") else f"{row.name} on {row.host}"
    state = (
        row.state
        if row.heartbeat_age_s is None or row.state == "stopped"
        else f"{row.state}, {row.heartbeat_age_s:.0f} s ago"
    )
    return {
        "worker": worker,
        "state": state,
        "current run": row.current_run or "–",
        "labels": row.labels or "–",
        "hardware": row.hardware,
        "services on its machine": row.services or "–",
    }


page()
