"""Services: each managed service's state, URL, PID, uptime, start and stop, log tail.

Runs start the services they need on their own; this page is for looking and for
starting or stopping one by hand.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from lab import history
from lab.backends import BACKENDS, managed_backend_names
from lab.queue.detached import start_service_in_background, stop_service_in_background
from lab.queue.idle_stop import idle_stop_text
from pages.common import note_service_action, service_manager, services_shown, session, settings, without_polling
from pages.view.members import lab_permission
from pages.view.names import display_frame
from pages.view.outage import view_survives_database_outage
from pages.view.page_guard import only_through_entry_file
from pages.view.tables import uptime_text
from pages.view.text import plain, show_plain
from services.catalog import ServiceKind

only_through_entry_file()  # run on its own (not from the entry file), a page renders nothing

CACHE_SERVICE_HINTS: dict[str, str] = {
    ServiceKind.REDIS: "a second",
    ServiceKind.CACHE_PROXY: "starts the default backend and Redis too if they are not up",
}


def start_hints() -> dict[str, str]:
    """How long each service takes to start: the backends' own hints, then the cache's."""
    hints: dict[str, str] = {name: BACKENDS[name].start_hint for name in managed_backend_names()}
    hints.update(CACHE_SERVICE_HINTS)
    return hints


def service_kind(status: dict) -> str:
    """What a service runs: the backend of a command service, else its kind (redis, cache-proxy)."""
    return ((status.get("config") or {}).get("params") or {}).get("backend") or status["kind"]


# The services' table and states redraw themselves this often (the sidebar reads the same state).
SERVICES_REFRESH_S = 3.0


def start_control(active_text: str | None) -> None:
    """Start a service by hand (off while a run uses the services; admins only when sign-in is on)."""
    allowed = lab_permission()
    with st.container(border=True):
        left, right = st.columns([2, 1])
        hints = start_hints()
        name = left.selectbox(
            "Start a service", list(hints), key="service_to_start", format_func=lambda n: f"{n} ({hints[n]})"
        )
        right.write("")
        # A callback: it runs before the page and the sidebar draw, so both show "starting" at once.
        right.button(
            "Start",
            key="start_service",
            type="primary",
            disabled=bool(active_text) or not allowed.allowed,
            on_click=start_clicked,
            args=(name,),
        )
        if st.session_state.get("service_started") == name:
            st.success(f"Starting {name} in the background: its state shows below as it changes.")


def refused_now(action: str, name: str) -> bool:
    """Checked at the click, not when the page was drawn: True (and the one line why, kept for the
    page to show) when the member may not act, or a run started since and uses the services."""
    allowed = lab_permission()
    if not allowed.allowed:
        st.session_state["service_refused"] = f"{action} {name}: {allowed.reason}; nothing changed."
        return True
    with session() as db_session:
        active = history.active_run(session=db_session)
    if active is not None:
        st.session_state["service_refused"] = (
            f"{action} {name} refused: run #{active.id} ({active.status}) started after this page was drawn and "
            "uses the services; nothing changed."
        )
        return True
    st.session_state.pop("service_refused", None)
    return False


def start_clicked(name: str) -> None:
    """Start ``name`` detached (lab services up), shown as starting from now on."""
    if refused_now("Start", name):
        return
    note_service_action(name, "starting")
    start_service_in_background(name)
    st.session_state["service_started"] = name


def stop_clicked(name: str) -> None:
    """Stop ``name`` detached (lab services down), shown as stopping from now on."""
    if refused_now("Stop", name):
        return
    note_service_action(name, "stopping")
    stop_service_in_background(name)


def services_table(statuses: list[dict], active_text: str | None) -> None:
    """The table, then per service its message, a Stop button and its log tail."""
    allowed = lab_permission()
    table = pd.DataFrame(
        [
            {
                "service": s["name"],
                "kind": service_kind(s),
                "state": s["state"],
                "url": s["url"],
                "pid": s["pid"],
                "uptime": uptime_text(s["started_at"]),
            }
            for s in statuses
        ]
    )
    st.dataframe(display_frame(table), hide_index=True, width="stretch", key="services_table")
    for status in statuses:
        with st.expander(plain(f"{status['name']} · {status['state']}")):
            if status["message"]:
                show_plain(status["message"][-2000:], kind="caption")
            # A start clicked a moment ago has no process to stop yet. The stop runs in the
            # background like a start: "stopping" shows until the record says stopped.
            if status["state"] in ("running", "unhealthy", "starting") and status.get("pid"):
                st.button(
                    f"Stop {status['name']}",
                    key=f"stop_{status['name']}",
                    disabled=bool(active_text) or not allowed.allowed,
                    on_click=stop_clicked,
                    args=(status["name"],),
                )
            # Health and /metrics polling fill a log; what the service said is what matters.
            lines = without_polling(service_manager().log_tail(status["name"], max_lines=200)).splitlines()[-40:]
            st.code("\n".join(lines) or "(empty log)", language=None)


def page() -> None:
    st.title("Services")
    with session() as db_session:
        active = history.active_run(session=db_session)
        active_text = f"run #{active.id} ({active.status})" if active else None
    allowed = lab_permission()  # admins only when sign-in is on
    if not allowed.allowed:
        st.info(allowed.reason + ": the states and logs below are read-only for you.")
    if refused := st.session_state.pop("service_refused", None):
        show_plain(refused, kind="warning")
    if active_text:
        # Starting or stopping a service by hand now would change what the run measures.
        st.info(f"{active_text} is using the services: starting and stopping by hand is off until it ends.")
    start_control(active_text)
    st.caption(idle_stop_text(settings().backend_idle_stop_s))

    @st.fragment(run_every=SERVICES_REFRESH_S)
    @view_survives_database_outage
    def live_table() -> None:
        statuses = services_shown()
        if not statuses:
            st.info("No service has been started yet. Runs start what they need; start one above to try it by hand.")
            return
        st.caption(f"Updated every {SERVICES_REFRESH_S:g} s.")
        services_table(statuses, active_text)

    live_table()


page()
