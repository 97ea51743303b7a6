"""``lab run`` as a person meets it in a terminal (a real pseudo-terminal): a live progress count, no
library log line; and with ``--json`` only JSON on standard output."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT
from tests.stub_openai import StubServer

pytestmark = pytest.mark.integration


def stub_spec(folder: Path, url: str) -> Path:
    path = folder / "stub.json"
    path.write_text(
        json.dumps(
            {
                "name": "terminal stub",
                "base": {
                    "backend": "external",
                    "target_url": url,
                    "model": "stub",
                    "max_tokens": 8,
                    "warmup_requests": 0,
                    "load": {"vus": 1, "duration_s": 3, "graceful_stop_s": 1},
                },
                "grid": {"load.vus": [1, 2]},
            }
        ),
        encoding="utf-8",
    )
    return path


def run_on_a_terminal(argv: list[str], env: dict[str, str], timeout_s: float = 180) -> tuple[int, str]:
    """Run ``argv`` with its standard output and error on a pseudo-terminal; (exit status, all it wrote)."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(argv, cwd=PROJECT_ROOT, env=env, stdin=follower, stdout=follower, stderr=follower)
    os.close(follower)
    chunks = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.5)
        if ready:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the follower side closed: the process ended
                break
            if not data:
                break
            chunks.append(data)
        elif process.poll() is not None:
            break
    process.wait(timeout=30)
    os.close(leader)
    return process.returncode, b"".join(chunks).decode(errors="replace")


def test_lab_run_shows_progress_on_a_terminal_and_only_json_with_json(stub_server: StubServer, tmp_path: Path) -> None:
    spec = stub_spec(tmp_path, stub_server.url)
    env = {**os.environ, "LAB_DATA_DIR": str(tmp_path / "data"), "COLUMNS": "160"}
    status, shown = run_on_a_terminal([sys.executable, "-m", "lab", "run", "--spec", str(spec)], env)
    assert status == 0, shown[-3000:]
    assert "of 2 runs done" in shown and "2 of 2 runs done" in shown, shown[-3000:]
    assert "HTTP Request" not in shown and "httpx" not in shown
    as_json = subprocess.run(
        [sys.executable, "-m", "lab", "run", "--spec", str(spec), "--json"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert as_json.returncode == 0, as_json.stderr[-3000:]
    records = json.loads(as_json.stdout)  # the whole of standard output is one JSON document
    assert [record["status"] for record in records] == ["done", "done"]
