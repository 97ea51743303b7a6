"""The pages while the lab's database cannot be reached (pages/view/outage.py), with AppTest:
one line saying so on every page instead of Streamlit's error screen, the same in a live view,
and the page itself again once the database answers. Other errors still show as errors."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from sqlalchemy.exc import IntegrityError, OperationalError
from streamlit.testing.v1 import AppTest

from lab.settings import get_settings
from pages.view.outage import outage_reason
from tests.support.app_pages import LAB_PAGES
from tests.support.seeded_lab import PROJECT_ROOT

APP = str(PROJECT_ROOT / "streamlit_app.py")
NOT_ANSWERING = "database is not answering"


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # nothing listens there once the probe is closed


def warnings_of(app: AppTest) -> list[str]:
    return [item.value for item in app.warning]


@pytest.mark.integration  # psycopg really connects to a closed loopback port
@pytest.mark.parametrize("page_file", sorted(LAB_PAGES))
def test_every_page_without_its_database_says_so_in_one_line(
    lab_data_dir: Path, monkeypatch: pytest.MonkeyPatch, page_file: str
) -> None:
    monkeypatch.setenv("LAB_DATABASE_URL", f"postgresql+psycopg://lab@127.0.0.1:{closed_port()}/lab")
    get_settings.cache_clear()
    app = AppTest.from_file(APP, default_timeout=60)
    app.switch_page(f"pages/{page_file}")
    app.run()
    assert not app.exception, [item.message for item in app.exception]
    outage_lines = [text for text in warnings_of(app) if NOT_ANSWERING in text]
    assert len(outage_lines) == 1, warnings_of(app)
    assert "Connection refused" in outage_lines[0] and "Runs in progress go on" in outage_lines[0]


def test_a_page_that_loses_its_database_says_so_then_recovers(seed_lab, monkeypatch: pytest.MonkeyPatch) -> None:
    from lab import history

    app = AppTest.from_file(APP, default_timeout=60)
    app.switch_page("pages/run_detail.py")
    app.query_params["run"] = str(seed_lab.queued_run_id)  # queued: the live view polls
    app.run()
    assert not app.exception and not any(NOT_ANSWERING in text for text in warnings_of(app))

    def unreachable(*args: object, **kwargs: object) -> None:
        raise OperationalError("SELECT runs", {}, Exception("server closed the connection unexpectedly"))

    real_get_run = history.get_run
    monkeypatch.setattr(history, "get_run", unreachable)
    app.run()
    assert not app.exception, [item.message for item in app.exception]
    first = [text for text in warnings_of(app) if NOT_ANSWERING in text]
    assert len(first) == 1 and "server closed the connection unexpectedly" in first[0]
    app.run()
    assert [text for text in warnings_of(app) if NOT_ANSWERING in text] == first  # the same "since"

    monkeypatch.setattr(history, "get_run", real_get_run)
    app.run()
    assert not app.exception and not any(NOT_ANSWERING in text for text in warnings_of(app))
    assert f"Run #{seed_lab.queued_run_id}" in " ".join(item.value for item in app.subheader)


def live_view_script() -> None:
    import streamlit as st
    from sqlalchemy.exc import IntegrityError, OperationalError

    from pages.view.outage import view_survives_database_outage

    @view_survives_database_outage
    def view() -> None:
        st.write("view drawn")
        kind = st.session_state.get("fail")
        if kind == "outage":
            raise OperationalError("SELECT 1", {}, Exception("could not connect to server"))
        if kind == "other":
            raise IntegrityError("INSERT", {}, Exception("UNIQUE constraint failed"))

    st.fragment(view)()
    st.write("page goes on")


def test_a_live_view_shows_the_outage_in_itself_and_other_errors_as_errors() -> None:
    app = AppTest.from_function(live_view_script, default_timeout=30)
    app.session_state["fail"] = "outage"
    app.run()
    assert not app.exception
    assert any("could not connect to server" in text for text in warnings_of(app))
    assert "page goes on" in [item.value for item in app.markdown]
    app.session_state["fail"] = None
    app.run()
    assert not app.warning and not any(str(key).startswith("database_outage_since") for key in app.session_state)
    app.session_state["fail"] = "other"
    app.run()
    assert app.exception and not app.warning


def test_only_an_unreachable_database_is_an_outage() -> None:
    assert (
        outage_reason(OperationalError("x", {}, Exception("connection refused\nmore detail"))) == "connection refused"
    )
    assert outage_reason(OperationalError("x", {}, Exception("database is locked"))) == "database is locked"
    assert outage_reason(IntegrityError("x", {}, Exception("UNIQUE constraint failed"))) is None
    assert outage_reason(OperationalError("x", {}, Exception("no such table: runs"))) is None
    assert outage_reason(ValueError("connection refused")) is None
    long_reason = outage_reason(OperationalError("x", {}, Exception("connection " + "x" * 500)))
    assert long_reason is not None and len(long_reason) == 160
