"""Screenshots of every page on a seeded lab, for docs/screenshots/ (not a test).

Seeds a temporary lab with ``tests/ui/conftest.seed_database`` (a finished quick
seed-exp1, a failed and a queued run), serves it with Streamlit on a free loopback port
(no worker: nothing runs) and photographs each page in Debian's Chromium::

    .venv/bin/python -m tests.ui.screenshots docs/screenshots after
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from services.supervisor import find_free_port
from tests.ui.conftest import PROJECT_ROOT, seed_database
from tests.ui.test_browser import CHROMIUM, CHROMIUM_ARGS, wait_for_app

PAGES = {"new-experiment": ("", "Launching queues runs"), "runs": ("runs", "Filters"),
         "run-detail": ("run_detail?run=1", "Per second"), "compare": ("compare", "Charts"),
         "services": ("services", "Start a service"), "run-detail-failed": ("run_detail?run=5", "Run #5")}


def main(folder: str, suffix: str) -> None:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as data_dir:
        env = {key: value for key, value in os.environ.items() if not key.startswith("LAB_")}
        env["LAB_DATA_DIR"] = data_dir
        os.environ.update(env)
        from db.engine import get_engine
        from lab.settings import get_settings

        get_settings.cache_clear()
        seed_database(get_engine(get_settings().resolved_database_url))
        port = find_free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "streamlit_app.py", "--server.port", str(port),
             "--server.headless", "true"], cwd=PROJECT_ROOT, env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(120):
                try:
                    if httpx.get(f"{url}/_stcore/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.5)
            from playwright.sync_api import sync_playwright

            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                for name, (path, text) in PAGES.items():
                    page.goto(f"{url}/{path}")
                    wait_for_app(page, text)
                    page.wait_for_timeout(3000)
                    page.screenshot(path=str(out / f"{name}-{suffix}.png"), full_page=True)
                browser.close()
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
