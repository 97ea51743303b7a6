"""The run store on PostgreSQL: the same data functions as on SQLite.

Uses the session's PostgreSQL (``postgres_database_url`` in tests/integration/conftest.py:
``LAB_TEST_POSTGRES_URL``, or a private cluster), in a database of its own.
"""

from __future__ import annotations

import os

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from db import migrations, store
from db.engine import make_engine
from db.models import RunStatus
from lab.specs import load_preset

pytestmark = pytest.mark.integration


@pytest.fixture()
def postgres_engine(postgres_database_url: str):  # noqa: ANN201
    engine = make_engine(postgres_database_url)
    migrations.upgrade(engine)
    yield engine
    engine.dispose()


def test_queue_and_figures_on_postgresql(postgres_engine) -> None:  # noqa: ANN001
    spec = load_preset("seed-exp1", quick=True)
    with Session(postgres_engine) as session:
        ids = [run.id for run in store.enqueue_experiment(session=session, spec=spec, tags="pg").runs]
    first = store.claim_next_run(engine=postgres_engine, worker_pid=os.getpid())
    assert first == ids[0]
    store.set_run_status(engine=postgres_engine, run_id=first, status=RunStatus.DONE, req_per_s=1.5,
                         count_check={"requests": {"difference": 0}})
    store.save_run_series(engine=postgres_engine, run_id=first, series={"time_s": [0.0, 1.0]})
    with Session(postgres_engine) as session:
        assert store.request_cancel(session=session, run_id=ids[1]) == RunStatus.CANCELLED
        done = store.list_runs(session=session, statuses=[RunStatus.DONE], tag="pg")
        assert [run.id for run in done] == [first] and done[0].req_per_s == 1.5
        assert done[0].count_check == {"requests": {"difference": 0}}
        assert store.get_run_series(session=session, run_id=first).series["time_s"] == [0.0, 1.0]
    with postgres_engine.connect() as connection:
        assert migrations.current_version(connection) == migrations.LATEST_VERSION
        assert connection.execute(text("SELECT count(*) FROM runs")).scalar() == len(ids)
