"""Pages that follow the lab by themselves (issue 39, item 2): a Start or Stop shows as
"starting"/"stopping" from the click on, in the table and the sidebar, until the record
catches up; the Services page says when backends are stopped. The refresh itself (fragments
with ``run_every``) is checked in Chromium by tests/ui/test_direct_urls_compare_axes_and_following_browser.py."""

from __future__ import annotations

import pytest

from db import worker_store
from lab.queue import detached
from lab.settings import get_settings
from pages.view.service_states import PENDING_MAX_S, shown_states
from tests.support.app_pages import PAGES, open_page, texts, widget
from tests.support.seeded_lab import SeededLab


def status(name: str, state: str) -> dict:
    return {"name": name, "kind": name, "state": state, "url": None, "pid": None, "started_at": None, "message": None}


def test_a_clicked_start_shows_starting_until_the_record_moves() -> None:
    pending = {"redis": ("starting", 0.0, "stopped")}
    shown, still = shown_states([status("redis", "stopped")], pending, now_s=1.0)
    assert [s["state"] for s in shown] == ["starting"] and still == pending
    shown, still = shown_states([status("redis", "running")], pending, now_s=2.0)
    assert [s["state"] for s in shown] == ["running"] and not still
    # Never recorded before: a row of its own; a dead launcher: the record wins after a while.
    shown, _ = shown_states([], pending, now_s=1.0)
    assert [(s["name"], s["state"]) for s in shown] == [("redis", "starting")]
    shown, still = shown_states([status("redis", "stopped")], pending, now_s=PENDING_MAX_S + 1)
    assert [s["state"] for s in shown] == ["stopped"] and not still


def test_a_clicked_stop_shows_stopping_and_a_failed_start_ends_the_wait() -> None:
    stopping = {"naive": ("stopping", 0.0, "running")}
    assert shown_states([status("naive", "running")], stopping, now_s=1.0)[0][0]["state"] == "stopping"
    assert shown_states([status("naive", "stopped")], stopping, now_s=1.0)[0][0]["state"] == "stopped"
    again = {"naive": ("starting", 0.0, "failed")}
    assert shown_states([status("naive", "failed")], again, now_s=1.0)[0][0]["state"] == "starting"
    assert shown_states([status("naive", "dead")], again, now_s=1.0)[0][0]["state"] == "dead"


def test_services_shows_starting_from_the_click_on_and_says_when_backends_stop(
    seed_lab: SeededLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[str] = []

    def start_in_background(name: str) -> int:
        started.append(name)
        return 1

    monkeypatch.setattr(detached, "start_service_in_background", start_in_background)
    worker_store.upsert_service_record(
        engine=seed_lab.engine, worker=get_settings().worker_name, name="redis", kind="redis", state="stopped"
    )
    app = open_page(PAGES["Services"])
    shown = texts(app)
    assert "stopped after 300 s without a run using it" in shown and "stay up until stopped" in shown
    widget(app.selectbox, "service_to_start").set_value("redis").run()
    widget(app.button, "start_service").click().run()
    assert started == ["redis"]
    assert list(app.dataframe[0].value["state"]) == ["starting"]
    assert "redis: starting" in "\n".join(caption.value for caption in app.sidebar.caption)
