"""The CLI's arguments of the id/number/path class, and a worker that can never run the
queue: each is one clear line and an exit status, never a traceback (real processes)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.integration


def lab(data_dir: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lab", *args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "LAB_DATA_DIR": str(data_dir)},
    )


@pytest.mark.parametrize(
    "args, expected",
    [
        (["runs", "export", "--csv", "{folder}"], "error: cannot write"),
        (["runs", "export", "--csv", "{folder}/missing/x.csv"], "No such file or directory"),
        (["runs", "export", "--csv", "/proc/version"], "error: cannot write"),
        (["runs", "export", "99999999999999999999999999", "--csv", "{folder}/x.csv"], "a run id must be between"),
        (["runs", "export", "--", "-3", "--csv", "{folder}/x.csv"], "a run id must be between"),
        (["runs", "export", "1e3", "--csv", "{folder}/x.csv"], "a run id must be a whole number"),
        (["runs", "export", "٣", "--csv", "{folder}/x.csv"], "a run id must be a whole number"),
        (["runs", "export", "7", "--csv", "{folder}/x.csv"], "error: no run with id 7"),
        (["runs", "list", "--limit", "-1"], "a limit must be between"),
        (["runs", "list", "--limit", "10000000000000000000000"], "a limit must be between"),
        (["start", "--port", "0"], "a port must be between"),
        (["run", "--preset", "seed-exp1", "--repeats", "99999999999999"], "repeats must be between"),
        (["reproduce", "--repeats", "-2"], "repeats must be between"),
        (["reproduce", "--quick", "--output", "/proc/version/report"], "error: "),
        (["reproduce", "--until-decided", "--budget", "60s"], "is under one round's predicted"),
        (["reproduce", "--status", "5"], "error: no long experiment #5"),
        (["reproduce", "--stop", "5"], "error: no long experiment #5"),
        (["reproduce", "--resume", "0"], "a long experiment id must be between"),
    ],
)
def test_bad_ids_numbers_and_paths_are_one_clear_line(tmp_path: Path, args: list[str], expected: str) -> None:
    result = lab(tmp_path / "data", *[arg.replace("{folder}", str(tmp_path)) for arg in args])
    assert result.returncode in (1, 2), result.stderr
    assert "Traceback" not in result.stderr
    assert expected in result.stderr, result.stderr
    assert len([line for line in result.stderr.splitlines() if line.startswith("error") or ": error:" in line]) == 1


HOLDER = """
import sqlite3, sys, time
from pathlib import Path
from lab.queue.worker_lock import WorkerLock
data_dir = Path(sys.argv[1])
lock = WorkerLock(data_dir)
lock.acquire()
connection = sqlite3.connect(data_dir / "lab.db")
connection.execute("select count(*) from runs").fetchall()
print("ready", flush=True)
time.sleep(600)
"""


def test_lab_run_ends_with_one_line_when_the_worker_uses_a_removed_database(tmp_path: Path) -> None:
    """A worker (here a stand-in that never notices) holds the lock and a removed file."""
    data_dir = tmp_path / "data"
    assert lab(data_dir, "runs", "list").returncode == 0  # creates the database
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(data_dir)], cwd=PROJECT_ROOT, text=True, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        for name in ("lab.db", "lab.db-wal", "lab.db-shm"):
            (data_dir / name).unlink(missing_ok=True)
        started = time.monotonic()
        result = lab(data_dir, "run", "--preset", "seed-exp1", "--quick", "--set", "load.duration_s=2", timeout=120)
        assert result.returncode == 1, result.stderr
        assert "still uses a database file that was removed" in result.stderr
        assert "Traceback" not in result.stderr
        assert time.monotonic() - started < 110
    finally:
        holder.kill()
        holder.wait()


def test_runs_export_writes_csv_to_standard_output_without_a_file_or_with_a_dash(tmp_path: Path) -> None:
    for args in (["runs", "export", "--csv"], ["runs", "export", "--csv", "-"], ["runs", "export"]):
        result = lab(tmp_path / "data", *args)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("run_id,"), result.stdout[:200]
        assert "HTTP Request" not in result.stderr
    assert not (PROJECT_ROOT / "-").exists()
