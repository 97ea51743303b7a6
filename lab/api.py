"""The lab's stored runs for notebooks and scripts: ``from lab import api``.

    from lab import api
    runs = api.runs(preset="seed-exp1", status="done")  # one row a run: the CSV export's columns
    latencies = api.requests(int(runs.run_id.iloc[0]))  # one row a request: ok, latency_s, ttft_s, tpot_s
    per_second = api.series(12)                         # one row a second (part="resources"/"server" too)
    spec = api.spec(12)                                 # the run's spec, as stored (a dict)

Read-only: it opens the lab's database (``LAB_DATABASE_URL``, else the SQLite file under
``LAB_DATA_DIR``) or the one named by ``database_url=``, and only reads: its engine refuses
any statement that would write, and it never creates or migrates a schema. SQLite and
PostgreSQL alike. Figures are the stored ones, unrounded, as ``python -m lab runs export``
writes them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pandas as pd
from sqlalchemy import Engine, event, select
from sqlalchemy.orm import Session

from db import migrations, store
from db.documents import JsonObject
from db.engine import make_engine, sqlite_path
from db.models import Experiment, RunStatus
from lab.analysis.compare import RECORD_FIELDS, RunRecord

__all__ = ["ReadOnlyError", "requests", "runs", "series", "spec"]

TIMESTAMP_COLUMNS = ("created_at", "started_at", "finished_at")
READ_STATEMENTS = ("SELECT", "WITH", "PRAGMA", "SHOW", "SET", "BEGIN", "ROLLBACK", "COMMIT", "RELEASE", "SAVEPOINT")
SERIES_PARTS = ("k6", "resources", "server")

_engines: dict[str, Engine] = {}
_engines_lock = threading.Lock()


class ReadOnlyError(PermissionError):
    """Something tried to write through the API's engine."""


def _refuse_writes(_connection: Any, _cursor: Any, statement: str, *_: Any) -> None:
    first_word = statement.lstrip().split(None, 1)[0].upper() if statement.strip() else ""
    if first_word not in READ_STATEMENTS:
        raise ReadOnlyError(f"lab.api only reads; refused a {first_word or 'blank'} statement")


def _engine(database_url: str | None) -> Engine:
    """A reading engine of its own for the URL (the lab's by default), schema checked, never upgraded."""
    if database_url is None:
        from lab.settings import get_settings

        database_url = get_settings().resolved_database_url
    with _engines_lock:
        if database_url not in _engines:
            path = sqlite_path(database_url)
            if path is not None and not path.is_file():
                raise FileNotFoundError(
                    f"no lab database at {path} (set LAB_DATA_DIR or LAB_DATABASE_URL, or pass database_url=)"
                )
            engine = make_engine(database_url)
            event.listen(engine, "before_cursor_execute", _refuse_writes)
            with engine.connect() as connection:
                version = migrations.current_version(connection)
            if version < migrations.LATEST_VERSION:
                raise RuntimeError(
                    f"the database is at schema version {version}, this lab reads version "
                    f"{migrations.LATEST_VERSION}: open it once with the lab (python -m lab runs list) "
                    "to upgrade it"
                )
            _engines[database_url] = engine
        return _engines[database_url]


@contextmanager
def _session(database_url: str | None) -> Iterator[Session]:
    with Session(_engine(database_url)) as session:
        try:
            yield session
        finally:
            session.rollback()


def _as_utc(value: datetime | str | pd.Timestamp | None, what: str) -> datetime | None:
    """A moment as an aware UTC datetime (naive values are read as UTC); None stays None."""
    if value is None:
        return None
    try:
        moment = pd.Timestamp(value)
    except (ValueError, TypeError):
        raise ValueError(f"{what} must be a date or time (e.g. '2026-12-01' or a datetime), not {value!r}") from None
    moment = moment.tz_localize(UTC) if moment.tzinfo is None else moment.tz_convert(UTC)
    converted: datetime = moment.to_pydatetime()
    return converted


def _as_list(value: str | Sequence[str] | None) -> list[str] | None:
    return None if value is None else [value] if isinstance(value, str) else list(value)


def _experiment_ids(session: Session, experiment: int | str | Sequence[int] | None) -> list[int] | None:
    """Experiment ids from an id, ids, or a name (every experiment of that name)."""
    if experiment is None:
        return None
    if isinstance(experiment, str):
        return list(session.scalars(select(Experiment.id).where(Experiment.name == experiment))) or [-1]
    return [int(experiment)] if isinstance(experiment, int) else [int(item) for item in experiment]


def runs(
    *,
    experiment: int | str | Sequence[int] | None = None,
    preset: str | None = None,
    backend: str | Sequence[str] | None = None,
    tag: str | None = None,
    launched_after: datetime | str | None = None,
    launched_before: datetime | str | None = None,
    status: str | Sequence[str] | None = None,
    database_url: str | None = None,
) -> pd.DataFrame:
    """The runs matching every filter, oldest first, one row each with the CSV export's columns
    (``RunRecord``'s); the timestamps as UTC datetimes. ``experiment``: an id, ids or a name;
    ``launched_after``/``_before``: when the run was queued; ``status``: e.g. "done"."""
    statuses = _as_list(status)
    unknown = [item for item in statuses or [] if item not in RunStatus.ALL]
    if unknown:
        raise ValueError(f"unknown status {unknown[0]!r}; statuses: {', '.join(RunStatus.ALL)}")
    with _session(database_url) as session:
        found = store.list_runs(
            session=session,
            experiment_ids=_experiment_ids(session, experiment),
            preset=preset,
            backends=_as_list(backend),
            tag=tag,
            statuses=statuses,
            newest_first=False,
            created_after=_as_utc(launched_after, "launched_after"),
            created_before=_as_utc(launched_before, "launched_before"),
        )
        records = [RunRecord.of(run) for run in found]
    frame = pd.DataFrame(records, columns=list(RECORD_FIELDS))
    for column in TIMESTAMP_COLUMNS:
        frame[column] = pd.to_datetime(frame[column], utc=True, format="ISO8601")
    return frame


def requests(run_id: int, *, database_url: str | None = None) -> pd.DataFrame:
    """A run's per-request figures, one row a request in the order k6 wrote them: ``ok``,
    ``latency_s`` and, for streamed runs, ``ttft_s`` and ``tpot_s`` (NaN where a request has none).
    LookupError when the run does not exist or kept none."""
    from lab.measurement.request_figures import load_request_figures

    with _session(database_url) as session:
        if store.get_run(session=session, run_id=run_id) is None:
            raise LookupError(f"no run with id {run_id}")
        figures = load_request_figures(session=session, run_id=run_id)
    count = len(figures.latency_s)
    frame = pd.DataFrame({"ok": figures.ok, "latency_s": figures.latency_s})
    for name in ("ttft_s", "tpot_s"):
        values = getattr(figures, name)
        frame[name] = pd.Series(values if len(values) == count else [None] * count, dtype="float64")
    frame.index.name = "request"
    return frame


def series(run_id: int, *, part: str = "k6", database_url: str | None = None) -> pd.DataFrame:
    """A run's per-second series: ``part="k6"`` (k6's buckets: time_s, requests_ok, latency...),
    ``"resources"`` (CPU and memory samples) or ``"server"`` (the backend's gauges). Empty when
    the run stored none; LookupError when it does not exist. The k6 frame's ``attrs`` hold
    ``start_epoch_s`` and ``bucket_s``."""
    if part not in SERIES_PARTS:
        raise ValueError(f"unknown series part {part!r}; parts: {', '.join(SERIES_PARTS)}")
    with _session(database_url) as session:
        if store.get_run(session=session, run_id=run_id) is None:
            raise LookupError(f"no run with id {run_id}")
        row = store.get_run_series(session=session, run_id=run_id)
        document: dict[str, Any] = dict(row.series) if row is not None and row.series else {}
    if part != "k6":
        return pd.DataFrame(document.get(part) or {})
    columns = {key: value for key, value in document.items() if isinstance(value, list)}
    lengths = {len(value) for value in columns.values()}
    frame = (
        pd.DataFrame(columns)
        if len(lengths) == 1
        else pd.DataFrame({key: pd.Series(value) for key, value in columns.items()})
    )
    frame.attrs.update({key: document[key] for key in ("start_epoch_s", "bucket_s") if key in document})
    return frame


def spec(run_id: int, *, database_url: str | None = None) -> JsonObject:
    """The run's spec as stored (what ``python -m lab runs spec`` wraps into a spec file)."""
    with _session(database_url) as session:
        run = store.get_run(session=session, run_id=run_id)
        if run is None:
            raise LookupError(f"no run with id {run_id}")
        return dict(run.spec)
