"""Driving the lab's pages under Streamlit's AppTest: open a page, read it as a user does,
find a widget or a table, and the sign-in settings the gate tests use."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy.orm import Session
from streamlit.testing.v1 import AppTest
from streamlit.testing.v1.element_tree import Block

from db import store
from db.models import Run
from lab.analysis.compare import RECORD_FIELDS
from pages.view.names import DISPLAY_NAMES
from tests.support.seeded_lab import PROJECT_ROOT, SeededLab

APP = str(PROJECT_ROOT / "streamlit_app.py")


PAGES = {
    "New experiment": "pages/new_experiment.py",
    "Runs": "pages/runs.py",
    "Run detail": "pages/run_detail.py",
    "Compare": "pages/compare.py",
    "Services": "pages/services.py",
}


def open_page(page: str, **query: str) -> AppTest:
    """Run the app on ``page`` (a path under pages/), as a browser opening its URL does.

    Switched to before the first run: the lab's URL paths are its pages' file names, which is
    how AppTest names a page before a run, so the default page is not rendered first."""
    app = AppTest.from_file(APP, default_timeout=60)
    app.query_params.update(query)
    if page != PAGES["New experiment"]:
        app.switch_page(page)
    app.run()
    assert not app.exception, [item.value for item in app.exception]
    return app


def texts(app: AppTest) -> str:
    """Every markdown, caption, alert and metric text on the page, joined, as a user reads
    it (Markdown's backslash escapes, which keep user text plain, removed)."""
    parts = [
        element.value
        for kind in ("markdown", "caption", "info", "success", "warning", "error", "subheader")
        for element in elements(app, kind)
    ]
    parts += [f"{metric.label}={metric.value}" for metric in app.metric]
    return seen("\n".join(str(part) for part in parts))


def seen(markdown: str) -> str:
    """Markdown source as a user reads it: backslash escapes removed."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown)


def elements(parent: AppTest | Block, kind: str) -> list[Any]:
    """The elements of ``kind`` under ``parent``: AppTest types them as ``Element | Block``, but
    an element kind such as "caption" or "progress" is never a Block (asserted)."""
    found = list(parent.get(kind))
    assert not any(isinstance(node, Block) for node in found), kind
    return found


def widget(candidates: Any, key: str) -> Any:
    """The widget with ``key`` among ``candidates`` (one of AppTest's element lists)."""
    matches = [element for element in candidates if element.key == key]
    assert matches, f"no widget with key {key!r}"
    return matches[0]


def frame_with(app: AppTest, column: str) -> Any:
    """The first table on the page with a ``column`` header."""
    frames = [frame.value for frame in app.dataframe if column in frame.value.columns]
    assert frames, f"no table with a {column!r} column: {[list(f.value.columns) for f in app.dataframe]}"
    return frames[0]


def runs_in_db(seed: SeededLab) -> list[Run]:
    with Session(seed.engine) as session:
        return store.list_runs(session=session)


# Machine names a rendered table must never show as a header.
INTERNAL_NAMES = {name for name in (*RECORD_FIELDS, *DISPLAY_NAMES) if "_" in name}


UNROUNDED = re.compile(r"\d\.\d{4,}")


def assert_tables_readable(app: AppTest) -> int:
    """Every table on the page: no None, no internal header, no float past 3 decimals."""
    tables = [frame.value for frame in app.dataframe]
    for table in tables:
        for column in table.columns:
            assert column not in INTERNAL_NAMES and "_" not in str(column), f"internal header {column!r}"
            for value in table[column]:
                assert value is not None and str(value) not in ("None", "nan", "NaN", "NaT"), (column, value)
                assert not isinstance(value, float), f"{column}: an unformatted float {value!r}"
                assert not UNROUNDED.search(str(value)), f"{column}: unrounded {value!r}"
    return len(tables)


LAB_PAGES = {
    "new_experiment.py": "New experiment",
    "runs.py": "Runs",
    "run_detail.py": "Run detail",
    "compare.py": "Compare",
    "trends.py": "Trends",
    "services.py": "Services",
    "workers.py": "Workers",
}


AUTH = {
    "redirect_uri": "http://127.0.0.1:8501/oauth2callback",
    "cookie_secret": "test-cookie-secret",
    "client_id": "lab",
    "client_secret": "secret",
    "server_metadata_url": "http://127.0.0.1:9/.well-known/openid-configuration",
}
