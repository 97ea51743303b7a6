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

from db import store
from db.engine import get_engine
from db.models import RunStatus
from lab.settings import Settings, get_settings

NEW_EXPERIMENT_PAGE = "pages/new_experiment.py"
RUNS_PAGE = "pages/runs.py"
RUN_DETAIL_PAGE = "pages/run_detail.py"
COMPARE_PAGE = "pages/compare.py"
SERVICES_PAGE = "pages/services.py"

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
        counts = store.queue_summary(session=db_session)
        run = store.active_run(session=db_session)
        active = None if run is None else {
            "id": run.id, "status": run.status, "progress": run.progress, "backend": run.backend,
            "cell_label": run.cell_label, "experiment_id": run.experiment_id, "spec": run.spec,
            "model": run.model, "started_at": run.started_at.isoformat() if run.started_at else None,
            "cancel_requested": run.cancel_requested, "environment": run.environment,
        }
    queued = counts.get(RunStatus.QUEUED, 0)
    running = sum(counts.get(status, 0) for status in RunStatus.ACTIVE)
    return {"queued": queued, "active": running, "pending": bool(queued or running), "run": active,
            "finished": {status: counts[status] for status in RunStatus.FINAL if counts.get(status)}}


def live_poll_interval(state: dict[str, Any]) -> float | None:
    """The live views' refresh interval: every few seconds while anything is pending, else off."""
    return LIVE_POLL_INTERVAL_S if state["pending"] else None


def services_state() -> list[dict]:
    """The services' states (each check probes /health), at most every 2 s."""
    return _services_state(settings().resolved_database_url)


@st.cache_data(ttl=2.0, show_spinner=False)
def _services_state(database_url: str) -> list[dict]:
    from services.manager import ServiceManager

    return [status.to_dict() for status in ServiceManager(engine=engine(), logs_dir=settings().logs_dir, worker=settings().worker_name).status()]


def without_polling(log_text: str | None) -> str:
    """A log tail without the health and /metrics polling lines."""
    return "\n".join(line for line in (log_text or "").splitlines()
                     if not any(marker in line for marker in POLLING_LOG_MARKERS))


def service_last_line(name: str) -> str | None:
    """The last line of a service's log that is not polling noise."""
    from services.manager import ServiceManager

    tail = ServiceManager(engine=engine(), logs_dir=settings().logs_dir, worker=settings().worker_name).log_tail(name, max_lines=80)
    lines = [line for line in without_polling(tail).splitlines() if line.strip()]
    return lines[-1] if lines else None


@st.cache_data(ttl=60.0, show_spinner=False)
def expected_start_s(database_url: str, backend: str, model: str, options_json: str) -> float | None:
    """How long the last fresh start of the same configuration (backend, model, its options)
    took, from the run environments; None when it never started fresh before."""
    options = json.loads(options_json)
    with session() as db_session:
        runs = store.list_runs(session=db_session, backends=[backend], statuses=[RunStatus.DONE], limit=200)
        for run in runs:
            startup = (run.environment or {}).get("startup") or {}
            if (startup.get("fresh") and run.model == model and startup.get("seconds") is not None
                    and start_options(run.spec) == options):
                return float(startup["seconds"])
    return None


def start_options(spec: dict[str, Any] | None) -> dict[str, Any]:
    """What of a run spec decides how its services start (besides backend and model)."""
    spec = spec or {}
    return {key: spec.get(key) for key in ("naive", "vllm", "cache") if key in spec}


def startup_facts(run: dict) -> dict:
    """What the live panel shows while services start: which, its last log line, the expected time."""
    starting = [service["name"] for service in services_state() if service["state"] == "starting"]
    service = starting[0] if starting else None
    return {
        "service": service,
        "last_line": service_last_line(service or run["backend"].split("+")[0]),
        "expected_s": expected_start_s(settings().resolved_database_url, run["backend"], run["model"],
                                       json.dumps(start_options(run["spec"]), sort_keys=True)),
    }
