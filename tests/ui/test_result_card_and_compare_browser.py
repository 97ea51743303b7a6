"""The result card and Compare (issue 24) in a real headless Chromium against the browser tests'
shared lab (``python -m lab start``, the ``browser_lab`` fixture) and the real naive server: three
short runs launched from the form, followed on Runs without a reload until each reports itself
in the result card (req/s and p95); then Compare on two runs one setting apart (a ratio) and on
two runs two settings apart (both named, no ratio).

One test: the runs it waits for are the ones it then compares (three tests before, which
depended on their order).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from db.models import Experiment, Run, RunStatus
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, RUN_DONE_TIMEOUT_S, BrowserLab, fill, shot, wait_for_app

pytestmark = [pytest.mark.browser, pytest.mark.integration]

# What the result card reads: its text, and each tile's label and whole value.
CARD_JS = """() => {
  const card = document.querySelector('.st-key-result_card');
  if (!card) { return null; }
  const tiles = {};
  for (const m of card.querySelectorAll('[data-testid="stMetric"]')) {
    const label = m.querySelector('[data-testid="stMetricLabel"]').innerText.trim();
    const value = m.querySelector('[data-testid="stMetricValue"]');
    tiles[label] = {text: value.innerText.trim(), cut: value.scrollWidth > value.clientWidth + 1};
  }
  return {text: card.textContent, tiles: tiles, marker: window.__notReloaded === true};
}"""
TALL = {"width": 1280, "height": 4000}
EXPERIMENTS = ("one setting apart", "two settings apart")  # this test's runs in the shared lab


@pytest.fixture(scope="module")
def browser() -> Iterator:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def launch_grid(page, name: str, vus: str, max_tokens: str) -> None:
    """Launch a grid of the naive server from the form, 5 s per run."""
    page.get_by_role("link", name="New experiment", exact=True).first.click()
    wait_for_app(page, "Launching queues runs")
    page.get_by_role("tab", name="Build a grid").click()
    fill(page, "Experiment name", name)
    fill(page, "VUs (one or more, e.g. 1, 8, 32)", vus)
    fill(page, "Duration per run (s)", "5")
    fill(page, "Max tokens per request", max_tokens)
    fill(page, "Graceful stop (s)", "120")  # a busy shared CPU can take a minute a request
    page.get_by_role("button", name="Launch grid").click()
    page.wait_for_url("**/runs", timeout=60_000)
    wait_for_app(page, "Filters")


def card_run(card: dict) -> str | None:
    """The run number the card's heading names (None while a refresh redraws the heading)."""
    found = re.search(r"Run\W*#\W*(\d+)", card["text"])
    return found[1] if found else None


def run_rows(database_url: str) -> list[tuple[int, str, int | None, int]]:
    """This test's runs (by experiment name: other browser tests share the lab), oldest first."""
    engine = create_engine(database_url)
    query = select(Run).join(Experiment).where(Experiment.name.in_(EXPERIMENTS)).order_by(Run.id)
    with Session(engine) as session:
        rows = [(run.id, run.status, run.vus, run.max_tokens) for run in session.scalars(query)]
    engine.dispose()
    return rows


def test_runs_ending_while_runs_is_open_show_their_result_card_then_compare(
    browser_lab: BrowserLab, browser: Any
) -> None:
    url, database_url = browser_lab.url, browser_lab.database_url
    runs_ending_while_runs_is_open_show_their_result_card(url, database_url, browser)
    runs_one_setting_apart_compare_with_a_ratio(url, database_url, browser)
    runs_two_settings_apart_compare_names_both_and_no_ratio(url, database_url, browser)


def runs_ending_while_runs_is_open_show_their_result_card(url: str, database_url: str, browser: Any) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(url)
    wait_for_app(page, "Launching queues runs")
    launch_grid(page, EXPERIMENTS[0], "1, 2", "8")
    launch_grid(page, EXPERIMENTS[1], "2", "16")
    assert page.url.rstrip("/").endswith("runs")
    page.evaluate("() => { window.__notReloaded = true; }")
    own_runs = {str(run_id) for run_id, _, _, _ in run_rows(database_url)}  # the card may first show an older run
    cards: dict[str, dict] = {}
    deadline = time.monotonic() + RUN_DONE_TIMEOUT_S + 300
    while time.monotonic() < deadline and len(cards) < 3:
        card = page.evaluate(CARD_JS)
        if card and card["tiles"].get("p95 latency (s)", {}).get("text", "–") != "–":
            assert card["marker"], "the page was reloaded"
            number = card_run(card)
            if number in own_runs and number not in cards:
                cards[number] = card
                shot(page, f"result-card-{number}")
        if all(status in RunStatus.FINAL for _, status, _, _ in run_rows(database_url)) and len(cards) >= 1:
            page.wait_for_timeout(5000)  # the last refresh
            card = page.evaluate(CARD_JS)
            if card and (number := card_run(card)) in own_runs:
                cards[number] = card
            break
        page.wait_for_timeout(500)
    rows = run_rows(database_url)
    assert [status for _, status, _, _ in rows] == [RunStatus.DONE] * 3, rows
    last = cards.get(str(rows[-1][0]))
    assert last is not None, cards.keys()
    assert last["marker"], "the page was reloaded"
    for label in ("req/s", "p95 latency (s)", "output tok/s"):
        tile = last["tiles"][label]
        assert tile["text"] not in ("", "–") and not tile["cut"], (label, tile)
        assert float(tile["text"].replace(",", "")) > 0, (label, tile)
    assert "✅ done" in last["text"] and f"Open run #{rows[-1][0]}" in last["text"]
    page.close()


def runs_one_setting_apart_compare_with_a_ratio(url: str, database_url: str, browser: Any) -> None:
    (first, _, _, _), (second, _, _, _) = run_rows(database_url)[:2]  # VUs 1 and 2, max tokens 8
    page = browser.new_page(viewport=TALL)
    page.goto(f"{url}/compare?runs={first},{second}")
    wait_for_app(page, "What differs between the chosen runs")
    page.get_by_text("Cells one setting apart").first.wait_for(timeout=30_000)
    text = page.inner_text("body")
    assert "1 setting differs: VUs" in text
    assert "No ratio applies" not in text
    # Glide draws table cells on a canvas: the ratio table is known by the caption drawn above it only.
    assert "No ratio between these cells" not in text
    shot(page, "compare-one-setting")
    page.close()


def runs_two_settings_apart_compare_names_both_and_no_ratio(url: str, database_url: str, browser: Any) -> None:
    rows = run_rows(database_url)
    first, third = rows[0][0], rows[2][0]  # VUs 1, max tokens 8 against VUs 2, max tokens 16
    page = browser.new_page(viewport=TALL)
    page.goto(f"{url}/compare?runs={first},{third}")
    wait_for_app(page, "What differs between the chosen runs")
    page.get_by_text("No ratio applies").first.wait_for(timeout=30_000)
    text = page.inner_text("body")
    assert "2 settings differ:" in text and "max tokens" in text and "VUs" in text
    assert "Cells one setting apart" not in text
    assert "No ratio between these cells: they differ in more than one setting" in text
    shot(page, "compare-two-settings")
    page.close()
