"""Serving Lab's web entry point: routing and the shared sidebar, nothing else.

Run it with ``python -m lab start`` (Streamlit plus the queue worker).
"""

from __future__ import annotations

import streamlit as st

from pages.common import (
    COMPARE_PAGE,
    NEW_EXPERIMENT_PAGE,
    RUN_DETAIL_PAGE,
    RUNS_PAGE,
    SERVICES_PAGE,
    live_poll_interval,
    live_state,
    services_state,
)
from pages.view.tables import status_badge
from pages.view.text import plain

SERVICE_STATE_ICONS = {
    "running": ":green[:material/check_circle:]", "starting": ":orange[:material/pending:]",
    "unhealthy": ":orange[:material/warning:]", "dead": ":red[:material/error:]", "failed": ":red[:material/error:]",
}


def sidebar() -> None:
    """The queue, the active run's phase and the services' state, on every page; refreshed
    while a run is pending, from the same state the Runs page's live view reads."""
    polling = live_poll_interval(live_state(fresh=True))

    @st.fragment(run_every=polling)
    def queue_and_services() -> None:
        state = live_state()
        if polling and not state["pending"]:
            st.rerun()  # the last run just ended: stop polling
        st.subheader("Queue")
        left, right = st.columns(2)
        left.metric("queued", state["queued"])
        right.metric("running", state["active"])
        run = state["run"]
        if run:
            st.caption(f":material/play_arrow: #{run['id']} {plain(run['backend'])} {plain(run['cell_label'])}: "
                       f"{status_badge(run['status'], run['progress'])}")
        finished = ", ".join(f"{count} {status}" for status, count in state["finished"].items())
        st.caption(finished or "no finished runs yet")
        st.subheader("Services")
        services = services_state()
        if not services:
            st.caption("none started yet; runs start what they need")
        for service in services:
            icon = SERVICE_STATE_ICONS.get(service["state"], ":material/radio_button_unchecked:")
            st.caption(f"{icon} {plain(service['name'])}: {plain(service['state'])}")

    with st.sidebar:
        queue_and_services()


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
            st.Page("pages/trends.py", title="Trends", icon=":material/trending_up:"),
            st.Page(SERVICES_PAGE, title="Services", icon=":material/dns:"),
            st.Page("pages/workers.py", title="Workers", icon=":material/lan:"),
        ]
    )
    sidebar()
    page.run()


main()
