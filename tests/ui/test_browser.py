"""The whole web lab in a real headless Chromium (Debian's), driven by Playwright.

On the browser tests' shared lab (``python -m lab start``: Streamlit + the queue worker, the
``browser_lab`` fixture), still empty: opens every page, launches a quick grid run against the
real naive server from the form, waits for it to reach done, opens Compare, downloads both
CSVs and checks them. Screenshots go to ``test-artifacts/screenshots/``.
"""

from __future__ import annotations

import csv
import io
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from db.models import Experiment, Run, RunStatus
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, RUN_DONE_TIMEOUT_S, BrowserLab, fill, shot, wait_for_app

pytestmark = [pytest.mark.browser, pytest.mark.integration]


@pytest.mark.empty_browser_lab
def test_lab_in_a_real_browser(browser_lab: BrowserLab) -> None:
    from playwright.sync_api import sync_playwright

    url = browser_lab.url
    engine = create_engine(browser_lab.database_url)
    with Session(engine) as session:
        earlier = session.scalars(select(Run.id)).all()
    assert not earlier, f"the shared browser lab already holds runs {earlier}: this test must see it empty"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
            page.goto(url)
            wait_for_app(page, "Launching queues runs")
            assert page.get_by_role("heading", name="New experiment").is_visible()
            assert page.get_by_text("none started yet").first.is_visible()  # the shared sidebar
            shot(page, "01-new-experiment")

            # Every page opens, each with its empty state.
            for path, text, name in [
                ("runs", "No runs yet. Start from the recommended first experiment", "02-runs-empty"),
                ("run_detail", "No runs yet. Launch one on New experiment", "03-run-detail-empty"),
                ("compare", "Nothing to compare yet", "04-compare-empty"),
                ("services", "No service has been started yet", "05-services-empty"),
            ]:
                page.get_by_role(
                    "link",
                    name={"runs": "Runs", "run_detail": "Run detail", "compare": "Compare", "services": "Services"}[
                        path
                    ],
                    exact=True,
                ).first.click()
                wait_for_app(page, text)
                assert page.url.rstrip("/").endswith(path)
                shot(page, name)

            # A quick grid run against the real naive server, launched from the form.
            page.get_by_role("link", name="New experiment", exact=True).first.click()
            wait_for_app(page, "Launching queues runs")
            page.get_by_role("tab", name="Build a grid").click()
            fill(page, "Experiment name", "browser quick run")
            fill(page, "VUs (one or more, e.g. 1, 8, 32)", "0")
            page.get_by_role("button", name="Launch grid").click()
            wait_for_app(page, "VUs must be whole numbers from 1 to 1024 (got 0)")
            shot(page, "06-grid-validation")
            fill(page, "VUs (one or more, e.g. 1, 8, 32)", "1, 2")
            fill(page, "Duration per run (s)", "5")
            fill(page, "Max tokens per request", "16")
            fill(page, "Graceful stop (s)", "120")  # a busy shared CPU can take a minute a request
            page.get_by_role("button", name="Launch grid").click()
            wait_for_app(page, "queued: 2 runs")
            assert page.url.rstrip("/").endswith("runs")
            page.get_by_text("Live: run #").first.wait_for(timeout=60_000)
            shot(page, "07-runs-live")

            # The live view stops polling and the page refreshes once both runs are done.
            page.get_by_text("2 done").first.wait_for(timeout=RUN_DONE_TIMEOUT_S * 1000)
            with Session(engine) as session:
                runs = session.scalars(select(Run).order_by(Run.id)).all()
                assert [run.status for run in runs] == [RunStatus.DONE, RunStatus.DONE], [
                    (run.status, run.status_reason) for run in runs
                ]
                assert [run.vus for run in runs] == [1, 2]
                assert all(run.requests_ok and run.output_tok_per_s for run in runs)
                run_ids = [run.id for run in runs]
            engine.dispose()
            # Nothing left to follow: the live panel goes away once the page has rerun.
            page.get_by_text("Live: run #").first.wait_for(state="hidden", timeout=30_000)
            shot(page, "08-runs-done")

            page.goto(f"{url}/run_detail?run={run_ids[0]}")
            wait_for_app(page, f"Run #{run_ids[0]} · ✅ done")
            page.locator(".js-plotly-plot").first.wait_for(timeout=30_000)
            shot(page, "09-run-detail")

            page.get_by_role("link", name="Compare", exact=True).first.click()
            wait_for_app(page, "Figures by backend and load")
            page.locator(".js-plotly-plot").first.wait_for(timeout=30_000)
            shot(page, "10-compare")
            with page.expect_download() as table_download:
                page.get_by_role("button", name="Download this table (CSV)").click()
            table_rows = list(csv.DictReader(io.StringIO(Path(table_download.value.path()).read_text())))
            assert [(row["backend"], row["vus"]) for row in table_rows] == [("naive", "1"), ("naive", "2")]
            assert all(float(row["output_tok_per_s"]) > 0 for row in table_rows)
            with page.expect_download() as raw_download:
                page.get_by_role("button", name="Download raw per-run data (CSV)").click()
            raw_rows = list(csv.DictReader(io.StringIO(Path(raw_download.value.path()).read_text())))
            assert sorted(int(row["run_id"]) for row in raw_rows) == run_ids
            assert {row["status"] for row in raw_rows} == {"done"}
            assert {row["experiment"] for row in raw_rows} == {"browser quick run"}

            page.get_by_role("link", name="Services", exact=True).first.click()
            wait_for_app(page, "Start a service")
            shot(page, "11-services")
        finally:
            browser.close()


# What one look at the Runs page reads: the live panel's phase, the run's row in the table,
# the sidebar's active line and running count, and the points of the live throughput chart.
LOOK_JS = """(runId) => {
  const panel = Array.from(document.querySelectorAll('[data-testid="stMarkdownContainer"]'))
    .map(e => e.innerText).find(t => t.startsWith('Live: run #' + runId + ' '));
  let row = null;
  for (const r of document.querySelectorAll('[data-testid="stDataFrame"] [role="row"]')) {
    const cells = Array.from(r.querySelectorAll('[role="gridcell"]')).map(c => c.textContent);
    if (cells[0] === String(runId)) { row = cells[1]; }
  }
  const sidebar = document.querySelector('[data-testid="stSidebar"]');
  const side = sidebar ? sidebar.innerText : '';
  const active = side.split('\\n').find(l => l.includes('#' + runId + ' '));
  const running = (side.match(/running\\s*\\n\\s*(\\d+)/) || [])[1];
  let points = 0;
  for (const gd of document.querySelectorAll('.js-plotly-plot')) {
    const title = gd.querySelector('.gtitle');
    if (title && title.textContent === 'Output tokens per second' && gd.calcdata && gd.calcdata[0]) {
      points = gd.calcdata[0].filter(p => p.y !== undefined && p.y !== null && !Number.isNaN(p.y)).length;
    }
  }
  return {panel: panel ? panel.split(' · ')[1] : null, row: row,
          side: active ? active.slice(active.lastIndexOf(': ') + 2) : null, running: running, points: points,
          marker: window.__notReloaded === true};
}"""


def test_live_view_agrees_everywhere_without_reloading(browser_lab: BrowserLab) -> None:
    """Launch a short naive run from the form and watch the Runs page, never reloading it:
    panel, table row and sidebar say the same phase (twice at least, at two phases), a live
    chart has 5 points or more before the load ends, and the row becomes done."""
    from playwright.sync_api import sync_playwright

    url = browser_lab.url
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1400})
            page.goto(url)
            wait_for_app(page, "Launching queues runs")
            page.get_by_role("tab", name="Build a grid").click()
            fill(page, "Experiment name", "live view run")
            fill(page, "Duration per run (s)", "25")
            fill(page, "Max tokens per request", "8")
            # On a busy shared CPU one request can take a minute: let the last one finish.
            fill(page, "Graceful stop (s)", "120")
            page.get_by_role("button", name="Launch grid").click()
            wait_for_app(page, "queued: 1 run")
            page.evaluate("() => { window.__notReloaded = true; }")
            engine = create_engine(browser_lab.database_url)
            with Session(engine) as session:
                run_id = session.scalars(
                    select(Run.id).join(Experiment).where(Experiment.name == "live view run")
                ).one()
            agreed: dict[str, int] = {}
            points_during_load = 0
            looks: list[dict] = []
            deadline = time.monotonic() + RUN_DONE_TIMEOUT_S + 180
            shots = set()
            while time.monotonic() < deadline:
                look = page.evaluate(LOOK_JS, run_id)
                looks.append(look)
                assert look["marker"], "the page was reloaded"
                if look["panel"] and look["panel"] == look["row"] == look["side"] and look["running"] == "1":
                    agreed[look["panel"]] = agreed.get(look["panel"], 0) + 1
                    phase = look["panel"].split(" ", 1)[1]
                    if phase not in shots and phase in ("starting", "load"):
                        shots.add(phase)
                        shot(page, f"12-runs-live-{phase.replace(' ', '-')}")
                if look["panel"] and look["panel"].endswith(" load"):
                    points_during_load = max(points_during_load, look["points"])
                if look["row"] == "✅ done":
                    break
                page.wait_for_timeout(400)
            with Session(engine) as session:
                run = session.get(Run, run_id)
                assert run is not None
                status, reason = run.status, run.status_reason
            engine.dispose()
            assert status == RunStatus.DONE, (status, reason)
            assert looks[-1]["row"] == "✅ done", looks[-5:]
            print(f"phases agreed (looks): {agreed}; live chart points during the load: {points_during_load}")
            assert sum(agreed.values()) >= 2 and len(agreed) >= 2, agreed
            assert points_during_load >= 5, (points_during_load, looks[-20:])
            shot(page, "13-runs-after-live")
        finally:
            browser.close()
