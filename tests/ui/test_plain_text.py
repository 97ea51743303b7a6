"""User text is plain text on every page: an image or a link in an experiment name, a
tag, a status reason, a warning, a model or service message is never rendered as one.
And the Run detail page answers ``?run=`` values that are not a run id with a message."""

from __future__ import annotations

import pytest
from markdown_it import MarkdownIt
from sqlalchemy.orm import Session
from streamlit.testing.v1 import AppTest

from db import store, worker_store
from db.models import Run, RunStatus
from lab.settings import get_settings
from pages.view.text import chart_label, plain
from tests.support.app_pages import APP, PAGES, elements, open_page
from tests.support.seeded_lab import SeededLab

PAYLOAD = (
    "![pixel](http://evil.example/track.png) [click me](http://evil.example/x) <http://evil.example/a> "
    "www.evil.example <img src=http://evil.example/i.png> :red[alarm] $x^2$ **bold**"
)
RENDER = MarkdownIt("commonmark", {"html": True})


def markdown_sources(app: AppTest) -> list[str]:
    """The Markdown source of every element Streamlit renders as Markdown, and every label."""
    sources = [
        str(element.value)
        for kind in ("markdown", "caption", "info", "success", "warning", "error", "subheader", "title", "header")
        for element in elements(app, kind)
    ]
    sources += [str(getattr(element, "label", "")) for element in app.get("expandable")]
    return sources


def assert_plain(sources: list[str]) -> None:
    for source in sources:
        html = RENDER.render(source)
        assert "<img" not in html and "<a " not in html, source
        # GFM autolinks bare www./http:// text (markdown-it's commonmark does not): escaped, it cannot.
        assert "www.evil" not in source and "http://evil" not in source, source
    assert any("evil" in source for source in sources), "the payload is not shown at all"


@pytest.fixture
def hostile(seed_lab: SeededLab) -> SeededLab:
    run_id = seed_lab.done_run_ids[0]
    with Session(seed_lab.engine) as session:
        run = session.get_one(Run, run_id)
        assert run.experiment is not None
        run.experiment.name = PAYLOAD
        run.measurement_warnings = PAYLOAD
        session.commit()
    with Session(seed_lab.engine) as session:
        store.set_run_notes(session=session, run_id=run_id, tags=PAYLOAD, notes=PAYLOAD)
    store.set_run_status(engine=seed_lab.engine, run_id=seed_lab.failed_run_id, status=RunStatus.FAILED, reason=PAYLOAD)
    worker_store.upsert_service_record(
        engine=seed_lab.engine,
        name="naive",
        worker=get_settings().worker_name,
        kind="naive",
        state="failed",
        message=PAYLOAD,
    )
    return seed_lab


def test_run_detail_shows_user_text_plain(hostile: SeededLab) -> None:
    app = open_page(PAGES["Run detail"], run=str(hostile.done_run_ids[0]))
    assert_plain(markdown_sources(app))
    assert any("evil" in text.value for text in app.text)  # the notes, as st.text


def test_a_failed_runs_reason_is_plain(hostile: SeededLab) -> None:
    app = open_page(PAGES["Run detail"], run=str(hostile.failed_run_id))
    assert [error.value for error in app.error] == [plain(PAYLOAD)]
    assert_plain(markdown_sources(app))


def test_services_page_shows_a_service_message_plain(hostile: SeededLab) -> None:
    assert_plain(markdown_sources(open_page(PAGES["Services"])))


def test_runs_live_view_shows_the_cell_plain(hostile: SeededLab) -> None:
    with Session(hostile.engine) as session:
        session.get_one(Run, hostile.queued_run_id).cell_label = PAYLOAD
        session.commit()
    store.claim_next_run(engine=hostile.engine, worker_pid=1)
    assert_plain(markdown_sources(open_page(PAGES["Runs"])))


def test_plain_escapes_every_markdown_construct() -> None:
    html = RENDER.render(plain(PAYLOAD + "\n# heading\n- item\n    code"))
    assert "<img" not in html and "<a " not in html and "<h1" not in html and "<li" not in html
    assert "<strong" not in html and "<br />" in html
    assert chart_label('<a href="http://evil.example">x</a>') == '&lt;a href="http://evil.example"&gt;x&lt;/a&gt;'


@pytest.mark.parametrize("value", ["abc", "-1", "0", "1.5", "1e3", "99999999999999999999999", "²", " ", "0x10"])
def test_run_detail_answers_a_run_value_that_is_not_an_id_with_a_message(seed_lab: SeededLab, value: str) -> None:
    app = open_page(PAGES["Run detail"], run=value)
    assert not app.exception
    assert any("is not a run id" in warning.value for warning in app.warning), [w.value for w in app.warning]
    assert [heading.value for heading in app.title] == ["Run detail"]


def test_run_detail_answers_several_run_values_with_a_message(seed_lab: SeededLab) -> None:
    app = AppTest.from_file(APP, default_timeout=60)
    app.run()
    app.query_params["run"] = [str(seed_lab.done_run_ids[0]), str(seed_lab.done_run_ids[1])]
    app.switch_page(PAGES["Run detail"]).run()
    assert not app.exception, [item.value for item in app.exception]
    assert any("names 2 runs" in warning.value for warning in app.warning), [w.value for w in app.warning]


def test_run_detail_of_a_run_id_that_does_not_exist_says_so(seed_lab: SeededLab) -> None:
    app = open_page(PAGES["Run detail"], run=str(2**63 - 1))
    assert any("does not exist" in error.value for error in app.error)
