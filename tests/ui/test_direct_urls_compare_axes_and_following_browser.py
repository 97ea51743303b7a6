"""Pages opened directly, Compare's axes and pages that follow the lab, in a real headless Chromium
against the browser tests' shared lab (``python -m lab start``, the ``browser_lab`` fixture),
runs seeded through the store (no load needed):

- a page opened directly asks Streamlit's start-up questions without a 404;
- Compare of two runs differing in VUs and max tokens joins them in no chart; of two differing
  in VUs alone, it draws one line through both;
- Workers and Services change state while open, without a reload (and so does the sidebar).
"""

from __future__ import annotations

import functools
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine

from db import worker_store
from db.engine import get_engine
from pages.view.core_paths import BASE_URL_SCRIPT
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, BrowserLab, shot, wait_for_app
from tests.support.seeded_lab import add_done_run

pytestmark = [pytest.mark.browser, pytest.mark.integration]

# Points per trace of each Plotly chart inside the element keyed ``key`` (Streamlit's st-key class).
# _fullData: Plotly's decoded traces (``data`` may hold the base64 arrays Plotly 6 writes).
CHART_POINTS_JS = """(key) => Array.from(document.querySelectorAll(`.st-key-${key} .js-plotly-plot`))
  .map(plot => plot._fullData.map(trace => (trace.x || []).length))"""
CHARTS = ("compare_throughput", "compare_requests", "compare_latency", "compare_pareto_chart")
FOLLOW_TIMEOUT_MS = 30_000


@pytest.fixture(scope="module")
def lab(browser_lab: BrowserLab) -> tuple[str, Engine, dict[str, tuple[int, int]]]:
    """The shared lab, with two pairs of finished runs seeded into its store."""
    engine = get_engine(browser_lab.database_url)
    # A label no worker has: the lab's running worker cannot claim a run before it is marked done.
    seeded = functools.partial(add_done_run, engine, requires=("seeded-not-run",))
    pairs = {
        "apart": (seeded(vus=1, max_tokens=32, tok=16.0, p95=2.0), seeded(vus=2, max_tokens=16, tok=20.0, p95=3.0)),
        "vus alone": (seeded(vus=1, max_tokens=64, tok=16.0, p95=2.0), seeded(vus=2, max_tokens=64, tok=30.0, p95=3.0)),
    }
    return browser_lab.url, engine, pairs


@pytest.fixture(scope="module")
def browser_page() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 4000})
        yield page
        browser.close()


def test_a_page_opened_directly_gets_no_404(lab: tuple[str, Engine, dict[str, tuple[int, int]]]) -> None:
    url, _, _ = lab
    for page in ("runs", "compare", "workers"):
        html = httpx.get(f"{url}/{page}", timeout=10, headers={"accept-encoding": "gzip"})
        assert html.status_code == 200 and BASE_URL_SCRIPT.decode() in html.text, page
    assert httpx.get(f"{url}/_stcore/health", timeout=10).status_code == 200


def test_compare_joins_runs_only_along_the_axis_and_pages_follow_the_lab(
    lab: tuple[str, Engine, dict[str, tuple[int, int]]], browser_page: Any
) -> None:
    url, engine, pairs = lab
    page = browser_page
    not_found: list[str] = []
    page.on("response", lambda response: not_found.append(response.url) if response.status == 404 else None)

    first, second = pairs["apart"]
    page.goto(f"{url}/compare?runs={first},{second}")
    wait_for_app(page, "Throughput against latency (Pareto)")
    page.locator(".st-key-compare_pareto_chart .js-plotly-plot").wait_for(timeout=FOLLOW_TIMEOUT_MS)
    for key in CHARTS:
        traces = [points for chart in page.evaluate(CHART_POINTS_JS, key) for points in chart]
        assert traces and max(traces) == 1, (key, traces)  # two series of one point each: no joining line
    shot(page, "compare-two-settings-apart")

    first, second = pairs["vus alone"]
    page.goto(f"{url}/compare?runs={first},{second}")
    wait_for_app(page, "Throughput against latency (Pareto)")
    page.locator(".st-key-compare_pareto_chart .js-plotly-plot").wait_for(timeout=FOLLOW_TIMEOUT_MS)
    for key in ("compare_throughput", "compare_requests", "compare_pareto_chart"):
        assert page.evaluate(CHART_POINTS_JS, key) == [[2]], key
    assert not not_found, not_found  # Streamlit's start-up asked nothing under /compare

    # Workers: a worker that joins while the page is open shows up without a reload.
    page.goto(f"{url}/workers")
    wait_for_app(page, "workers alive")
    page.evaluate("() => { window.__notReloaded = true; }")
    worker_store.register_worker(engine=engine, name="joined-box", host="joined-host", pid=1, labels=[], hardware={})
    page.get_by_text("2 of 2 workers alive", exact=False).first.wait_for(timeout=FOLLOW_TIMEOUT_MS)
    assert page.evaluate("() => window.__notReloaded === true")

    # Services: a state recorded while the page is open shows in its table and the sidebar.
    worker = socket.gethostname()
    worker_store.upsert_service_record(engine=engine, worker=worker, name="redis", kind="redis", state="stopped")
    page.goto(f"{url}/services")
    wait_for_app(page, "redis")
    page.evaluate("() => { window.__notReloaded = true; }")
    worker_store.upsert_service_record(
        engine=engine, worker=worker, name="redis", kind="redis", state="failed", message="port in use"
    )
    page.locator("[data-testid='stSidebar']").get_by_text("redis: failed").wait_for(timeout=FOLLOW_TIMEOUT_MS)
    page.get_by_text("redis · failed").first.wait_for(timeout=FOLLOW_TIMEOUT_MS)
    assert page.evaluate("() => window.__notReloaded === true")
    shot(page, "services-followed")
