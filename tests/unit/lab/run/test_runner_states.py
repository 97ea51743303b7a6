"""The runner always leaves a run in a final state with its reason (no services needed)."""

from __future__ import annotations

import errno
import logging
from pathlib import Path

import pytest
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from db import migrations, store
from db.engine import make_engine
from db.models import Run, RunStatus
from lab.context import LabContext
from lab.queue import experiments
from lab.queue.worker import Worker
from lab.run import final_state as final_state_module
from lab.run.decisions import RunFailed
from lab.run.final_state import PendingFinalStates
from lab.run.runner import RunExecutor
from lab.run.steps import RunTargets
from lab.settings import Settings
from lab.specs.schema import load_preset
from services.manager import ServiceManager


@pytest.fixture()
def executor(tmp_path: Path) -> RunExecutor:
    settings = Settings(data_dir=tmp_path)
    engine = make_engine(settings.resolved_database_url)
    migrations.upgrade(engine)
    spec = load_preset("seed-exp1", overrides=[("grid.backend", ["naive"]), ("grid.load.vus", [1])])
    with Session(engine) as session:
        experiments.enqueue_experiment(session=session, spec=spec)
    run_id = store.claim_next_run(engine=engine, worker_pid=1)
    assert run_id is not None
    return RunExecutor(
        engine=engine,
        settings=settings,
        services=ServiceManager(engine=engine, logs_dir=settings.logs_dir),
        run_id=run_id,
        pending_final_states=PendingFinalStates(),
    )


def status_of(executor: RunExecutor) -> tuple[str, str | None]:
    with Session(executor.engine) as session:
        run = session.get_one(Run, executor.run_id)
        return run.status, run.status_reason


def test_a_failure_fails_the_run_with_its_reason(executor: RunExecutor, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(spec):
        raise RunFailed("the naive service did not start: model folder not found")

    monkeypatch.setattr(executor.steps, "bring_up_services", broken)
    assert executor.execute() == RunStatus.FAILED
    assert status_of(executor) == (RunStatus.FAILED, "the naive service did not start: model folder not found")


def test_ctrl_c_leaves_the_run_interrupted_not_running(executor: RunExecutor, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(spec):
        raise KeyboardInterrupt

    monkeypatch.setattr(executor.steps, "bring_up_services", interrupted)
    with pytest.raises(KeyboardInterrupt):
        executor.execute()
    assert status_of(executor) == (RunStatus.INTERRUPTED, "the lab was stopped during this run")


def test_a_stored_spec_that_no_longer_validates_fails_cleanly(executor: RunExecutor) -> None:
    with Session(executor.engine) as session:
        run = session.get_one(Run, executor.run_id)
        run.spec = {**run.spec, "model": "/models/gone"}
        session.commit()
    assert executor.execute() == RunStatus.FAILED
    _status, reason = status_of(executor)
    assert reason is not None
    assert "no longer valid" in reason and "model folder not found: /models/gone" in reason


def test_arrival_rates_become_whole_iterations_per_unit() -> None:
    from lab.run.k6_driver import k6_rate

    assert k6_rate(5.0) == (5, "1s")
    assert k6_rate(0.5) == (30, "1m")
    assert k6_rate(0.005) == (18, "1h")
    assert k6_rate(1.005) == (3618, "1h")


def test_run_detail_charts_include_the_backends_running_requests() -> None:
    from pages.view.figures import run_detail_figures

    series = {
        "time_s": [0.0, 1.0],
        "requests_ok": [1, 2],
        "start_epoch_s": 100.0,
        "server": {"t": [100.0, 101.0], "running_requests": [3.0, 8.0], "waiting_requests": [0.0, 2.0]},
    }
    titles = [figure.layout.title.text for figure in run_detail_figures(series)]
    assert "Requests running and waiting in the backend" in titles


# -- write failures: a full disk or a failing database never leaves a run active ----------
def no_tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.exc_info]


@pytest.mark.parametrize(
    "error",
    [
        OSError(errno.ENOSPC, "No space left on device", "/data/runs/1/requests.json"),
        OSError(errno.EROFS, "Read-only file system", "/data/runs/1"),
        OSError(errno.EIO, "Input/output error"),
        OperationalError("UPDATE runs", {}, Exception("database or disk is full")),
    ],
)
def test_a_write_failure_mid_run_fails_the_run_with_one_line(
    executor: RunExecutor, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, error: Exception
) -> None:
    def broken(spec):
        raise error

    monkeypatch.setattr(executor.steps, "bring_up_services", broken)
    with caplog.at_level(logging.INFO):
        assert executor.execute() == RunStatus.FAILED
    status, reason = status_of(executor)
    assert reason is not None
    assert status == RunStatus.FAILED
    assert reason.startswith(("could not write the run's data", "the database could not be written")), reason
    assert "\n" not in reason
    assert not no_tracebacks(caplog)


def test_a_failing_final_write_is_retried_then_written_without_figures(
    executor: RunExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(final_state_module, "FINAL_WRITE_RETRY_DELAYS_S", (0.0, 0.0, 0.0))
    real = store.set_run_status
    calls: list[dict] = []

    def fails_with_figures(**values):
        calls.append(values)
        if "requests_ok" in values:
            raise OperationalError("UPDATE runs", {}, Exception("database or disk is full"))
        return real(**values)

    monkeypatch.setattr(final_state_module.store, "set_run_status", fails_with_figures)
    executor.final_state.write(RunStatus.DONE, requests_ok=12, latency_p95_s=0.5)
    status, reason = status_of(executor)
    assert reason is not None
    assert status == RunStatus.DONE and "its figures could not be saved" in reason
    assert "database or disk is full" in reason
    assert len(calls) == 4  # three times with the figures, then without
    with Session(executor.engine) as session:
        assert session.get_one(Run, executor.run_id).finished_at is not None


def test_a_final_state_no_write_could_record_is_written_before_the_next_run(
    executor: RunExecutor, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(final_state_module, "FINAL_WRITE_RETRY_DELAYS_S", (0.0, 0.0, 0.0))
    real = store.set_run_status

    def always_fails(**values):
        raise OperationalError("UPDATE runs", {}, Exception("disk I/O error"))

    monkeypatch.setattr(final_state_module.store, "set_run_status", always_fails)
    executor.final_state.write(RunStatus.FAILED, reason="k6 was killed")
    assert status_of(executor)[0] in RunStatus.ACTIVE  # nothing could be written yet
    assert not no_tracebacks(caplog)
    monkeypatch.setattr(final_state_module.store, "set_run_status", real)
    assert executor.final_state.pending.save(executor.engine) == [executor.run_id]
    status, reason = status_of(executor)
    assert reason is not None
    assert status == RunStatus.FAILED and reason.startswith("k6 was killed")


def test_a_database_error_during_the_load_still_ends_the_run(
    executor: RunExecutor, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The progress write fails (disk full) under load: the run ends failed, with its reason."""
    monkeypatch.setattr(
        executor.steps, "bring_up_services", lambda spec: RunTargets("http://127.0.0.1:9", "http://127.0.0.1:9", None)
    )
    monkeypatch.setattr(executor.steps, "warm_up", lambda *args: None)
    # Nothing answers at the targets: each end's /metrics reads as unreadable (None), without a socket.
    monkeypatch.setattr(executor.collector, "scrape_all", lambda spec, targets: {"backend": None})

    def load(*args):
        raise OperationalError("UPDATE runs SET progress", {}, Exception("database or disk is full"))

    monkeypatch.setattr(executor.steps, "drive_load", load)
    assert executor.execute() == RunStatus.FAILED
    status, reason = status_of(executor)
    assert reason is not None
    assert status == RunStatus.FAILED and "database or disk is full" in reason
    assert not no_tracebacks(caplog)


def test_a_worker_that_cannot_claim_says_so_once_not_every_poll(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(data_dir=tmp_path, worker_poll_interval_s=0.01)
    worker = Worker(context=LabContext(settings=settings))
    calls = []

    def full_disk() -> None:
        calls.append(1)
        if len(calls) == 5:
            worker.stop()
        raise OperationalError("UPDATE runs", {}, Exception("database or disk is full"))

    worker.run_one = full_disk  # type: ignore[method-assign]  # a disk that fills
    with caplog.at_level(logging.INFO):
        worker.run_forever()
    lines = [record.getMessage() for record in caplog.records if "could not claim" in record.getMessage()]
    assert len(calls) == 5 and len(lines) == 1, lines
    assert "database or disk is full" in lines[0] and not no_tracebacks(caplog)
