"""Helpers of the browser tests: the web lab (``python -m lab start``) on a free port with its
own data folder, Debian's Chromium for Playwright, and how a test waits for and types into
Streamlit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.processes import find_free_port

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = PROJECT_ROOT / "test-artifacts" / "screenshots"
RUN_DONE_TIMEOUT_S = 600  # a shared 2-core machine at load 15 took 2.5 min to start the naive server


@dataclass(frozen=True)
class BrowserLab:
    """The web lab the browser tests share (the ``browser_lab`` fixture): its URL and data folder."""

    url: str
    data_dir: Path

    @property
    def database_url(self) -> str:
        return f"sqlite:///{self.data_dir / 'lab.db'}"


def lab_env(data_dir: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("LAB_")}
    env["LAB_DATA_DIR"] = str(data_dir)
    return env


@contextmanager
def running_lab(data_dir: Path, log_path: Path) -> Iterator[str]:
    """``python -m lab start`` (Streamlit and the worker) on a free port with ``data_dir``; its URL.
    Stopped (its whole process group, then the services it started) afterwards."""
    port = find_free_port()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = log_path.open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "lab", "start", "--port", str(port)],
        cwd=PROJECT_ROOT,
        env=lab_env(data_dir),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the lab exited with {process.returncode}; see {log_path}")
            try:
                if httpx.get(f"{url}/_stcore/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the lab did not answer /_stcore/health within 90 s")
            time.sleep(0.5)
        yield url
    finally:
        stop_lab(process, data_dir)
        log.close()


def stop_process_group(process: subprocess.Popen[Any]) -> None:
    """TERM a process group started with ``start_new_session`` (KILL after a minute)."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def stop_lab(process: subprocess.Popen[Any], data_dir: Path) -> None:
    """Stop the lab's process group, then the services it started."""
    stop_process_group(process)
    subprocess.run(
        [sys.executable, "-m", "lab", "services", "down"],
        cwd=PROJECT_ROOT,
        env=lab_env(data_dir),
        timeout=120,
        check=False,
        capture_output=True,
    )


def check_prerequisites() -> None:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run `make setup` (apt-get install chromium)")
    if not (PROJECT_ROOT / "models" / "SmolLM2-135M-Instruct" / "config.json").is_file():
        pytest.fail("models/SmolLM2-135M-Instruct is missing: run `make setup` first")


# True once Streamlit has no script run in progress (its status widget is gone).
IDLE_SCRIPT = "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')"


def wait_for_app(page: Any, text: str, timeout_ms: int = 60_000) -> None:
    """Wait until Streamlit has rendered ``text`` and finished running the script."""
    page.get_by_text(text, exact=False).first.wait_for(timeout=timeout_ms)
    page.wait_for_function(IDLE_SCRIPT, timeout=timeout_ms)


def shot(page: Any, name: str) -> None:
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def fill(page: Any, label: str, value: str) -> None:
    """Type into a Streamlit input and commit it (Enter), as a user would: once the rerun the
    last input started has ended (while it runs, the page can hold the old and the new copy
    of an input)."""
    page.wait_for_function(IDLE_SCRIPT, timeout=60_000)
    box = page.get_by_label(label, exact=True)
    box.fill(value)
    box.press("Enter")
    page.wait_for_timeout(400)
