"""A database outage during a run (issue 25, item 2), without processes: progress writes and
cancel checks are skipped while the database cannot be reached; the final write waits for it
with growing pauses, then keeps the final state, figures whole, in the run's folder; the
worker (at its next claim or its next start) and ``lab runs recover`` write it when the
database answers again. The real PostgreSQL stop is tests/integration/test_outages_and_failing_runs.py."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from db import migrations, store
from db.engine import make_engine
from db.models import Run, RunStatus, utc_now
from lab.cli import entry as cli
from lab.context import LabContext
from lab.queue import experiments
from lab.queue.worker import Worker
from lab.run import decisions
from lab.run import final_state as final_state_module
from lab.run.final_state import PENDING_FINAL_STATE_FILE, FinalStateWriter, PendingFinalStates
from lab.run.steps import RunSteps
from lab.settings import Settings
from lab.specs.schema import load_preset

REFUSED = OperationalError(
    "UPDATE runs",
    {},
    Exception('connection failed: connection to server at "127.0.0.1", port 5432 failed: Connection refused'),
)
SHUTTING_DOWN = OperationalError("SELECT 1", {}, Exception("terminating connection due to administrator command"))


@pytest.fixture()
def lab(tmp_path: Path) -> tuple[Settings, Engine, int]:
    settings = Settings(data_dir=tmp_path, worker_name="box-a")
    engine = make_engine(settings.resolved_database_url)
    migrations.upgrade(engine)
    spec = load_preset("seed-exp1", overrides=[("grid.backend", ["naive"]), ("grid.load.vus", [1])])
    with Session(engine) as session:
        experiments.enqueue_experiment(session=session, spec=spec)
    run_id = store.claim_next_run(engine=engine, worker_name="box-a", worker_pid=1)
    assert run_id is not None
    store.set_run_status(engine=engine, run_id=run_id, status=RunStatus.RUNNING)
    return settings, engine, run_id


def run_row(engine, run_id: int) -> Run:
    with Session(engine) as session:
        run = session.get_one(Run, run_id)
        session.expunge(run)
        return run


def test_which_errors_mean_the_database_cannot_be_reached() -> None:
    for error in (
        REFUSED,
        SHUTTING_DOWN,
        OperationalError("x", {}, Exception("database is locked")),
        OperationalError("x", {}, Exception("the database system is starting up")),
    ):
        assert decisions.database_unreachable(error), error
    other: Exception
    for other in (
        OperationalError("x", {}, Exception("database or disk is full")),
        OperationalError("x", {}, Exception("disk I/O error")),
        OperationalError("x", {}, Exception("no such column: runs.future")),
        IntegrityError("x", {}, Exception("connection constraint violated")),
        OSError("connection"),
    ):
        assert not decisions.database_unreachable(other), other


def test_the_final_write_waits_longer_each_time_until_its_budget_is_spent() -> None:
    waits = [
        decisions.next_final_write_delay_s(n, unreachable=True, remaining_s=60, delays_s=(1.0,)) for n in range(1, 8)
    ]
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert decisions.next_final_write_delay_s(3, unreachable=True, remaining_s=1.5, delays_s=()) == 1.5
    assert decisions.next_final_write_delay_s(3, unreachable=True, remaining_s=0, delays_s=()) is None
    assert decisions.next_final_write_delay_s(1, unreachable=False, remaining_s=60, delays_s=(0.5, 2.0)) == 0.5
    assert decisions.next_final_write_delay_s(3, unreachable=False, remaining_s=60, delays_s=(0.5, 2.0)) is None


def test_a_final_write_during_an_outage_is_retried_with_its_figures_until_the_database_returns(
    lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, engine, run_id = lab
    real = store.set_run_status
    calls: list[dict[str, Any]] = []
    slept: list[float] = []

    def down_for_five_tries(**values):
        calls.append(values)
        if len(calls) <= 5:
            raise REFUSED
        return real(**values)

    monkeypatch.setattr(final_state_module.store, "set_run_status", down_for_five_tries)
    monkeypatch.setattr(final_state_module.time, "sleep", slept.append)
    writer = FinalStateWriter(
        engine=engine, run_id=run_id, run_dir=settings.runs_dir / str(run_id), pending=PendingFinalStates(), retry_s=60
    )
    writer.write(RunStatus.DONE, requests_ok=9861, latency_p95_s=0.5)
    run = run_row(engine, run_id)
    assert (run.status, run.requests_ok, run.status_reason) == (RunStatus.DONE, 9861, None)  # never without figures
    assert slept == [0.5, 1.0, 2.0, 4.0, 8.0] and all("requests_ok" in values for values in calls)


def test_a_final_state_the_database_never_took_is_kept_and_written_by_the_worker_at_its_start(
    lab, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    settings, engine, run_id = lab
    real = store.set_run_status
    monkeypatch.setattr(final_state_module.store, "set_run_status", lambda **values: (_ for _ in ()).throw(REFUSED))
    run_dir = settings.runs_dir / str(run_id)
    writer = FinalStateWriter(engine=engine, run_id=run_id, run_dir=run_dir, pending=PendingFinalStates(), retry_s=0)
    with caplog.at_level(logging.ERROR):
        writer.write(RunStatus.DONE, requests_ok=9861, latency_p95_s=0.5)
    kept = json.loads((run_dir / PENDING_FINAL_STATE_FILE).read_text())
    assert kept["run_id"] == run_id and kept["values"]["requests_ok"] == 9861
    assert PENDING_FINAL_STATE_FILE in caplog.text and "runs recover" in caplog.text
    assert run_row(engine, run_id).status == RunStatus.RUNNING

    # The worker process is gone; a new one starts: it writes the kept state before it
    # marks its old runs interrupted.
    monkeypatch.setattr(final_state_module.store, "set_run_status", real)
    Worker(context=LabContext(settings=settings)).recover()
    run = run_row(engine, run_id)
    assert (run.status, run.requests_ok, run.latency_p95_s) == (RunStatus.DONE, 9861, 0.5)
    assert run.finished_at is not None and not (run_dir / PENDING_FINAL_STATE_FILE).exists()


def test_lab_runs_recover_writes_kept_states_and_sets_aside_those_of_final_runs(
    lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    settings, engine, run_id = lab
    pending = PendingFinalStates()
    values = decisions.final_values(RunStatus.DONE, reason=None, columns={"requests_ok": 12}, finished_at=utc_now())
    pending.add(run_id, values, run_dir=settings.runs_dir / str(run_id))
    with Session(engine) as session:
        experiments.enqueue_experiment(
            session=session,
            spec=load_preset("seed-exp1", overrides=[("grid.backend", ["naive"]), ("grid.load.vus", [1])]),
        )
    other = store.claim_next_run(engine=engine, worker_name="box-a", worker_pid=1)
    assert other is not None
    store.set_run_status(engine=engine, run_id=other, status=RunStatus.CANCELLED)  # ended since: never overwritten
    pending.add(other, {**values, "requests_ok": 1}, run_dir=settings.runs_dir / str(other))
    monkeypatch.setenv("LAB_DATA_DIR", str(settings.data_dir))
    from lab.settings import get_settings

    get_settings.cache_clear()
    try:
        assert cli.main(["runs", "recover"]) == 0
    finally:
        get_settings.cache_clear()
    out = capsys.readouterr().out
    assert f"run {run_id}: final state written" in out
    assert (run_row(engine, run_id).status, run_row(engine, run_id).requests_ok) == (RunStatus.DONE, 12)
    assert "already final" in out and run_row(engine, other).status == RunStatus.CANCELLED
    assert not list(settings.runs_dir.glob(f"*/{PENDING_FINAL_STATE_FILE}"))


def test_progress_writes_and_cancel_checks_are_skipped_during_an_outage(
    lab, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    settings, engine, run_id = lab
    steps = RunSteps(engine=engine, settings=settings, services=None, run_id=run_id)  # type: ignore[arg-type]  # no services in this test

    def refused(**values):
        raise REFUSED

    monkeypatch.setattr("lab.run.steps.store.is_cancel_requested", refused)
    with caplog.at_level(logging.WARNING):
        for _ in range(5):
            assert steps.live_write(lambda: refused()) is None
            assert steps.cancel_requested() is False
    assert caplog.text.count("live progress not written") == 1  # once per outage, not every second
    monkeypatch.undo()
    assert steps.live_write(lambda: 7) == 7 and "answers again" in caplog.text


def test_the_series_and_requests_the_database_never_took_are_kept_with_the_final_state(
    lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, engine, run_id = lab
    real_status, real_series = store.set_run_status, final_state_module.PART_WRITERS["series"]
    monkeypatch.setattr(final_state_module.store, "set_run_status", lambda **values: (_ for _ in ()).throw(REFUSED))
    monkeypatch.setitem(final_state_module.PART_WRITERS, "series", lambda **values: (_ for _ in ()).throw(REFUSED))
    parts = {
        "series": {"series": {"time_s": [0.0, 1.0], "requests_ok": [4, 5]}, "service_log_tails": {"naive": "x"}},
        "requests": {
            "requests": 2,
            "encoding": "test",
            "latency_s": b"\x00\x01\xff",
            "ok": b"\x01\x01",
            "ttft_s": None,
            "tpot_s": None,
        },
    }
    writer = FinalStateWriter(
        engine=engine, run_id=run_id, run_dir=settings.runs_dir / str(run_id), pending=PendingFinalStates(), retry_s=0
    )
    writer.write(RunStatus.DONE, parts=parts, requests_ok=9)
    monkeypatch.setattr(final_state_module.store, "set_run_status", real_status)
    monkeypatch.setitem(final_state_module.PART_WRITERS, "series", real_series)
    pending = PendingFinalStates()
    assert pending.load(settings.runs_dir) == [run_id]
    assert pending.save(engine) == [run_id]
    with Session(engine) as session:
        series, requests = (
            store.get_run_series(session=session, run_id=run_id),
            store.get_run_requests(session=session, run_id=run_id),
        )
        assert series is not None and series.series == parts["series"]["series"]
        assert requests is not None and requests.latency_s == b"\x00\x01\xff"
    assert run_row(engine, run_id).requests_ok == 9
