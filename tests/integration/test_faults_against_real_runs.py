"""Round 2 faults against real runs (k6, the OpenAI stub, a worker process): a full disk
under the run folder, a stop signal mid-run, an external target whose /metrics is not
Prometheus text, and a database file removed under an idle worker."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from db.models import RunStatus
from services.processes import find_free_port
from tests.stub_openai import StubServer
from tests.support.integration_lab import PROJECT_ROOT, Lab, is_running, stub_spec

pytestmark = pytest.mark.integration


@pytest.fixture()
def tiny_runs_dir(lab: Lab) -> Iterator[Path]:
    """A 256 kB tmpfs as the run folder: k6's outputs fill it within seconds."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    runs_dir = lab.settings.runs_dir
    runs_dir.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(runs_dir)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield runs_dir
    finally:
        subprocess.run(["umount", "-l", str(runs_dir)], check=False)


def test_a_disk_that_fills_up_mid_run_still_ends_the_run_with_its_reason(
    lab: Lab, stub, tiny_runs_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lab.settings.keep_raw = "all"  # a raw copy on disk, as k6's own file was before: it fills the disk
    [run_id] = lab.enqueue(stub_spec(stub.url, duration_s=20, vus=4))
    lab.start_worker()
    lab.join_worker(timeout_s=120)
    run = lab.run(run_id)
    assert (run.status in RunStatus.FINAL and run.status != RunStatus.DONE) or run.requests_ok, run.status
    assert run.finished_at is not None and run.progress is None
    assert run.status_reason, "a run that ended on a full disk must say why"
    assert "No space left on device" in run.status_reason or run.status == RunStatus.DONE
    # One line per failure on the console, never a traceback.
    assert not [record for record in caplog.records if record.exc_info], [r.getMessage() for r in caplog.records]


def test_a_data_folder_that_fills_up_database_included_still_records_the_final_state(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The database shares the full disk: the final write frees the run's raw k6 stream."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1500k", "tmpfs", str(mount_point)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    lab = Lab(mount_point / "lab-data")
    lab.settings.keep_raw = "all"  # the raw copy fills the disk; the final write frees it
    try:
        with StubServer(port=find_free_port(), delay_s=0.01) as target:
            [run_id] = lab.enqueue(stub_spec(target.url, duration_s=15, vus=8))
            lab.run_queue()
        run = lab.run(run_id)
        assert run.status == RunStatus.FAILED and run.finished_at is not None and run.progress is None
        assert run.status_reason is not None
        assert "No space left on device" in run.status_reason and "\n" not in run.status_reason
        assert run.requests_ok, "the figures k6 had streamed are kept"
        assert not [record for record in caplog.records if record.exc_info]
    finally:
        lab.close()
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_sigterm_mid_run_keeps_the_partial_figures_and_series(tmp_path: Path, stub) -> None:
    data_dir = tmp_path / "lab-data"
    lab = Lab(data_dir)
    [run_id] = lab.enqueue(stub_spec(stub.url, duration_s=60, vus=2))
    env = {**os.environ, "LAB_DATA_DIR": str(data_dir), "LAB_WORKER_POLL_INTERVAL_S": "0.2"}
    worker = subprocess.Popen(
        [sys.executable, "-m", "lab", "worker"],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lab.wait_for(run_id, lambda r: is_running(r, at_least=6), timeout_s=90)
        time.sleep(2.0)
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=60)
        run = lab.run(run_id)
        assert run.status == RunStatus.INTERRUPTED and run.finished_at is not None
        assert run.requests_ok and run.requests_ok >= 4, (run.requests_ok, stderr)
        assert run.latency_p95_s is not None
        series = lab.series(run_id)
        assert series.get("time_s") and sum(series["requests_ok"]) >= 4
        assert "Traceback" not in stderr
    finally:
        if worker.poll() is None:
            worker.kill()
        lab.close()


HUGE = b"# HELP x y\n" + b"x_total 1\n" * (1024 * 1024)  # 10 MB of valid-looking text
NOT_PROMETHEUS = {
    "html": (200, "text/html", b"<!doctype html><html><body><h1>Welcome</h1></body></html>"),
    "json": (200, "application/json", b'{"status": "ok", "metrics": [1, 2, 3]}'),
    "garbage": (200, "text/plain", bytes(range(256)) * 8),
    "404": (404, "text/plain", b"not found"),
    "500": (500, "text/html", b"<h1>oops</h1>"),
    "huge": (200, "text/plain", HUGE),
    "non-finite": (200, "text/plain", b"vllm:generation_tokens_total NaN\nvllm:prompt_tokens_total 1e400\n"),
}


@pytest.mark.parametrize("kind", sorted(NOT_PROMETHEUS))
def test_an_external_target_whose_metrics_are_not_prometheus_text_keeps_the_client_figures(lab: Lab, kind: str) -> None:
    with StubServer(port=find_free_port(), delay_s=0.05, metrics=NOT_PROMETHEUS[kind]) as target:
        [run_id] = lab.enqueue(stub_spec(target.url, duration_s=2, vus=1))
        lab.run_queue()
    run = lab.run(run_id)
    assert run.status == RunStatus.DONE, run.status_reason
    assert run.requests_ok and run.req_per_s and run.latency_p95_s is not None
    if kind != "non-finite":
        assert "/metrics" in (run.measurement_warnings or ""), run.measurement_warnings
        assert "client's (k6) are kept" in (run.measurement_warnings or "")


def test_a_database_file_removed_under_an_idle_worker_ends_it_and_the_cli_with_one_line(tmp_path: Path) -> None:
    data_dir = tmp_path / "lab-data"
    env = {**os.environ, "LAB_DATA_DIR": str(data_dir), "LAB_WORKER_POLL_INTERVAL_S": "0.2"}
    worker = subprocess.Popen(
        [sys.executable, "-m", "lab", "worker"],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (data_dir / "worker.lock").exists() or not (data_dir / "worker.lock").read_text().strip():
            assert time.monotonic() < deadline and worker.poll() is None
            time.sleep(0.2)
        for name in ("lab.db", "lab.db-wal", "lab.db-shm"):
            (data_dir / name).unlink(missing_ok=True)
        _, stderr = worker.communicate(timeout=30)
        assert worker.returncode == 1
        lines = [line for line in stderr.splitlines() if "error" in line.lower()]
        assert any("database file" in line and "removed or replaced" in line for line in lines), stderr
        assert "Traceback" not in stderr
    finally:
        if worker.poll() is None:
            worker.kill()


def test_a_metrics_page_that_trickles_in_is_given_up_on_not_waited_for() -> None:
    """A target that sends its page a few bytes at a time (each read within the timeout)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from lab.measurement.server_metrics import read_metrics

    class Trickle(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            try:
                for _ in range(200):
                    self.wfile.write(b"vllm:x 1\n")
                    self.wfile.flush()
                    threading.Event().wait(0.05)
            except OSError:
                pass

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        result = read_metrics(f"http://127.0.0.1:{server.server_address[1]}", timeout_s=0.2)
    finally:
        server.shutdown()
    assert result.snapshot is None and "took longer than" in (result.problem or "")
