"""The live claims table of a long experiment in a real headless Chromium, at 1280x800 and 800 px,
against the browser tests' shared lab (``browser_lab``): an until-decided grid on the OpenAI stub,
run by the lab's own worker, followed on the Reproduce tab without a reload from its first round to
its end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine

from lab.queue import long_experiments
from lab.specs.schema import ExperimentSpec, UntilDecided
from services.processes import find_free_port
from tests.stub_openai import StubServer
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, RUN_DONE_TIMEOUT_S, BrowserLab, shot, wait_for_app

pytestmark = [pytest.mark.browser, pytest.mark.integration]

NAME = "long table in the browser"
TABLE_JS = """() => {
  const tables = [...document.querySelectorAll('[data-testid="stTable"]')];
  const text = document.body.innerText;
  return {text: text, tables: tables.length, marker: window.__notReloaded === true,
          overflow: document.documentElement.scrollWidth > window.innerWidth + 1};
}"""


@pytest.fixture()
def stub() -> Iterator[StubServer]:
    server = StubServer(port=find_free_port(), delay_s=0.02).start()
    try:
        yield server
    finally:
        server.stop()


def test_the_claims_table_follows_a_long_experiment_without_a_reload(browser_lab: BrowserLab, stub: StubServer) -> None:
    from playwright.sync_api import sync_playwright

    spec = ExperimentSpec.model_validate(
        {
            "name": NAME,
            "repeats": 2,
            "base": {
                "backend": "external",
                "target_url": stub.url,
                "model": "stub",
                "max_tokens": 8,
                "warmup_requests": 0,
                "workload": {"prompts": 1000},
                "load": {"vus": 1, "duration_s": 2, "graceful_stop_s": 1},
            },
            "grid": {"load.vus": [1, 2]},
        }
    )
    engine = create_engine(browser_lab.database_url)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = chromium.new_page(viewport={"width": 1280, "height": 800})
        page.goto(browser_lab.url)
        wait_for_app(page, "New experiment")
        page.get_by_role("link", name="New experiment", exact=True).first.click()
        wait_for_app(page, "Launching queues runs")
        long_id = long_experiments.create(
            engine=engine,
            kind=long_experiments.GRID,
            name=NAME,
            specs={NAME: spec},
            until=UntilDecided(budget_s=600),
            allow_dirty=True,
        )
        page.get_by_role("tab", name="Reproduce the seed").click()
        heading = f"#{long_id} {NAME}"
        wait_for_app(page, heading)
        page.evaluate("() => { window.__notReloaded = true; }")
        page.get_by_text("finished (ended)", exact=False).first.wait_for(timeout=RUN_DONE_TIMEOUT_S * 1000)
        seen = page.evaluate(TABLE_JS)
        assert seen["marker"], "the page was reloaded"
        assert "rounds 2 done of 2 planned" in seen["text"] or "2 planned, " in seen["text"], seen["text"][-2000:]
        assert "Why: " in seen["text"]
        assert seen["tables"] >= 1 and not seen["overflow"]
        # Every claim with its verdict so far (a busy machine may leave one undecided at the budget).
        assert "req/s: load.vus 2 over load.vus 1" in seen["text"]
        assert "decided at round" in seen["text"] or "undecided after" in seen["text"]
        page.get_by_text(heading).first.scroll_into_view_if_needed()
        shot(page, "long-experiment-1280")
        page.set_viewport_size({"width": 800, "height": 800})
        page.wait_for_timeout(1000)
        narrow = page.evaluate(TABLE_JS)
        assert heading in narrow["text"] and not narrow["overflow"]
        page.get_by_text(heading).first.scroll_into_view_if_needed()
        shot(page, "long-experiment-800")
        chromium.close()
    engine.dispose()
