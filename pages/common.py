"""What every page shares: the settings, the cached engine, a session, page paths.

Pages call the domain through these; nothing here runs experiments.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import streamlit as st
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from db.engine import get_engine
from lab.settings import Settings, get_settings

NEW_EXPERIMENT_PAGE = "pages/new_experiment.py"
RUNS_PAGE = "pages/runs.py"
RUN_DETAIL_PAGE = "pages/run_detail.py"
COMPARE_PAGE = "pages/compare.py"
SERVICES_PAGE = "pages/services.py"

# How often the live view polls the database while a run is active.
LIVE_POLL_INTERVAL_S = 2.0


def settings() -> Settings:
    """The lab's settings (read once per process, see lab.settings)."""
    return get_settings()


@st.cache_resource(show_spinner=False)
def _engine_for(database_url: str) -> Engine:
    # One engine per URL for the whole server: engines are thread-safe and pool connections.
    return get_engine(database_url)


def engine() -> Engine:
    """The process-wide engine of the configured database (schema created or upgraded)."""
    return _engine_for(settings().resolved_database_url)


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
    """Show (once) a message a previous action left for the page it switched to."""
    message: Any = st.session_state.pop("flash", None)
    if message:
        kind, text = message
        getattr(st, kind)(text)


def flash(kind: str, text: str) -> None:
    """Leave a message (``success``, ``info``, ``warning``, ``error``) for the next page shown."""
    st.session_state["flash"] = (kind, text)
