"""What every page shares: the settings, the cached engine, a session, page paths.

Pages call the domain through these; nothing here runs experiments.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import streamlit as st
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from lab import history
from lab.backends import CACHE_SUFFIX
from lab.context import LabContext
from lab.settings import Settings, get_settings
from pages.view.service_states import shown_states
from services.manager import ServiceManager

NEW_EXPERIMENT_PAGE = "pages/new_experiment.py"
RUNS_PAGE = "pages/runs.py"
RUN_DETAIL_PAGE = "pages/run_detail.py"
COMPARE_PAGE = "pages/compare.py"
SERVICES_PAGE = "pages/services.py"
WORKERS_PAGE = "pages/workers.py"
TRENDS_PAGE = "pages/trends.py"

# The first experiment every page recommends (New experiment's default, the empty Runs page's advice).
RECOMMENDED_PRESET = "first-run"
RECOMMENDED_TEXT = (
    "first-run, one 20-s run of the Transformers server at 1 VU (about half a minute here); then the quick scale of "
    "seed-exp1 (the naive server and vLLM at 1, 8 and 32 VUs) takes minutes on a small CPU machine"
)

# How often the live view polls the database while a run is active.
LIVE_POLL_INTERVAL_S = 2.0
# How long a message left for the next page (e.g. "Experiment #3 queued") stays up.
FLASH_SHOWN_S = 10.0
# Log lines of health and metrics polling: noise in a service's log tail.
POLLING_LOG_MARKERS = ("GET /metrics", "GET /health", "GET /v1/models", "HEAD /health")


def settings() -> Settings:
    """The lab's settings (read once per process, see lab.settings)."""
    return get_settings()


@st.cache_resource(show_spinner=False)
def _context_for(database_url: str) -> LabContext:
    # One context (so one engine) per URL for the whole server: engines are thread-safe and pool connections.
    return LabContext(settings=settings())


def context() -> LabContext:
    """The process-wide lab context of the configured database."""
    return _context_for(settings().resolved_database_url)


def engine() -> Engine:
    """The process-wide engine of the configured database (schema created or upgraded)."""
    return context().engine


def service_manager() -> ServiceManager:
    """This machine's service manager (the lab's records of this worker)."""
    return context().service_manager()


@contextmanager
def session() -> Iterator[Session]:
    """A short database session for one page action (objects stay readable after it closes)."""
    with Session(engine(), expire_on_commit=False) as db_session:
        yield db_session


def open_run_detail(run_id: int) -> None:
    """Go to the Run detail page of ``run_id``."""
    st.session_state["detail_run_id"] = int(run_id)
    st.switch_page(RUN_DETAIL_PAGE, query_params={"run": str(run_id)})


def show_flash() -> None:
    """Show a message a previous action left for the page it switched to, for a few seconds
    (a live view redraws it on each refresh until then, then it goes)."""
    message: Any = st.session_state.get("flash")
    if not message:
        return
    kind, text, left_at = message
    if time.monotonic() - left_at > FLASH_SHOWN_S:
        st.session_state.pop("flash", None)
        return
    getattr(st, kind)(text)


def flash(kind: str, text: str) -> None:
    """Leave a message (``success``, ``info``, ``warning``, ``error``) for the next page shown."""
    st.session_state["flash"] = (kind, text, time.monotonic())


def live_state(*, fresh: bool = False) -> dict[str, Any]:
    """The queue and the active run, read once for every live view of this rerun (panel,
    table, sidebar): ``queued``, ``active`` (runs starting to collecting), ``pending``,
    ``finished`` (count per final status) and ``run`` (the active run as a dict, or None).

    ``fresh``: read the database now (a whole page run does, so a run queued a moment ago
    switches the live views on); the views' refreshes then share that reading for a second.
    """
    if fresh:
        _live_state.clear()
    return _live_state(settings().resolved_database_url)


@st.cache_data(ttl=1.0, show_spinner=False)
def _live_state(database_url: str) -> dict[str, Any]:
    # Cached for a second: the page's fragment and the sidebar's read the same state.
    with session() as db_session:
        return history.live_state(session=db_session)


def live_poll_interval(state: dict[str, Any]) -> float | None:
    """The live views' refresh interval: every few seconds while anything is pending, else off."""
    return LIVE_POLL_INTERVAL_S if state["pending"] else None


def services_state(*, fresh: bool = False) -> list[dict]:
    """The services' states (each check probes /health), at most every 2 s; ``fresh``: read now
    (after a start or a stop, so no view lags another)."""
    if fresh:
        _services_state.clear()
    return _services_state(settings().resolved_database_url)


@st.cache_data(ttl=2.0, show_spinner=False)
def _services_state(database_url: str) -> list[dict]:
    return [as_shown(status.to_dict()) for status in service_manager().status()]


SERVICE_ACTIONS_KEY = "service_actions"


def note_service_action(name: str, action: str) -> None:
    """Remember that this session asked to start or stop ``name`` (shown until the record catches up)."""
    state_before = next((s["state"] for s in services_state(fresh=True) if s["name"] == name), None)
    st.session_state.setdefault(SERVICE_ACTIONS_KEY, {})[name] = (action, time.monotonic(), state_before)


def services_shown() -> list[dict]:
    """The services' states as the pages show them: a Start or Stop clicked in this session
    shows as "starting" or "stopping" from the click on (pages.view.service_states)."""
    shown, pending = shown_states(
        services_state(), st.session_state.get(SERVICE_ACTIONS_KEY, {}), now_s=time.monotonic()
    )
    st.session_state[SERVICE_ACTIONS_KEY] = pending
    return shown


# What the supervisor records when a run is cancelled while its service starts (services.supervisor).
START_CANCELLED_MARK = "start abandoned (cancelled)"


def as_shown(service: dict) -> dict:
    """A service's state as pages show it: a start abandoned because its run was cancelled is
    "stopped (start cancelled)", not "failed"."""
    if service.get("state") == "failed" and START_CANCELLED_MARK in (service.get("message") or ""):
        return {**service, "state": "stopped (start cancelled)"}
    return service


def without_polling(log_text: str | None) -> str:
    """A log tail without the health and /metrics polling lines."""
    return "\n".join(
        line for line in (log_text or "").splitlines() if not any(marker in line for marker in POLLING_LOG_MARKERS)
    )


def service_last_line(name: str) -> str | None:
    """The last line of a service's log that is not polling noise."""
    tail = service_manager().log_tail(name, max_lines=80)
    lines = [line for line in without_polling(tail).splitlines() if line.strip()]
    return lines[-1] if lines else None


@st.cache_data(ttl=60.0, show_spinner=False)
def expected_start_s(database_url: str, backend: str, model: str, options_json: str) -> float | None:
    """How long the last fresh start of the same configuration (backend, model, its options)
    took, from the run environments; None when it never started fresh before."""
    with session() as db_session:
        return history.last_fresh_start_s(
            session=db_session, backend=backend, model=model, options=json.loads(options_json)
        )


def startup_facts(run: dict) -> dict:
    """What the live panel shows while services start: which, its last log line, the expected time."""
    starting = [service["name"] for service in services_state() if service["state"] == "starting"]
    service = starting[0] if starting else None
    return {
        "service": service,
        "last_line": service_last_line(service or run["backend"].removesuffix(CACHE_SUFFIX)),
        "expected_s": expected_start_s(
            settings().resolved_database_url,
            run["backend"],
            run["model"],
            json.dumps(history.start_options(run["spec"]), sort_keys=True),
        ),
    }


if __name__ == "__main__":  # Streamlit's legacy pages/ mode ran this file as a page: nothing to show
    from pages.view.page_guard import only_through_entry_file

    only_through_entry_file()
