"""Sign-in and lab members in a real headless Chromium (Playwright), against real servers.

1. Sign-in configured: whatever URL a browser opens first (a deep link, with or without a
   query string, a reload), it sees only the sign-in (issue 25, item 0).
2. Sign-in off: each page opened first in a new browser and reloaded keeps the real navigation
   and sidebar.
3. A real OpenID Connect provider (``oidc-provider-mock`` on a local port): two members and
   an admin sign in; each sees the lab only after signing in, launches a run and sees their
   own name on it; the second member cannot cancel the first's run (the control is disabled
   and a forged click changes nothing); the admin can; sign-out works.

The lab runs as ``python -m lab start`` (1, configured for sign-in; 2, the browser tests' shared
lab) or as Streamlit alone (3: no worker, so the launched runs stay queued and nothing heavy
starts).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from db.models import Run, RunAudit, RunStatus
from services.processes import find_free_port
from tests.support.browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    PROJECT_ROOT,
    BrowserLab,
    lab_env,
    stop_process_group,
    wait_for_app,
)

pytestmark = [pytest.mark.browser, pytest.mark.integration]

SIGN_IN_TEXT = "This lab is shared: sign in to use it."
# Every page's URL, opened first: the bug ran pages/<name>.py for these without the gate.
PAGE_URLS = [
    "runs?run=1",
    "runs",
    "run_detail",
    "run_detail?run=1",
    "compare",
    "compare?runs=1,2",
    "services",
    "workers",
    "new_experiment",
    "new_experiment?preset=seed-exp1",
    "",
    "?run=1",
    "common",
    "streamlit_app",
]
PAGE_TITLES = {
    "runs": "Runs",
    "run_detail": "Run detail",
    "compare": "Compare",
    "trends": "Trends",
    "services": "Services",
    "workers": "Workers",
    "new_experiment": "New experiment",
}
NAVIGATION = ["New experiment", "Runs", "Run detail", "Compare", "Trends", "Services", "Workers"]
# What only the lab shows (or what Streamlit's own navigation of the pages/ folder shows).
# (An unknown URL such as /common may add Streamlit's "page not found" notice naming it.)
LAB_ONLY_TEXT = [
    "Queue",
    "Start a service",
    "Launch",
    "No runs yet",
    "streamlit app",
    "Run detail",
    "Workers",
    "Compare",
    "Nothing to compare",
]
AUTH_TOML = """[auth]
redirect_uri = "http://127.0.0.1:{port}/oauth2callback"
cookie_secret = "a-test-cookie-secret-of-enough-length"
client_id = "serving-lab"
client_secret = "serving-lab-secret"
server_metadata_url = "{metadata_url}"

[roles]
admin = ["ada@lab.example"]
"""


@contextmanager
def lab_server(tmp_path: Path, *, secrets: Callable[[int], str] | None, worker: bool) -> Iterator[str]:
    """The web lab on a free port (``lab start``, or Streamlit alone), stopped afterwards."""
    data_dir, port = tmp_path / "lab-data", find_free_port()
    env = {**lab_env(data_dir), "AUTHLIB_INSECURE_TRANSPORT": "1"}
    if secrets is not None:
        secrets_file = tmp_path / "secrets.toml"
        secrets_file.write_text(secrets(port))
        env["STREAMLIT_SECRETS_FILES"] = str(secrets_file)
    command = (
        [sys.executable, "-m", "lab", "start", "--port", str(port)]
        if worker
        else [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            "streamlit_app.py",
            "--server.port",
            str(port),
            "--server.address",
            "127.0.0.1",
            "--server.headless",
            "true",
        ]
    )
    (PROJECT_ROOT / "test-artifacts").mkdir(exist_ok=True)
    log = (PROJECT_ROOT / "test-artifacts" / "members-browser-lab.log").open("w")
    process = subprocess.Popen(
        command, cwd=PROJECT_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while not healthy(url):
            assert process.poll() is None, "the lab exited; see test-artifacts/members-browser-lab.log"
            assert time.monotonic() < deadline, "the lab did not answer /_stcore/health within 90 s"
            time.sleep(0.5)
        yield url
    finally:
        stop_process_group(process)
        log.close()


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/_stcore/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def settled(page) -> None:
    """Wait until Streamlit has finished running the script (and a moment for late messages)."""
    page.wait_for_timeout(500)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=60_000)


def assert_only_sign_in(page, where: str) -> None:
    page.get_by_text(SIGN_IN_TEXT).first.wait_for(timeout=60_000)
    settled(page)
    body = page.inner_text("body")
    shown = [text for text in LAB_ONLY_TEXT if text in body]
    assert not shown, f"{where}: the sign-in screen also shows {shown}:\n{body[:1500]}"
    # The button may come a rerun after the text on a loaded machine: wait for it, then count.
    page.get_by_role("button", name="Sign in").first.wait_for(timeout=60_000)
    assert page.get_by_role("button", name="Sign in").count() == 1, where
    assert page.locator('[data-testid="stSidebarNav"]').count() == 0, where


def test_with_sign_in_configured_every_url_shows_only_the_sign_in(tmp_path: Path) -> None:
    unreachable = "http://127.0.0.1:9/.well-known/openid-configuration"  # never reached before "Sign in"

    def secrets(port: int) -> str:
        return AUTH_TOML.format(port=port, metadata_url=unreachable)

    with lab_server(tmp_path, secrets=secrets, worker=True) as url, chromium() as browser:
        for path in PAGE_URLS:  # the first of these is the server process's very first request
            context = browser.new_context()
            page = context.new_page()
            page.goto(f"{url}/{path}")
            assert_only_sign_in(page, f"/{path}")
            page.reload()
            assert_only_sign_in(page, f"/{path} reloaded")
            context.close()


def assert_lab_navigation(page, title: str, where: str) -> None:
    page.get_by_role("heading", name=title).first.wait_for(timeout=60_000)
    settled(page)
    links = page.locator('[data-testid="stSidebarNav"] a').all_inner_texts()
    # Each link reads "<icon name>\n<title>": the title is its last line.
    assert [link.strip().splitlines()[-1].strip() for link in links] == NAVIGATION, (where, links)
    sidebar = page.locator('[data-testid="stSidebar"]').inner_text()
    assert "Queue" in sidebar and "Services" in sidebar, (where, sidebar)
    assert "streamlit app" not in sidebar and "common" not in sidebar, (where, sidebar)


def test_with_sign_in_off_each_page_opened_first_and_reloaded_keeps_the_navigation(browser_lab: BrowserLab) -> None:
    url = browser_lab.url
    with chromium() as browser:
        for path in ["runs?run=1", "run_detail", "compare", "services", "workers", "new_experiment", ""]:
            title = PAGE_TITLES.get(path.split("?")[0], "New experiment")
            page = browser.new_context().new_page()
            page.goto(f"{url}/{path}")
            assert_lab_navigation(page, title, f"/{path}")
            page.reload()
            assert_lab_navigation(page, title, f"/{path} reloaded")
            page.context.close()


# --------------------------------------------------------------------------- two members and an admin


def sign_in(browser, url: str, email: str):
    """A new browser (own cookies) opens a deep link, sees only the sign-in, signs in at the provider."""
    page = browser.new_context(viewport={"width": 1400, "height": 1100}).new_page()
    page.goto(f"{url}/runs")
    assert_only_sign_in(page, f"{email} before signing in")
    page.get_by_role("button", name="Sign in").click()
    page.locator("input[name=sub]").wait_for(timeout=30_000)  # the provider's own form
    page.locator("input[name=sub]").fill(email)
    page.get_by_role("button", name="Authorize").click()
    page.wait_for_url(re.compile(re.escape(url) + r"/?(\?.*)?$"), timeout=60_000)
    wait_for_app(page, "Launching queues runs")
    sidebar = page.locator('[data-testid="stSidebar"]').inner_text()
    assert email in sidebar and "Queue" in sidebar, sidebar
    return page


def launch_run(page, name: str) -> None:
    page.get_by_role("tab", name="Build a grid").click()
    for label, value in (
        ("Experiment name", name),
        ("VUs (one or more, e.g. 1, 8, 32)", "1"),
        ("Duration per run (s)", "5"),
    ):
        box = page.get_by_label(label, exact=True)
        box.fill(value)
        box.press("Enter")
        page.wait_for_timeout(400)
    page.get_by_role("button", name="Launch grid").click()
    wait_for_app(page, "queued: 1 run")


def runs_of(data_dir: Path, email: str) -> list[Run]:
    engine = create_engine(f"sqlite:///{data_dir / 'lab.db'}")
    try:
        with Session(engine) as session:
            return list(session.scalars(select(Run).where(Run.launched_by == email)))
    finally:
        engine.dispose()


def sees_own_name(page, url: str, run_id: int, email: str) -> None:
    """Run detail names who launched the run."""
    page.goto(f"{url}/run_detail?run={run_id}")
    wait_for_app(page, f"by {email}")


def select_run(page, run_id: int) -> None:
    box = page.locator('[data-testid="stMultiSelect"]').filter(has_text="Selected runs")
    box.click()
    page.keyboard.type(f"#{run_id} ")
    page.keyboard.press("Enter")
    page.keyboard.press("Escape")
    settled(page)


FORGE_CLICK_JS = """(button) => {
  const key = Object.keys(button).find(k => k.startsWith('__reactProps'));
  if (key && button[key].onClick) { button[key].onClick({preventDefault() {}, stopPropagation() {}}); return true; }
  button.removeAttribute('disabled'); button.click(); return false;
}"""


def test_two_members_and_an_admin_against_a_real_oidc_provider(tmp_path: Path) -> None:
    os.environ.setdefault("AUTHLIB_INSECURE_TRANSPORT", "1")
    from oidc_provider_mock import run_server_in_thread

    with run_server_in_thread(port=find_free_port()) as provider:
        metadata_url = f"http://localhost:{provider.server_port}/.well-known/openid-configuration"
        assert httpx.get(metadata_url, timeout=10).status_code == 200

        def secrets(port: int) -> str:
            return AUTH_TOML.format(port=port, metadata_url=metadata_url)

        with lab_server(tmp_path, secrets=secrets, worker=False) as url, chromium() as browser:
            data_dir = tmp_path / "lab-data"
            alice = sign_in(browser, url, "alice@lab.example")
            launch_run(alice, "alice's run")
            (alices_run,) = runs_of(data_dir, "alice@lab.example")
            sees_own_name(alice, url, alices_run.id, "alice@lab.example")

            bob = sign_in(browser, url, "bob@lab.example")
            launch_run(bob, "bob's run")
            (bobs_run,) = runs_of(data_dir, "bob@lab.example")
            sees_own_name(bob, url, bobs_run.id, "bob@lab.example")
            bob.get_by_role("link", name="Runs", exact=True).first.click()
            wait_for_app(bob, "Selected runs")
            select_run(bob, alices_run.id)
            cancel = bob.get_by_role("button", name="Cancel", exact=True)
            assert cancel.is_disabled()
            cancel.evaluate(FORGE_CLICK_JS)  # a forged click on the disabled control
            settled(bob)
            bob.wait_for_timeout(2000)
            (still,) = runs_of(data_dir, "alice@lab.example")
            assert still.status == RunStatus.QUEUED and not still.cancel_requested

            ada = sign_in(browser, url, "ada@lab.example")
            ada.get_by_role("link", name="Runs", exact=True).first.click()
            wait_for_app(ada, "Selected runs")
            select_run(ada, alices_run.id)
            ada.get_by_role("button", name="Cancel", exact=True).click()
            wait_for_app(ada, "Cancel requested for 1 run")
            (cancelled,) = runs_of(data_dir, "alice@lab.example")
            assert cancelled.status == RunStatus.CANCELLED
            engine = create_engine(f"sqlite:///{data_dir / 'lab.db'}")
            with Session(engine) as session:
                trail = session.scalars(select(RunAudit).where(RunAudit.run_id == alices_run.id)).all()
                assert [(line.action, line.actor) for line in trail] == [("cancel", "ada@lab.example")]
            engine.dispose()

            ada.get_by_role("button", name="Sign out").click()
            # Signing out may pass through the provider's end-session page, later on a slow
            # machine: wait for it or for the sign-in, whichever comes, before the next URL.
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if f":{provider.server_port}" in ada.url:  # the provider's end-session page
                    ada.locator("button[type=submit], input[type=submit]").first.click()
                    ada.wait_for_timeout(1500)
                    break
                if ada.get_by_text(SIGN_IN_TEXT).count():
                    break
                ada.wait_for_timeout(500)
            ada.goto(f"{url}/runs?run={alices_run.id}")
            assert_only_sign_in(ada, "after signing out")
