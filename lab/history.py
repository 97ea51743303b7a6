"""What the pages read of the stored runs: the queries they ask, the live state of the
queue and how long a backend took to start before.

The pages call these, never ``db.store`` directly: the domain decides what a page may ask
of the database (the queries are ``db.store``'s, re-exported where nothing is added).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from db.models import RunStatus
from db.store import active_run, get_experiment, get_run, get_run_series, list_experiments, list_runs, queue_summary
from db.store import list_run_actions, list_run_notes, run_launchers, run_worker_names
from lab.backends import options_sections

__all__ = [
    "active_run", "get_experiment", "get_run", "get_run_series", "list_experiments", "list_runs", "run_worker_names",
    "run_launchers", "list_run_actions", "list_run_notes",
    "live_state", "start_options", "last_fresh_start_s",
]

# Spec parts besides backend and model that decide how a run's services start: each backend
# kind's option section and the response cache's settings.
CACHE_SECTION = "cache"


def live_state(*, session: Session) -> dict[str, Any]:
    """The queue and the active run as plain data: ``queued``, ``active`` (runs starting to
    collecting), ``pending``, ``finished`` (count per final status) and ``run`` (the active
    run as a dict, or None)."""
    counts = queue_summary(session=session)
    run = active_run(session=session)
    active = None if run is None else {
        "id": run.id, "status": run.status, "progress": run.progress, "backend": run.backend,
        "cell_label": run.cell_label, "experiment_id": run.experiment_id, "spec": run.spec,
        "model": run.model, "started_at": run.started_at.isoformat() if run.started_at else None,
        "cancel_requested": run.cancel_requested, "environment": run.environment, "launched_by": run.launched_by,
    }
    queued = counts.get(RunStatus.QUEUED, 0)
    running = sum(counts.get(status, 0) for status in RunStatus.ACTIVE)
    return {"queued": queued, "active": running, "pending": bool(queued or running), "run": active,
            "finished": {status: counts[status] for status in RunStatus.FINAL if counts.get(status)}}


def start_options(spec: dict[str, Any] | None) -> dict[str, Any]:
    """What of a stored run spec decides how its services start (besides backend and model)."""
    spec = spec or {}
    return {key: spec.get(key) for key in (*options_sections(), CACHE_SECTION) if key in spec}


def last_fresh_start_s(*, session: Session, backend: str, model: str, options: dict[str, Any]) -> float | None:
    """How long the last fresh start of the same configuration (backend, model, start
    options) took, from the run environments; None when it never started fresh before."""
    runs = list_runs(session=session, backends=[backend], statuses=[RunStatus.DONE], limit=200)
    for run in runs:
        startup = (run.environment or {}).get("startup") or {}
        if (startup.get("fresh") and run.model == model and startup.get("seconds") is not None
                and start_options(run.spec) == options):
            return float(startup["seconds"])
    return None
