"""Serving Lab's web entry point: routing and the shared sidebar, nothing else.

Run it with ``python -m lab start`` (Streamlit plus the queue worker).
"""

from __future__ import annotations

import streamlit as st
from sqlalchemy.orm import Session

from db import store
from db.models import RunStatus
from pages.common import (
    COMPARE_PAGE,
    NEW_EXPERIMENT_PAGE,
    RUN_DETAIL_PAGE,
    RUNS_PAGE,
    SERVICES_PAGE,
    engine,
    settings,
)
from pages.view.text import plain

SERVICE_STATE_ICONS = {
    "running": ":green[:material/check_circle:]", "starting": ":orange[:material/pending:]",
    "unhealthy": ":orange[:material/warning:]", "dead": ":red[:material/error:]", "failed": ":red[:material/error:]",
}


@st.cache_data(ttl=5, show_spinner=False)
def _services_state(database_url: str) -> list[dict]:
    """Services' states, checked at most every 5 s (each check probes /health)."""
    from services.manager import ServiceManager

    return [status.to_dict() for status in ServiceManager(engine=engine(), logs_dir=settings().logs_dir, worker=settings().worker_name).status()]


def sidebar() -> None:
    """The queue and the services' state, on every page."""
    with Session(engine()) as session:
        counts = store.queue_summary(session=session)
        active = store.active_run(session=session)
        active_line = f"#{active.id} {active.backend} {active.cell_label}: {active.status}" if active else None
    with st.sidebar:
        st.subheader("Queue")
        queued = counts.get(RunStatus.QUEUED, 0)
        running = sum(counts.get(status, 0) for status in RunStatus.ACTIVE)
        left, right = st.columns(2)
        left.metric("queued", queued)
        right.metric("running", running)
        if active_line:
            st.caption(f":material/play_arrow: {plain(active_line)}")
        finished = ", ".join(f"{counts[s]} {s}" for s in RunStatus.FINAL if counts.get(s))
        st.caption(finished or "no finished runs yet")
        st.subheader("Services")
        services = _services_state(settings().resolved_database_url)
        if not services:
            st.caption("none started yet; runs start what they need")
        for service in services:
            icon = SERVICE_STATE_ICONS.get(service["state"], ":material/radio_button_unchecked:")
            st.caption(f"{icon} {plain(service['name'])}: {plain(service['state'])}")


def sign_in_configured() -> bool:
    """True when an OIDC provider is set in ``.streamlit/secrets.toml`` (``[auth]``): a shared lab."""
    try:
        return "auth" in st.secrets
    except Exception:  # noqa: BLE001 (no secrets file at all: a personal lab, no sign-in)
        return False


def sign_in_gate() -> None:
    """With sign-in configured, nothing but the sign-in button until the user has signed in.

    The entry file runs before every page, so this guards every page, deep links included.
    """
    if not sign_in_configured() or st.user.get("is_logged_in", False):
        return
    st.title("Serving Lab")
    st.write("This lab is shared: sign in to use it.")
    st.button("Sign in", on_click=st.login, type="primary", key="sign_in")
    st.stop()


def main() -> None:
    """Route to the page chosen in the navigation, with the shared sidebar."""
    st.set_page_config(page_title="Serving Lab", page_icon="🧪", layout="wide")
    sign_in_gate()
    page = st.navigation(
        [
            st.Page(NEW_EXPERIMENT_PAGE, title="New experiment", icon=":material/science:", default=True),
            st.Page(RUNS_PAGE, title="Runs", icon=":material/list_alt:"),
            st.Page(RUN_DETAIL_PAGE, title="Run detail", icon=":material/search:"),
            st.Page(COMPARE_PAGE, title="Compare", icon=":material/bar_chart:"),
            st.Page(SERVICES_PAGE, title="Services", icon=":material/dns:"),
            st.Page("pages/workers.py", title="Workers", icon=":material/lan:"),
        ]
    )
    sidebar()
    page.run()


main()
