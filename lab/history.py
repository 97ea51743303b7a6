"""What the pages read of the stored runs: the queries they ask, the live state of the
queue and how long a backend took to start before.

The pages call these, never ``db.store`` directly: the domain decides what a page may ask
of the database (the queries are ``db.store``'s, re-exported where nothing is added).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from db.documents import JsonObject, section_of
from db.models import Run, RunStatus
from db.store import (
    active_run,
    get_experiment,
    get_run,
    get_run_series,
    list_experiments,
    list_run_actions,
    list_run_notes,
    list_runs,
    queue_summary,
    run_launchers,
    run_worker_names,
)
from lab.backends import get_backend, options_sections
from lab.specs.configuration import model_name

__all__ = [
    "Estimate",
    "active_run",
    "configuration_key",
    "estimate_runs",
    "finished_run_card",
    "get_experiment",
    "get_run",
    "get_run_series",
    "last_fresh_start_s",
    "list_experiments",
    "list_run_actions",
    "list_run_notes",
    "list_runs",
    "live_state",
    "pending_searches",
    "run_launchers",
    "run_worker_names",
    "start_options",
]

# Spec parts besides backend and model that decide how a run's services start: each backend
# kind's option section and the response cache's settings.
CACHE_SECTION = "cache"


def live_state(*, session: Session) -> dict[str, Any]:
    """The queue and the active run as plain data: ``queued``, ``active`` (runs starting to
    collecting), ``pending``, ``finished`` (count per final status), ``run`` (the active
    run as a dict, or None) and ``pending_statuses`` (each queued or active run's status, read
    with the rest, so every view drawn from this state shows one phase per run)."""
    counts = queue_summary(session=session)
    run = active_run(session=session)
    active = (
        None
        if run is None
        else {
            "id": run.id,
            "status": run.status,
            "progress": run.progress,
            "backend": run.backend,
            "cell_label": run.cell_label,
            "experiment_id": run.experiment_id,
            "spec": run.spec,
            "model": run.model,
            "started_at": run.started_at.isoformat() if run.started_at else None,
            "cancel_requested": run.cancel_requested,
            "environment": run.environment,
            "launched_by": run.launched_by,
        }
    )
    pending_statuses = dict(
        session.execute(select(Run.id, Run.status).where(Run.status.in_([RunStatus.QUEUED, *RunStatus.ACTIVE]))).all()
    )
    # The counts from the same reading as the statuses, so the two never disagree.
    queued = sum(status == RunStatus.QUEUED for status in pending_statuses.values())
    running = sum(status in RunStatus.ACTIVE for status in pending_statuses.values())
    searches = pending_searches(session=session)
    return {
        "queued": queued,
        "active": running,
        "pending_statuses": pending_statuses,
        "pending": bool(queued or running or searches),
        "run": active,
        "searches": searches,
        "finished": {status: counts[status] for status in RunStatus.FINAL if counts.get(status)},
    }


def start_options(spec: JsonObject | None) -> JsonObject:
    """What of a stored run spec decides how its services start (besides backend and model)."""
    spec = spec or {}
    return {key: spec.get(key) for key in (*options_sections(), CACHE_SECTION) if key in spec}


def last_fresh_start_s(*, session: Session, backend: str, model: str, options: JsonObject) -> float | None:
    """How long the last fresh start of the same configuration (backend, model by name, start
    options) took, from the run environments; None when it never started fresh before."""
    runs = list_runs(session=session, backends=[backend], statuses=[RunStatus.DONE], limit=200)
    for run in runs:
        startup = (run.environment or {}).get("startup") or {}
        if (
            startup.get("fresh")
            and model_name(run.model) == model_name(model)
            and startup.get("seconds") is not None
            and start_options(run.spec) == options
        ):
            return float(startup["seconds"])
    return None


# Without an earlier start of a configuration, its start-up is guessed as this share of the
# backend's readiness timeout (naive 45 s, vLLM 150 s, llama.cpp 30 s here).
UNKNOWN_START_SHARE = 0.25
# Without an earlier run of a configuration: warm-up and collecting, and the share of the
# graceful stop a run is expected to wait (the stop is a maximum, rarely all waited).
UNKNOWN_RUN_OVERHEAD_S = 15.0
UNKNOWN_GRACEFUL_STOP_SHARE = 0.5
HISTORY_RUNS_READ = 2000


@dataclass(frozen=True)
class Estimate:
    """How long runs will take: ``seconds`` in all (start-ups, warm-ups, load, graceful stops and
    collecting), of ``runs`` runs and ``starts`` service starts; ``*_from_history``: how many
    of those came from past runs of the same configuration rather than a guess."""

    runs: int
    seconds: float
    starts: int
    runs_from_history: int
    starts_from_history: int


def configuration_key(spec: JsonObject | None) -> str:
    """A run spec without its random seed, its model by name (the same from any clone of the lab):
    runs with the same key measured the same configuration."""
    kept = {key: value for key, value in (spec or {}).items() if key != "random_seed"}
    if "model" in kept:
        kept["model"] = model_name(str(kept["model"]) if kept["model"] is not None else None)
    return json.dumps(kept, sort_keys=True, default=str)


def _past_run_seconds(runs: Sequence[Any]) -> dict[str, float]:
    """Per configuration, the median time of its finished runs after their services were up."""
    durations: dict[str, list[float]] = {}
    for run in runs:
        if run.started_at is None or run.finished_at is None:
            continue
        startup = (run.environment or {}).get("startup") or {}
        seconds = (run.finished_at - run.started_at).total_seconds() - float(startup.get("seconds") or 0.0)
        if seconds > 0:
            durations.setdefault(configuration_key(run.spec), []).append(seconds)
    return {key: statistics.median(values) for key, values in durations.items()}


def _seconds(value: object) -> float:
    """A stored duration in seconds; 0 when absent (a validated spec stores numbers)."""
    return float(value) if isinstance(value, (int, float)) else 0.0


def _guessed_run_seconds(spec: JsonObject) -> float:
    load = section_of(spec, "load")
    stages = load.get("stages")
    if load.get("kind") == "ramping-vus":
        stage_list = stages if isinstance(stages, list) else []
        planned = sum(_seconds(stage.get("duration_s")) for stage in stage_list if isinstance(stage, dict))
    else:
        planned = _seconds(load.get("duration_s"))
    return planned + UNKNOWN_GRACEFUL_STOP_SHARE * _seconds(load.get("graceful_stop_s")) + UNKNOWN_RUN_OVERHEAD_S


def _start_seconds(session: Session, spec: JsonObject) -> tuple[float, bool]:
    """How long the spec's services take to start and whether that is known: the last fresh
    start of the same configuration, else a guess from the backend's readiness timeout."""
    backend = str(spec.get("backend") or "")
    known = last_fresh_start_s(
        session=session, backend=backend, model=str(spec.get("model") or ""), options=start_options(spec)
    )
    if known is not None:
        return known, True
    try:
        kind = get_backend(backend)
    except ValueError:
        return 0.0, False
    return (kind.readiness_timeout_s * UNKNOWN_START_SHARE if kind.managed else 0.0), False


def estimate_runs(*, session: Session, specs: Sequence[JsonObject]) -> Estimate:
    """The time ``specs`` (run specs as stored, in queue order) will take: each configuration's
    past runs where there are any, else its planned load plus half its graceful stop and a
    warm-up allowance; one start-up per distinct service configuration (the last fresh start
    of it, else a guess from the backend's readiness timeout)."""
    past = _past_run_seconds(list_runs(session=session, statuses=[RunStatus.DONE], limit=HISTORY_RUNS_READ))
    seconds, from_history = 0.0, 0
    starts: dict[str, bool] = {}
    for spec in specs:
        key = configuration_key(spec)
        if key in past:
            seconds, from_history = seconds + past[key], from_history + 1
        else:
            seconds += _guessed_run_seconds(spec)
        group = json.dumps([spec.get("backend"), spec.get("model"), start_options(spec)], sort_keys=True, default=str)
        if group not in starts:
            start_s, starts[group] = _start_seconds(session, spec)
            seconds += start_s
    return Estimate(
        runs=len(specs),
        seconds=seconds,
        starts=len(starts),
        runs_from_history=from_history,
        starts_from_history=sum(starts.values()),
    )


# A capacity search still "running" after this long lost its driving process: not followed.
SEARCH_FOLLOWED_H = 12.0
PENDING_SEARCH_STATES = ("queued", "running")


def pending_searches(*, session: Session) -> list[dict[str, Any]]:
    """Capacity searches still probing (their driver queues one probe at a time, so the queue
    can be empty between probes): ``id``, ``name``, ``state``, ``probes`` done so far."""
    from datetime import datetime, timedelta

    since = datetime.now(UTC) - timedelta(hours=SEARCH_FOLLOWED_H)
    found = []
    for experiment in list_experiments(session=session, limit=50):
        capacity = experiment.capacity or {}
        if capacity.get("state") in PENDING_SEARCH_STATES and _aware(experiment.created_at) >= since:
            probes = sum(len(entry.get("probes") or []) for entry in (capacity.get("backends") or {}).values())
            found.append({"id": experiment.id, "name": experiment.name, "state": capacity["state"], "probes": probes})
    return found


def finished_run_card(*, session: Session) -> dict[str, Any] | None:
    """The newest run that reached a final state, as the Runs page's result card reads it: its
    record fields plus ``finished_at`` and the done runs of its experiment (for Compare)."""
    from lab.analysis.compare import RunRecord

    runs = list_runs(session=session, statuses=list(RunStatus.FINAL), limit=200)
    finished = [run for run in runs if run.finished_at is not None]
    if not finished:
        return None
    run = max(finished, key=lambda item: (item.finished_at, item.id))
    if _launched_since(session, run):
        return None  # the card belongs to an earlier launch: the live panel shows the new one alone
    siblings = (
        []
        if run.experiment_id is None
        else list_runs(session=session, experiment_ids=[run.experiment_id], statuses=[RunStatus.DONE], limit=200)
    )
    return {**RunRecord.of(run), "experiment_done_run_ids": sorted(sibling.id for sibling in siblings)}


def _launched_since(session: Session, finished: Any) -> bool:
    """Whether a run still queued or active was launched after ``finished`` ended (a new launch,
    not the rest of ``finished``'s own experiment)."""
    pending = list_runs(session=session, statuses=[RunStatus.QUEUED, *RunStatus.ACTIVE], limit=200)
    ended = _aware(finished.finished_at)
    return any(
        _aware(run.created_at) > ended
        for run in pending
        if run.created_at is not None and (run.experiment_id is None or run.experiment_id != finished.experiment_id)
    )


def _aware(moment: Any) -> Any:
    # SQLite hands back naive datetimes (stored in UTC); PostgreSQL aware ones.
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
