"""Faults injected into real runs: a backend, Redis or k6 killed mid-run, a start that
cannot succeed, a locked or unwritable database, two launches at once.

Every test here uses its own data directory, database and ServiceManager (so killing a
service never touches the session's shared ones). The backend is the real naive server
where the fault is about a managed backend, and the OpenAI stub (tests/stub_openai.py,
an ``external`` target) where the fault is about the lab itself, to keep the runs short.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import cast

import psutil
import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from db import store
from db.engine import make_engine
from db.models import RunStatus
from lab.queue.worker_lock import WorkerBusyError, WorkerLock
from services.manager import ServiceManager
from services.supervisor import ManagedService
from tests.support.integration_lab import PROJECT_ROOT, Lab, is_running, naive_spec, stub_spec

pytestmark = pytest.mark.integration


# --------------------------------------------------------------------------- helpers


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def processes_mentioning(fragment: str) -> list[psutil.Process]:
    """Live processes whose command line contains ``fragment`` (orphans search)."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        try:
            if process.info["status"] != psutil.STATUS_ZOMBIE and fragment in " ".join(process.info["cmdline"] or []):
                found.append(process)
        except psutil.Error:
            continue
    return [p for p in found if p.pid != os.getpid()]


def k6_processes(run_dir: Path) -> list[psutil.Process]:
    return [p for p in processes_mentioning(str(run_dir)) if "k6" in p.name()]


# --------------------------------------------------------------------------- backend killed


def test_a_backend_killed_mid_run_fails_that_run_keeps_its_data_and_the_next_run_proceeds(lab: Lab) -> None:
    first, second = lab.enqueue(naive_spec(duration_s=30), naive_spec(duration_s=3))
    lab.start_worker()
    lab.wait_for(first, lambda run: is_running(run, at_least=4))  # a few answers and seconds to keep
    naive_pid = lab.worker.services.pid_of("naive")
    assert naive_pid
    family = [psutil.Process(naive_pid), *psutil.Process(naive_pid).children(recursive=True)]
    os.kill(naive_pid, signal.SIGKILL)
    lab.join_worker(timeout_s=150)

    killed = lab.run(first)
    assert killed.status == RunStatus.FAILED
    assert killed.status_reason is not None
    assert killed.status_reason.startswith("the naive service died during the load; its last log line: ")
    assert killed.status_reason.endswith("(see its log below)")
    assert killed.finished_at is not None and killed.progress is None
    assert killed.requests_ok and killed.requests_ok > 0  # partial figures kept
    series = lab.series(first)
    assert len(series["time_s"]) >= 2 and sum(series["requests_ok"]) > 0  # partial per-second data kept
    assert not [p.pid for p in family if alive(p.pid)]  # the dead backend's processes are gone

    proceeded = lab.run(second)
    assert proceeded.status == RunStatus.DONE, proceeded.status_reason
    assert proceeded.started_at and killed.finished_at and proceeded.requests_ok is not None
    assert proceeded.started_at >= killed.finished_at and proceeded.requests_ok > 0
    assert lab.integrity() == "ok"


def test_a_model_folder_that_holds_no_model_fails_the_run_with_the_servers_reason(lab: Lab, tmp_path: Path) -> None:
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    [run_id] = lab.enqueue(naive_spec(duration_s=2, model=str(empty)))
    lab.run_queue()
    run = lab.run(run_id)
    assert run.status == RunStatus.FAILED
    assert run.status_reason is not None
    assert "naive exited with code" in run.status_reason and "before it was ready" in run.status_reason
    assert "Last lines of" in run.status_reason and "Application startup failed" in run.status_reason  # its log
    assert lab.worker.services.pid_of("naive") is None


# --------------------------------------------------------------------------- Redis killed


def test_redis_killed_mid_run_the_proxy_fails_open_and_the_run_completes(lab: Lab, stub: ManagedService) -> None:
    [run_id] = lab.enqueue(stub_spec(stub.url, duration_s=10, backend="external+cache", vus=2))
    lab.start_worker()
    lab.wait_for(run_id, is_running)
    time.sleep(1)
    redis_pid = lab.worker.services.pid_of("redis")
    assert redis_pid
    os.kill(redis_pid, signal.SIGKILL)
    lab.join_worker(timeout_s=60)

    run = lab.run(run_id)
    assert run.status == RunStatus.DONE, run.status_reason
    assert run.requests_ok is not None
    assert run.requests_failed == 0 and run.requests_ok > 10  # every request was answered (fail open)
    assert run.response_cache_store_errors and run.response_cache_store_errors > 0  # counted
    assert "redis stopped during the run" in (run.measurement_warnings or "")  # shown on the run page
    assert lab.integrity() == "ok"


# --------------------------------------------------------------------------- k6 killed


def test_k6_killed_mid_run_fails_the_run_with_the_reason_and_writes_nothing_half_way(
    lab: Lab, stub: ManagedService
) -> None:
    [run_id] = lab.enqueue(stub_spec(stub.url, duration_s=20))
    lab.start_worker()
    lab.wait_for(run_id, is_running)
    time.sleep(1.5)
    [k6] = k6_processes(lab.settings.runs_dir / str(run_id))
    k6.send_signal(signal.SIGKILL)
    lab.join_worker(timeout_s=60)

    run = lab.run(run_id)
    assert run.status == RunStatus.FAILED
    assert run.status_reason == "k6 was killed"
    assert run.finished_at is not None and run.progress is None
    series = lab.series(run_id)
    assert series["time_s"] and len(series["requests_ok"]) == len(series["time_s"])  # a whole series or none
    assert lab.integrity() == "ok"
    assert not k6_processes(lab.settings.runs_dir / str(run_id))


# --------------------------------------------------------------------------- the lab killed


def test_the_lab_worker_killed_mid_run_and_restarted_leaves_an_interrupted_run_and_no_orphans(tmp_path: Path) -> None:
    data_dir = tmp_path / "lab-data"
    env = {**os.environ, "LAB_DATA_DIR": str(data_dir), "LAB_WORKER_POLL_INTERVAL_S": "0.2"}
    lab = Lab(data_dir)  # the test's view of the same database
    [run_id] = lab.enqueue(naive_spec(duration_s=120))
    run_dir = lab.settings.runs_dir / str(run_id)
    worker = subprocess.Popen(
        [sys.executable, "-m", "lab", "worker"],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    restarted: subprocess.Popen | None = None
    try:
        lab.wait_for(run_id, is_running, timeout_s=120)
        naive_pid = ServiceManager(engine=lab.engine, logs_dir=lab.settings.logs_dir).pid_of("naive")
        assert naive_pid and k6_processes(run_dir)
        family = [
            psutil.Process(naive_pid),
            *psutil.Process(naive_pid).children(recursive=True),
            *k6_processes(run_dir),
        ]
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        assert lab.run(run_id).status == RunStatus.RUNNING  # what a crash leaves behind

        restarted = subprocess.Popen(
            [sys.executable, "-m", "lab", "worker"],
            cwd=PROJECT_ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        run = lab.wait_for(run_id, lambda r: r.status == RunStatus.INTERRUPTED, timeout_s=60)
        assert run.status_reason is not None
        assert "the lab stopped while this run was running" in run.status_reason
        deadline = time.monotonic() + 30
        while alive(naive_pid) or k6_processes(run_dir):
            assert time.monotonic() < deadline, (
                f"stale processes were not stopped: naive alive={alive(naive_pid)}, "
                f"k6={[p.cmdline() for p in k6_processes(run_dir)]}"
            )
            time.sleep(0.3)
        assert lab.integrity() == "ok"
        # No orphans: nothing that ran for this run (k6, the naive server) is left.
        # (Other test sessions may run their own naive server: compare pids, not names.)
        assert not processes_mentioning(str(run_dir))
        assert not [process.pid for process in family if alive(process.pid)]
    finally:
        for process in (worker, restarted):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=60)
        lab.close()
    assert restarted is not None and restarted.returncode == 0


# --------------------------------------------------------------------------- storage faults


def test_a_writer_waits_for_a_short_exclusive_lock_and_succeeds(lab: Lab, stub: ManagedService) -> None:
    [run_id] = lab.enqueue(stub_spec(stub.url, duration_s=2))
    holder = sqlite3.connect(lab.settings.data_dir / "lab.db", timeout=5, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    released = threading.Timer(2.0, holder.commit)
    released.start()
    started = time.monotonic()
    store.update_run(engine=lab.engine, run_id=run_id, notes="written after the lock")
    waited_s = time.monotonic() - started
    released.join()
    holder.close()
    assert waited_s >= 1.5  # it waited (busy_timeout) instead of failing
    assert lab.run(run_id).notes == "written after the lock"


def test_a_lock_held_beyond_the_busy_timeout_is_a_clear_error_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import db.engine

    monkeypatch.setattr(db.engine, "SQLITE_BUSY_TIMEOUT_MS", 500)
    lab = Lab(tmp_path / "lab-data")
    try:
        [run_id] = lab.enqueue(stub_spec("http://127.0.0.1:9", duration_s=2))
        holder = sqlite3.connect(lab.settings.data_dir / "lab.db")
        holder.execute("BEGIN EXCLUSIVE")
        try:
            with pytest.raises(OperationalError, match="database is locked"):
                store.set_run_status(engine=lab.engine, run_id=run_id, status=RunStatus.CANCELLED)
        finally:
            holder.rollback()
            holder.close()
        assert lab.run(run_id).status == RunStatus.QUEUED  # nothing lost, nothing half-written
        assert lab.integrity() == "ok"
    finally:
        lab.close()


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lab", *args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


def test_an_unusable_data_directory_is_a_clear_cli_error(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_text("a file where the data folder should be")
    for data_dir in (not_a_folder, Path("/proc/serving-lab-data")):  # /proc is read-only, even for root
        result = cli("runs", "list", env={"LAB_DATA_DIR": str(data_dir)})
        assert result.returncode == 1
        assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
        assert "data directory" in result.stderr and str(data_dir) in result.stderr


def test_a_read_only_database_is_a_clear_error_and_keeps_the_history(lab: Lab, stub: ManagedService) -> None:
    ids = lab.enqueue(stub_spec(stub.url, duration_s=2), stub_spec(stub.url, duration_s=2))
    database = lab.settings.data_dir / "lab.db"
    read_only = f"sqlite:///file:{database}?mode=ro&uri=true"
    result = cli(
        "run",
        "--preset",
        "seed-exp1",
        "--set",
        "load.vus=1",
        env={"LAB_DATA_DIR": str(lab.settings.data_dir), "LAB_DATABASE_URL": read_only},
    )
    assert result.returncode == 1, result.stderr[-2000:]
    assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
    assert "readonly" in result.stderr or "read-only" in result.stderr
    with Session(lab.engine) as session:
        assert [run.id for run in store.list_runs(session=session, newest_first=False)] == ids
    assert lab.integrity() == "ok"


def test_a_port_already_taken_is_a_clear_error(tmp_path: Path) -> None:
    import socket

    from services.catalog import build_service, redis_config
    from services.supervisor import PortInUseError

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        service = build_service("redis", redis_config(), log_path=tmp_path / "redis.log", port=port)
        with pytest.raises(PortInUseError, match=f"redis: port {port} on 127.0.0.1 is already in use"):
            service.start()
        assert service.pid is None


# --------------------------------------------------------------------------- concurrency


def test_two_launches_at_once_are_both_queued_and_run_one_after_the_other(lab: Lab, stub: ManagedService) -> None:
    barrier = threading.Barrier(2)
    launched: list[int] = []

    def launch() -> None:  # a double click: two sessions enqueue at the same instant
        barrier.wait()
        launched.extend(lab.enqueue(stub_spec(stub.url, duration_s=3)))

    threads = [threading.Thread(target=launch) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(launched) == 2
    with Session(lab.engine) as session:
        assert {run.status for run in store.list_runs(session=session, run_ids=launched)} == {RunStatus.QUEUED}

    most_k6_at_once = 0

    def count_k6() -> None:  # from the worker's start: on a slow host both 3 s runs can end early
        nonlocal most_k6_at_once
        while any(lab.run(run_id).status not in RunStatus.FINAL for run_id in launched):
            most_k6_at_once = max(most_k6_at_once, len(k6_processes(lab.settings.runs_dir)))
            time.sleep(0.1)

    with WorkerLock(lab.settings.data_dir):
        lab.start_worker()  # the lock holder's worker thread executes the queue
        counter = threading.Thread(target=count_k6)
        counter.start()
        # Two viewers of the live run: two sessions see the same run and its progress
        # (first: a 3 s run can end while a second `python -m lab` process starts on a slow host).
        live = lab.wait_for(min(launched), is_running)
        with Session(lab.engine) as viewer_a, Session(lab.engine) as viewer_b:
            seen_a = store.active_run(session=viewer_a)
            seen_b = store.active_run(session=viewer_b)
            assert seen_a is not None and seen_b is not None and seen_a.id == seen_b.id == live.id
            assert seen_a.progress is not None and seen_b.progress is not None
            assert seen_a.progress["requests_completed"] and seen_b.progress["requests_completed"]
        # A second worker (another lab process) is refused while this one holds the lock.
        second = cli("worker", env={"LAB_DATA_DIR": str(lab.settings.data_dir)})
        assert second.returncode == 1 and "another lab worker holds" in second.stderr
        with pytest.raises(WorkerBusyError):
            WorkerLock(lab.settings.data_dir).acquire()
        counter.join()
        lab.join_worker()
    assert most_k6_at_once == 1
    runs = [lab.run(run_id) for run_id in launched]
    assert all(run.started_at for run in runs)
    first, second_run = sorted(runs, key=lambda r: cast(datetime, r.started_at))
    assert first.status == second_run.status == RunStatus.DONE
    assert first.finished_at and second_run.started_at
    assert first.finished_at <= second_run.started_at  # never two runs (two k6) at once


# --------------------------------------------------------------------------- schema upgrade


def test_upgrading_a_database_file_with_history_keeps_every_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from db import migrations

    lab = Lab(tmp_path / "lab-data")  # the shipped version, created as the shipped lab creates it
    try:
        ids = lab.enqueue(*(stub_spec("http://127.0.0.1:9", duration_s=2) for _ in range(3)))
        store.set_run_status(engine=lab.engine, run_id=ids[0], status=RunStatus.DONE, requests_ok=7, req_per_s=1.5)
        store.save_run_series(engine=lab.engine, run_id=ids[0], series={"time_s": [0, 1], "requests_ok": [3, 4]})
    finally:
        lab.close()

    def add_column(connection) -> None:
        connection.execute(text("ALTER TABLE runs ADD COLUMN energy_joules FLOAT"))

    shipped = migrations.LATEST_VERSION
    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, add_column])
    monkeypatch.setattr(migrations, "LATEST_VERSION", len(migrations.MIGRATIONS))
    upgraded = make_engine(f"sqlite:///{tmp_path / 'lab-data' / 'lab.db'}")
    assert migrations.upgrade(upgraded) == shipped
    with upgraded.connect() as connection:
        assert migrations.current_version(connection) == shipped + 1
        assert [row[0] for row in connection.execute(text("SELECT id FROM runs ORDER BY id"))] == ids
        assert connection.execute(
            text("SELECT requests_ok, req_per_s FROM runs WHERE id = :i"), {"i": ids[0]}
        ).one() == (7, 1.5)
        assert connection.execute(text("SELECT count(*) FROM run_series")).scalar() == 1
        assert connection.execute(text("PRAGMA integrity_check")).scalar() == "ok"
    upgraded.dispose()
    # The upgraded file still opens in the released lab (new columns are additive).
    result = cli("runs", "list", "--json", env={"LAB_DATA_DIR": str(tmp_path / "lab-data")})
    assert result.returncode == 0, result.stderr[-2000:]
    import json

    assert [record["run_id"] for record in json.loads(result.stdout)] == sorted(ids, reverse=True)
