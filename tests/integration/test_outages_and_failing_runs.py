"""Issue 25 against real processes: a PostgreSQL outage mid-run, a service killed during the
cache fill, request files that are not regular files, and a run whose requests all fail.

Each test has its own data folder, database and services (the stub servers of
tests/stub_openai.py where the backend only has to answer; the naive server with SmolLM2
where its own error matters), so nothing here touches the session's shared services.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from db import store
from db.engine import make_engine
from db.migrations import upgrade
from db.models import Run, RunStatus
from lab.backends import Backend, Launch, MetricNames, register, unregister
from lab.measurement.k6_results import parse_summary
from lab.queue import experiments
from lab.run.final_state import PENDING_FINAL_STATE_FILE
from lab.specs.schema import ExperimentSpec, RunSpec
from services.supervisor import ManagedService
from tests.support.integration_lab import DEFAULT_MODEL, PROJECT_ROOT, Lab, naive_spec, stub_spec
from tests.support.integration_postgres import PostgresCluster

pytestmark = pytest.mark.integration

STUB_KIND = "stubengine"


# --------------------------------------------------------------------------- helpers


# The stub logs nothing itself (uvicorn at warning level): one line first, so the reason has a line to quote.
STUB_ENGINE_MAIN = (
    "import runpy, sys; print('stub engine serving on port', sys.argv[4], flush=True); "
    "sys.argv[0] = 'stub_openai'; runpy.run_module('tests.stub_openai', run_name='__main__')"
)


class StubEngine(Backend):
    """The OpenAI stub as a managed backend (started and watched by the lab), 0.3 s per answer."""

    name = STUB_KIND
    label = "stub engine"
    metrics = MetricNames()

    def launch(self, *, model: str, options: Any, settings: Any) -> Launch:
        argv = [sys.executable, "-c", STUB_ENGINE_MAIN, "--host", "{host}", "--port", "{port}", "--delay-s", "0.3"]
        return Launch(argv=argv, readiness_timeout_s=30)


@pytest.fixture()
def stub_kind() -> Iterator[str]:
    register(StubEngine)
    try:
        yield STUB_KIND
    finally:
        unregister(STUB_KIND)


def read_run(engine, run_id: int) -> Run:
    with Session(engine) as session:
        run = session.get(Run, run_id)
        assert run is not None
        session.expunge(run)
        return run


def wait_until(predicate, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if value := predicate():
                return value
        except Exception:
            pass
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def start_worker(tmp_path: Path, database_url: str, **env: str) -> subprocess.Popen[bytes]:
    """A real ``python -m lab worker`` on the given database, its output in ``worker.log``."""
    environment = {
        **os.environ,
        "LAB_DATA_DIR": str(tmp_path / "data"),
        "LAB_DATABASE_URL": database_url,
        "LAB_WORKER_POLL_INTERVAL_S": "0.2",
        **env,
    }
    with open(tmp_path / "worker.log", "wb") as log_file:
        return subprocess.Popen(
            [sys.executable, "-m", "lab", "worker"],
            cwd=PROJECT_ROOT,
            env=environment,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )


def stop_worker(worker: subprocess.Popen[bytes], tmp_path: Path) -> str:
    """Stop the worker (SIGTERM, then SIGKILL); its output."""
    worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(timeout=60)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()
    return (tmp_path / "worker.log").read_text(errors="replace")


# --------------------------------------------------------------------------- item 2: outages


@pytest.mark.parametrize("outage", ["mid-run", "past-the-end"])
def test_a_postgresql_outage_mid_run_loses_none_of_the_runs_figures(
    postgres_cluster: PostgresCluster, outage_database_url: str, stub: ManagedService, tmp_path: Path, outage: str
) -> None:
    """PostgreSQL stopped for 8 s under load: the load goes on and the run ends done with every
    request k6 counted. ``past-the-end``: the database is still away when the run ends (the
    final write's budget is 2 s): the state is kept in the run folder and the worker writes
    it once PostgreSQL is back."""
    url = outage_database_url
    engine = make_engine(url)
    upgrade(engine)
    spec = stub_spec(stub.url, duration_s=14, vus=4)
    with Session(engine) as session:
        [run_id] = [
            run.id
            for run in experiments.enqueue_experiment(
                session=session, spec=ExperimentSpec(name="outage", base=spec)
            ).runs
        ]
    worker = start_worker(tmp_path, url, LAB_FINAL_WRITE_RETRY_S="2" if outage == "past-the-end" else "60")
    run_dir = tmp_path / "data" / "runs" / str(run_id)
    try:
        started = wait_until(
            lambda: (read_run(engine, run_id).progress or {}).get("elapsed_s", 0) >= 3, 60, "the load to run 3 s"
        )
        assert started
        engine.dispose()
        assert postgres_cluster.stop().returncode == 0
        stopped_at = time.monotonic()
        if outage == "past-the-end":  # away until the run has ended and kept its state
            wait_until(lambda: (run_dir / PENDING_FINAL_STATE_FILE).is_file(), 60, "the kept final state")
        time.sleep(max(0.0, 8.0 - (time.monotonic() - stopped_at)))
        outage_s = time.monotonic() - stopped_at
        assert postgres_cluster.start().returncode == 0
        run = wait_until(
            lambda: (r := read_run(engine, run_id)).status in RunStatus.FINAL and r, 120, "the run's final state"
        )
    finally:
        output = stop_worker(worker, tmp_path)
    summary = parse_summary(run_dir / "summary.json")
    assert run.status == RunStatus.DONE, (run.status_reason, output[-3000:])
    assert run.requests_ok == summary["requests_ok"] and run.requests_ok > 100  # every request k6 counted
    # The load ran its whole duration (a failed progress write used to stop k6 at once).
    assert run.measured_duration_s and run.measured_duration_s >= 10
    assert not (run_dir / PENDING_FINAL_STATE_FILE).exists()
    with Session(engine) as session:
        assert store.get_run_series(session=session, run_id=run_id) is not None
    print(
        f"outage {outage}: database away {outage_s:.1f} s; run {run.status}, requests_ok {run.requests_ok} "
        f"(summary {summary['requests_ok']})"
    )
    engine.dispose()


# --------------------------------------------------------------------------- item 3: services watched


def fill_spec(backend: str, **changes: Any) -> RunSpec:
    return RunSpec.model_validate(
        {
            "backend": backend,
            "model": str(DEFAULT_MODEL),
            "max_tokens": 8,
            "warmup_requests": 1,
            "workload": {"prompts": 400},
            "cache": {"fill_first_up_to": 1000, "fill_timeout_s": 600},
            "load": {"vus": 2, "duration_s": 5, "graceful_stop_s": 2},
            **changes,
        }
    )


def test_a_managed_backend_killed_during_the_cache_fill_ends_the_run_within_15_s(lab: Lab, stub_kind: str) -> None:
    [run_id] = lab.enqueue(fill_spec(f"{stub_kind}+cache"))
    lab.start_worker()
    run_dir = lab.settings.runs_dir / str(run_id)
    wait_until(lambda: (run_dir / "fill" / "k6.log").is_file(), 90, "the cache fill to start")
    time.sleep(2)
    pid = lab.worker.services.pid_of(stub_kind)
    assert pid
    os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    run = wait_until(lambda: (r := lab.run(run_id)).status in RunStatus.FINAL and r, 60, "the run to end")
    took_s = time.monotonic() - killed_at
    lab.join_worker(timeout_s=30)
    assert run.status == RunStatus.FAILED
    assert run.status_reason.startswith(
        f"the {stub_kind} service died during the cache fill; its last log line: stub engine serving on port "
    ), run.status_reason
    assert took_s < 15, took_s
    print(f"backend killed during the fill: run failed {took_s:.1f} s later: {run.status_reason}")


def test_an_external_upstream_gone_during_the_cache_fill_ends_the_run_within_15_s(lab: Lab, tmp_path: Path) -> None:
    upstream = ManagedService(
        name="upstream",
        argv=[sys.executable, "-m", "tests.stub_openai", "--host", "{host}", "--port", "{port}", "--delay-s", "0.3"],
        log_path=tmp_path / "upstream.log",
        cwd=PROJECT_ROOT,
        readiness_timeout_s=30,
    )
    with upstream:
        [run_id] = lab.enqueue(fill_spec("external+cache", target_url=upstream.url, model="stub"))
        lab.start_worker()
        run_dir = lab.settings.runs_dir / str(run_id)
        wait_until(lambda: (run_dir / "fill" / "k6.log").is_file(), 90, "the cache fill to start")
        time.sleep(2)
        upstream.stop()
        gone_at = time.monotonic()
        run = wait_until(lambda: (r := lab.run(run_id)).status in RunStatus.FINAL and r, 60, "the run to end")
        took_s = time.monotonic() - gone_at
    lab.join_worker(timeout_s=30)
    assert run.status == RunStatus.FAILED
    # Hits of answers stored before the upstream went still succeed: the fill notices that
    # nothing new is stored while requests fail.
    assert run.status_reason.startswith("the cache fill stopped: "), run.status_reason
    assert "requests to http://127.0.0.1:" in run.status_reason and "no answer was stored in" in run.status_reason
    assert "the most common error answer: 502" in run.status_reason, run.status_reason
    assert took_s < 15, took_s
    print(f"external upstream gone during the fill: run failed {took_s:.1f} s later: {run.status_reason}")


# --------------------------------------------------------------------------- item 4: special files


REQUEST_LINE = '{"messages": [{"role": "user", "content": "Say hi."}]}\n'


def test_request_files_that_became_a_fifo_or_dev_zero_fail_their_run_in_one_line(
    lab: Lab, stub: ManagedService, tmp_path: Path
) -> None:
    paths = {name: tmp_path / f"{name}.jsonl" for name in ("fifo", "zero", "good")}
    for path in paths.values():
        path.write_text(REQUEST_LINE * 5)
    ids = lab.enqueue(
        *[
            stub_spec(stub.url, duration_s=2, workload={"kind": "custom", "requests_path": str(path)})
            for path in paths.values()
        ]
    )
    paths["fifo"].unlink()
    os.mkfifo(paths["fifo"])  # no writer: an open for reading would block for good
    paths["zero"].unlink()
    paths["zero"].symlink_to("/dev/zero")  # endless: a read would fill the worker's memory
    began = time.monotonic()
    lab.start_worker()
    lab.join_worker(timeout_s=120)
    fifo_run, zero_run, good_run = (lab.run(run_id) for run_id in ids)
    for run, path, kind in ((fifo_run, paths["fifo"], "a FIFO"), (zero_run, paths["zero"], "a character device")):
        assert run.status == RunStatus.FAILED and run.status_reason is not None
        assert str(path) in run.status_reason and kind in run.status_reason and "regular file" in run.status_reason
        assert "\n" not in run.status_reason
    assert good_run.status == RunStatus.DONE, good_run.status_reason  # the worker went on
    print(
        f"FIFO: {fifo_run.status_reason}\n/dev/zero: {zero_run.status_reason}\nqueue of 3 in "
        f"{time.monotonic() - began:.1f} s"
    )


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_the_real_cli_refuses_a_fifo_and_dev_zero_in_one_line(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "requests.jsonl"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    began = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "lab",
            "run",
            "--preset",
            "seed-exp1",
            "--quick",
            "--set",
            "workload.kind=custom",
            "--set",
            f"workload.requests_path={path}",
        ],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "LAB_DATA_DIR": str(tmp_path / "data")},
    )
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert str(path) in result.stderr and "not a regular file" in result.stderr
    assert time.monotonic() - began < 30
    print(result.stderr.strip())


# --------------------------------------------------------------------------- item 10: error answers


def test_a_run_whose_prompts_exceed_the_context_says_so_and_the_log_keeps_it(lab: Lab, tmp_path: Path) -> None:
    requests = tmp_path / "long.jsonl"
    # SmolLM2's context is 8,192 tokens: 9,000 one-token words do not fit.
    requests.write_text(json.dumps({"messages": [{"role": "user", "content": " word" * 9000}]}) + "\n")
    [run_id] = lab.enqueue(
        naive_spec(duration_s=3, warmup_requests=0, workload={"kind": "custom", "requests_path": str(requests)})
    )
    lab.run_queue()
    run = lab.run(run_id)
    assert run.status == RunStatus.FAILED and run.status_reason is not None
    assert (
        "the most common error answer" in run.status_reason
        and "400 This model's maximum context length is" in run.status_reason
    ), run.status_reason
    assert "lengthen the duration" not in run.status_reason
    with Session(lab.engine) as session:
        stored = store.get_run_series(session=session, run_id=run_id)
        assert stored is not None and stored.service_log_tails is not None
        tails = stored.service_log_tails
    assert "maximum context length" in tails["naive"]
    print(run.status_reason)
