"""Serving Lab's web entry point: routing and the shared sidebar, nothing else.

Run it with ``python -m lab start`` (Streamlit plus the queue worker).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

import streamlit as st

from lab.members import Member, RolesError
from pages.common import (
    COMPARE_PAGE,
    NEW_EXPERIMENT_PAGE,
    RUN_DETAIL_PAGE,
    RUNS_PAGE,
    SERVICES_PAGE,
    TRENDS_PAGE,
    WORKERS_PAGE,
    live_poll_interval,
    live_state,
    services_shown,
)
from pages.view.members import (
    account_box,
    current_member,
    expired_sign_in,
    refused_screen,
    roles,
    sign_in_again_screen,
    sign_in_configured,
    sign_in_screen,
    signed_in,
)
from pages.view.outage import page_survives_database_outage, view_survives_database_outage
from pages.view.page_guard import leave_legacy_pages_mode, routed
from pages.view.tables import status_badge
from pages.view.text import plain

SERVICE_STATE_ICONS = {
    "running": ":green[:material/check_circle:]",
    "starting": ":orange[:material/pending:]",
    "stopping": ":orange[:material/pending:]",
    "unhealthy": ":orange[:material/warning:]",
    "dead": ":red[:material/error:]",
    "failed": ":red[:material/error:]",
}


# While nothing is pending the sidebar still follows the lab (a run queued elsewhere, a service
# started from the CLI), only less often.
SIDEBAR_IDLE_REFRESH_S = 5.0


def sidebar() -> None:
    """The queue, the active run's phase and the services' state, on every page; refreshed by
    itself (every few seconds while a run is pending, less often otherwise), from the same
    state the Runs page's live view reads."""
    polling = live_poll_interval(live_state(fresh=True))

    @st.fragment(run_every=polling or SIDEBAR_IDLE_REFRESH_S)
    @view_survives_database_outage
    def queue_and_services() -> None:
        state = live_state()
        if bool(polling) != bool(state["pending"]):
            # A run was queued (from the CLI, another tab) or the last one ended: the whole
            # page runs again, so its live views start or stop following.
            st.rerun()
        st.subheader("Queue")
        left, right = st.columns(2)
        left.metric("queued", state["queued"])
        right.metric("running", state["active"])
        run = state["run"]
        if run:
            st.caption(
                f":material/play_arrow: #{run['id']} {plain(run['backend'])} {plain(run['cell_label'])}: "
                f"{status_badge(run['status'], run['progress'])}"
            )
        finished = ", ".join(f"{count} {status}" for status, count in state["finished"].items())
        st.caption(finished or "no finished runs yet")
        st.subheader("Services")
        services = services_shown()
        if not services:
            st.caption("none started yet; runs start what they need")
        for service in services:
            icon = SERVICE_STATE_ICONS.get(service["state"], ":material/radio_button_unchecked:")
            st.caption(f"{icon} {plain(service['name'])}: {plain(service['state'])}")

    with st.sidebar:
        queue_and_services()


# The lab's pages: file, title, icon. The first is the default (``/``).
PAGES = (
    (NEW_EXPERIMENT_PAGE, "New experiment", ":material/science:"),
    (RUNS_PAGE, "Runs", ":material/list_alt:"),
    (RUN_DETAIL_PAGE, "Run detail", ":material/search:"),
    (COMPARE_PAGE, "Compare", ":material/bar_chart:"),
    (TRENDS_PAGE, "Trends", ":material/trending_up:"),
    (SERVICES_PAGE, "Services", ":material/dns:"),
    (WORKERS_PAGE, "Workers", ":material/lan:"),
)


# The default page answers at ``/``; its own name answers too (a bookmark of /new_experiment).
DEFAULT_PAGE_ALIAS = Path(PAGES[0][0]).stem


def lab_pages() -> list:
    """The lab's pages for ``st.navigation``, plus the default page's named URL, hidden."""
    path, title, icon = PAGES[0]
    return (
        [st.Page(path, title=title, icon=icon, default=True, url_path="home")]
        + [st.Page(path, title=title, icon=icon) for path, title, icon in PAGES[1:]]
        + [st.Page(path, title=title, icon=icon, url_path=DEFAULT_PAGE_ALIAS, visibility="hidden")]
    )


def screen_pages(screen: Callable[[], None]) -> list:
    """Every page's URL (``/runs``, ``/run_detail?run=1``...) showing ``screen`` instead of the
    page: nothing of the lab, and no "page not found" for a bookmarked link."""
    title, icon = PAGES[0][1], PAGES[0][2]
    return [st.Page(screen, title=title, icon=icon, default=True, url_path="home")] + [
        st.Page(screen, title=title, icon=icon, url_path=Path(path).stem) for path, title, icon in PAGES
    ]


def gate() -> Member | Callable[[], None]:
    """Who may use the lab in this session, or the screen shown instead (sign-in, refusal)."""
    if not sign_in_configured():
        return current_member()
    try:
        roles()
    except RolesError as error:
        return partial(refused_screen, f"The lab's sign-in settings are unusable: {error}")
    if not signed_in():
        return sign_in_screen
    if (expired := expired_sign_in()) is not None:
        return partial(sign_in_again_screen, expired)
    member = current_member()
    if not member.may_use_lab:
        return partial(refused_screen, f"{member.name} is not a member of this lab: ask one of its admins.")
    return member


SIDEBAR_WIDTH_PX = 240


def main() -> None:
    """Route to the page chosen in the navigation, with the shared sidebar; with sign-in
    configured, every URL shows only the sign-in until the user has signed in.

    ``st.navigation`` runs first on every rerun, before anything else can stop the script:
    see pages/view/page_guard.py for what Streamlit does to a ``pages/`` folder otherwise."""
    leave_legacy_pages_mode()
    # 240 px of sidebar (Streamlit's default is 300) leaves a run's figures room at 800 px wide.
    st.set_page_config(page_title="Serving Lab", page_icon="🧪", layout="wide", initial_sidebar_state=SIDEBAR_WIDTH_PX)
    allowed = gate()
    if not isinstance(allowed, Member):
        st.navigation(screen_pages(allowed), position="hidden").run()
        return
    page = st.navigation(lab_pages())
    with st.sidebar:
        account_box(allowed)
    # An unreachable database is one line on the page, retried, not Streamlit's error screen.
    with page_survives_database_outage():
        sidebar()
        with routed():
            page.run()


main()
