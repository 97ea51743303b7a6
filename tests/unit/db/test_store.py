"""The run store: the queue, cancel, filters, schema upgrades and concurrent access (real SQLite)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import inspect, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from db import migrations, store
from db.engine import make_engine
from db.models import Run, RunStatus
from lab.queue import experiments
from lab.specs.schema import load_preset


def quick_exp1():
    # Two VU counts, so 2 backends x 2 VUs x 2 repeats = 8 runs, in block order (grid order).
    return load_preset(
        "seed-exp1", quick=True, overrides=[("repeats", 2), ("grid.load.vus", [1, 8]), ("order", "blocks")]
    )


def test_enqueue_creates_one_queued_run_per_cell_and_repeat(engine) -> None:
    with Session(engine) as session:
        experiment = experiments.enqueue_experiment(session=session, spec=quick_exp1(), tags="smoke")
        runs = experiment.runs
        assert len(runs) == 2 * 2 * 2
        assert {run.status for run in runs} == {RunStatus.QUEUED}
        # Repeats are independent samples with distinct, stored seeds.
        seeds = {(run.cell_label, run.random_seed) for run in runs}
        assert len(seeds) == len(runs)
        assert runs[0].spec["load"]["duration_s"] == 30 and runs[0].vus == 1 and runs[0].tags == "smoke"


def test_claim_is_fifo_and_exclusive(engine) -> None:
    with Session(engine) as session:
        ids = [run.id for run in experiments.enqueue_experiment(session=session, spec=quick_exp1()).runs]
    claimed = [store.claim_next_run(engine=engine, worker_pid=1) for _ in ids]
    assert claimed == ids
    assert store.claim_next_run(engine=engine, worker_pid=1) is None


def test_cancel_queued_and_active(engine) -> None:
    with Session(engine) as session:
        first, second = [run.id for run in experiments.enqueue_experiment(session=session, spec=quick_exp1()).runs][:2]
    store.claim_next_run(engine=engine, worker_pid=1)
    with Session(engine) as session:
        assert store.request_cancel(session=session, run_id=second) == RunStatus.CANCELLED
        assert store.request_cancel(session=session, run_id=first) == RunStatus.STARTING
    assert store.is_cancel_requested(engine=engine, run_id=first)
    with Session(engine) as session, pytest.raises(LookupError):
        store.request_cancel(session=session, run_id=999)


def test_filters_notes_and_delete(engine) -> None:
    with Session(engine) as session:
        experiment = experiments.enqueue_experiment(session=session, spec=quick_exp1())
        run_id = experiment.runs[0].id
        store.set_run_notes(session=session, run_id=run_id, tags=" fast , cpu ", notes="=cmd|' /C calc'!A0")
        assert len(store.list_runs(session=session, backends=["naive"])) == 4
        assert [r.id for r in store.list_runs(session=session, tag="fast")] == [run_id]
        assert len(store.list_runs(session=session, preset="seed-exp1")) == 8
        assert store.queue_summary(session=session) == {RunStatus.QUEUED: 8}
    store.claim_next_run(engine=engine, worker_pid=1)  # run_id becomes active
    with Session(engine) as session:
        ids = [r.id for r in store.list_runs(session=session)]
        assert store.delete_runs(session=session, run_ids=ids) == sorted(set(ids) - {run_id})  # never the active one
        assert [r.id for r in store.list_runs(session=session)] == [run_id]


def test_orphaned_active_runs_become_interrupted(engine) -> None:
    with Session(engine) as session:
        experiments.enqueue_experiment(session=session, spec=quick_exp1())
    run_id = store.claim_next_run(engine=engine, worker_pid=424242)
    assert run_id is not None
    store.set_run_status(engine=engine, run_id=run_id, status=RunStatus.RUNNING)
    assert store.mark_orphaned_runs_interrupted(engine=engine, worker_name=None) == [run_id]
    with Session(engine) as session:
        run = session.get_one(Run, run_id)
        assert run.status == RunStatus.INTERRUPTED and run.status_reason is not None
        assert "the lab stopped while this run was running" in run.status_reason
        assert run.finished_at is not None


def test_schema_upgrade_keeps_every_run(engine, monkeypatch: pytest.MonkeyPatch) -> None:
    with Session(engine) as session:
        experiments.enqueue_experiment(session=session, spec=quick_exp1())

    def add_column(connection) -> None:
        connection.execute(text("ALTER TABLE runs ADD COLUMN future_figure FLOAT"))

    start = migrations.LATEST_VERSION
    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, add_column])
    monkeypatch.setattr(migrations, "LATEST_VERSION", len(migrations.MIGRATIONS))
    assert migrations.upgrade(engine) == start
    with engine.connect() as connection:
        assert migrations.current_version(connection) == start + 1
        assert connection.execute(text("SELECT count(*) FROM runs")).scalar() == 8
        assert "future_figure" in {column["name"] for column in inspect(connection).get_columns("runs")}
    assert migrations.upgrade(engine) == start + 1  # idempotent


def test_a_new_database_is_created_at_the_latest_version_without_replaying_migrations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    replayed: list[int] = []
    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, lambda connection: replayed.append(1)])
    monkeypatch.setattr(migrations, "LATEST_VERSION", len(migrations.MIGRATIONS))
    engine = make_engine(f"sqlite:///{tmp_path / 'fresh.db'}")
    assert migrations.upgrade(engine) == 0
    with engine.connect() as connection:
        assert migrations.current_version(connection) == migrations.LATEST_VERSION
    assert replayed == []  # the models already hold what the later migrations add


def test_worker_writes_while_readers_poll_without_lock_errors(engine) -> None:
    with Session(engine) as session:
        run_id = experiments.enqueue_experiment(session=session, spec=quick_exp1()).runs[0].id
    errors: list[Exception] = []
    stop = threading.Event()

    def writer() -> None:
        for i in range(300):
            try:
                store.update_run(engine=engine, run_id=run_id, progress={"elapsed_s": i})
                store.save_run_series(engine=engine, run_id=run_id, series={"time_s": list(range(i))})
            except OperationalError as error:
                errors.append(error)
        stop.set()

    def reader() -> None:
        while not stop.is_set():
            try:
                with Session(engine) as session:
                    store.list_runs(session=session)
                    store.queue_summary(session=session)
                    store.get_run_series(session=session, run_id=run_id)
            except OperationalError as error:
                errors.append(error)
            time.sleep(0.001)

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not [e for e in errors if "locked" in str(e)]
    assert not errors


def test_sqlite_is_in_wal_mode_with_a_busy_timeout(engine) -> None:
    with engine.connect() as connection:
        assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert connection.execute(text("PRAGMA busy_timeout")).scalar() == 30000


def test_delete_keeps_the_series_of_an_active_run(engine) -> None:
    with Session(engine) as session:
        ids = [run.id for run in experiments.enqueue_experiment(session=session, spec=quick_exp1()).runs]
    active = store.claim_next_run(engine=engine, worker_pid=1)
    assert active is not None
    store.save_run_series(engine=engine, run_id=active, series={"time_s": [0.0]})
    with Session(engine) as session:
        store.delete_runs(session=session, run_ids=ids)
        kept = store.get_run_series(session=session, run_id=active)
        assert kept is not None and kept.series == {"time_s": [0.0]}
