"""`python -m lab start` with real processes: its worker and Streamlit never outlive it,
and a start after a SIGKILL clears what the killed one left and takes the port again."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from lab.cli.start_guard import LabPidFile, ProcessId
from services.processes import find_free_port
from tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.integration


def start_lab(data_dir: Path, port: int) -> subprocess.Popen:
    env = {**os.environ, "LAB_DATA_DIR": str(data_dir)}
    return subprocess.Popen(
        [sys.executable, "-m", "lab", "start", "--port", str(port)],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def wait_until_serving(start: subprocess.Popen, data_dir: Path, port: int, timeout_s: float = 180) -> list[int]:
    """The children's pids once Streamlit listens on ``port``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert start.poll() is None, start.stderr.read() if start.stderr else start.returncode
        owner, children = LabPidFile(data_dir).read()
        if owner is not None and owner.pid == start.pid:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    return [child.pid for child in children]
        time.sleep(0.5)
    raise AssertionError("the lab did not start serving")


def all_gone(pids: list[int], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return True
        time.sleep(0.2)
    return False


def test_sigkill_of_start_takes_its_children_and_a_second_start_works(tmp_path: Path) -> None:
    port = find_free_port()
    first = start_lab(tmp_path, port)
    second = None
    children: list[int] = []
    try:
        children = wait_until_serving(first, tmp_path, port)
        assert len(children) == 2
        # A second start beside a running one says so and touches nothing.
        beside = start_lab(tmp_path, find_free_port())
        _, stderr = beside.communicate(timeout=60)
        assert beside.returncode == 1 and f"the lab already runs (pid {first.pid})" in stderr
        assert all(psutil.pid_exists(pid) for pid in children)
        first.kill()  # SIGKILL: none of the start process's own clean-up runs
        first.wait(timeout=10)
        assert all_gone(children, timeout_s=10), "the worker or Streamlit outlived a killed lab start"

        second = start_lab(tmp_path, port)
        new_children = wait_until_serving(second, tmp_path, port)
        assert set(new_children).isdisjoint(children)
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=60) is not None
        assert all_gone(new_children, timeout_s=10)
        assert not (tmp_path / "lab-start.json").exists()
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
        for pid in children:
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()


def test_a_start_clears_children_a_killed_start_left(tmp_path: Path) -> None:
    """Where no death signal arrived (another OS, a sandbox): the pid file names them."""
    gone_owner = subprocess.Popen([sys.executable, "-c", "pass"])
    owner = ProcessId.of(gone_owner.pid)
    gone_owner.wait()
    leftover = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        child = ProcessId.of(leftover.pid)
        (tmp_path / "lab-start.json").write_text(json.dumps({"owner": owner.__dict__, "children": [child.__dict__]}))
        assert LabPidFile(tmp_path).running_owner() is None
        assert LabPidFile(tmp_path).clear_stale(grace_s=5) == [leftover.pid]
        assert leftover.wait(timeout=10) is not None
        assert not (tmp_path / "lab-start.json").exists()
    finally:
        if leftover.poll() is None:
            leftover.kill()


def test_a_pid_file_never_stops_a_process_that_reused_a_pid(tmp_path: Path) -> None:
    unrelated = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        wrong_time = ProcessId(unrelated.pid, psutil.Process(unrelated.pid).create_time() - 1000)
        gone = ProcessId(2**22 + 7, 1.0)
        (tmp_path / "lab-start.json").write_text(
            json.dumps({"owner": gone.__dict__, "children": [wrong_time.__dict__]})
        )
        assert LabPidFile(tmp_path).clear_stale(grace_s=1) == []
        assert unrelated.poll() is None
    finally:
        unrelated.kill()
