"""The runner always leaves a run in a final state with its reason (no services needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from db import migrations, store
from db.engine import make_engine
from db.models import Run, RunStatus
from lab.runner import RunExecutor, RunFailed
from lab.settings import Settings
from lab.specs import load_preset
from services.manager import ServiceManager


@pytest.fixture()
def executor(tmp_path: Path) -> RunExecutor:
    settings = Settings(data_dir=tmp_path)
    engine = make_engine(settings.resolved_database_url)
    migrations.upgrade(engine)
    spec = load_preset("seed-exp1", overrides=[("grid.backend", ["naive"]), ("grid.load.vus", [1])])
    with Session(engine) as session:
        store.enqueue_experiment(session=session, spec=spec)
    run_id = store.claim_next_run(engine=engine, worker_pid=1)
    return RunExecutor(engine=engine, settings=settings, services=ServiceManager(engine=engine, logs_dir=settings.logs_dir),
                       run_id=run_id)


def status_of(executor: RunExecutor) -> tuple[str, str | None]:
    with Session(executor.engine) as session:
        run = session.get(Run, executor.run_id)
        return run.status, run.status_reason


def test_a_failure_fails_the_run_with_its_reason(executor: RunExecutor, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(spec):  # noqa: ANN001, ANN202
        raise RunFailed("the naive service did not start: model folder not found")

    monkeypatch.setattr(executor, "bring_up_services", broken)
    assert executor.execute() == RunStatus.FAILED
    assert status_of(executor) == (RunStatus.FAILED, "the naive service did not start: model folder not found")


def test_ctrl_c_leaves_the_run_interrupted_not_running(executor: RunExecutor, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(spec):  # noqa: ANN001, ANN202
        raise KeyboardInterrupt

    monkeypatch.setattr(executor, "bring_up_services", interrupted)
    with pytest.raises(KeyboardInterrupt):
        executor.execute()
    assert status_of(executor) == (RunStatus.INTERRUPTED, "the lab was stopped during this run")


def test_a_stored_spec_that_no_longer_validates_fails_cleanly(executor: RunExecutor) -> None:
    with Session(executor.engine) as session:
        run = session.get(Run, executor.run_id)
        run.spec = {**run.spec, "model": "/models/gone"}
        session.commit()
    assert executor.execute() == RunStatus.FAILED
    status, reason = status_of(executor)
    assert "no longer valid" in reason and "model folder not found: /models/gone" in reason


def test_arrival_rates_become_whole_iterations_per_unit() -> None:
    from lab.runner import k6_rate

    assert k6_rate(5.0) == (5, "1s")
    assert k6_rate(0.5) == (30, "1m")
    assert k6_rate(0.005) == (18, "1h")
    assert k6_rate(1.005) == (3618, "1h")


def test_run_detail_charts_include_the_backends_running_requests() -> None:
    from lab.ui_support import run_detail_figures

    series = {"time_s": [0.0, 1.0], "requests_ok": [1, 2], "start_epoch_s": 100.0,
              "server": {"t": [100.0, 101.0], "running_requests": [3.0, 8.0], "waiting_requests": [0.0, 2.0]}}
    titles = [figure.layout.title.text for figure in run_detail_figures(series)]
    assert "Requests running and waiting in the backend" in titles
