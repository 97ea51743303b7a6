"""The run store on PostgreSQL: the same data functions as on SQLite.

Uses the session's PostgreSQL (``postgres_database_url`` in tests/integration/conftest.py:
``LAB_TEST_POSTGRES_URL``, or a private cluster), in a database of its own.
"""

from __future__ import annotations

import os

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from db import migrations, store, worker_store
from db.engine import make_engine
from db.models import RunStatus
from lab.queue import experiments
from lab.specs.schema import load_preset

pytestmark = pytest.mark.integration


@pytest.fixture()
def postgres_engine(postgres_database_url: str):
    engine = make_engine(postgres_database_url)
    migrations.upgrade(engine)
    yield engine
    engine.dispose()


def test_queue_and_figures_on_postgresql(postgres_engine) -> None:
    spec = load_preset("seed-exp1", quick=True, overrides=[("grid.load.vus", [1, 8])])
    with Session(postgres_engine) as session:
        ids = [run.id for run in experiments.enqueue_experiment(session=session, spec=spec, tags="pg").runs]
    first = store.claim_next_run(engine=postgres_engine, worker_pid=os.getpid())
    assert first == ids[0]
    store.set_run_status(
        engine=postgres_engine,
        run_id=first,
        status=RunStatus.DONE,
        req_per_s=1.5,
        count_check={"requests": {"difference": 0}},
    )
    store.save_run_series(engine=postgres_engine, run_id=first, series={"time_s": [0.0, 1.0]})
    with Session(postgres_engine) as session:
        assert store.request_cancel(session=session, run_id=ids[1]) == RunStatus.CANCELLED
        done = store.list_runs(session=session, statuses=[RunStatus.DONE], tag="pg")
        assert [run.id for run in done] == [first] and done[0].req_per_s == 1.5
        assert done[0].count_check == {"requests": {"difference": 0}}
        stored = store.get_run_series(session=session, run_id=first)
        assert stored is not None and stored.series["time_s"] == [0.0, 1.0]
    with postgres_engine.connect() as connection:
        assert migrations.current_version(connection) == migrations.LATEST_VERSION
        assert connection.execute(text("SELECT count(*) FROM runs")).scalar() == len(ids)


def test_upgrade_from_version_1_keeps_runs_and_services_on_postgresql(postgres_engine) -> None:
    from tests.support.old_schema import version_1_metadata

    with postgres_engine.begin() as connection:  # back to version 1: the v1 tables, empty
        # Everything a later migration adds goes, procrastinate's functions and types included.
        connection.execute(text("DROP SCHEMA public CASCADE"))
        connection.execute(text("CREATE SCHEMA public"))
        old = version_1_metadata()
        old.create_all(connection)
        connection.execute(text("INSERT INTO schema_version (id, version) VALUES (1, 1)"))
        connection.execute(
            old.tables["runs"]
            .insert()
            .values(
                spec={},
                backend="naive",
                model="m",
                workload="number-story",
                load_kind="constant-vus",
                duration_s=20,
                max_tokens=16,
                random_seed=1,
                status=RunStatus.DONE,
                req_per_s=2.5,
            )
        )
        connection.execute(old.tables["services"].insert().values(name="naive", kind="naive", state="stopped"))
    assert migrations.upgrade(postgres_engine) == 1
    with Session(postgres_engine) as session:
        [run] = store.list_runs(session=session)
        assert (run.req_per_s, run.worker_name) == (2.5, None)
        [service] = worker_store.list_service_records(session=session)
        assert (service.name, service.state) == ("naive", "stopped") and service.worker
        # Migration 15 applied procrastinate's schema: the shared queue's dispatch.
        assert session.execute(text("SELECT count(*) FROM procrastinate_jobs")).scalar() == 0
    spec = load_preset("seed-exp1", quick=True, overrides=[("grid.load.vus", [1, 8])])
    with Session(postgres_engine) as session:
        experiments.enqueue_experiment(session=session, spec=spec)
    assert store.claim_next_run(engine=postgres_engine, worker_name="box-a", labels=["cpu"]) is not None
