"""Every URL goes through the entry file (issue 25, item 0), checked with AppTest.

AppTest starts each run the way a fresh server process does: Streamlit's legacy ``pages/``
mode on (``PagesManager.uses_pages_directory``), where a URL such as ``/runs`` ran
``pages/runs.py`` on its own, without the entry file's gate. ``switch_page`` before the first
run picks the page by its file name, as a first request for ``/runs`` does.
The real-browser version is tests/ui/test_members_browser.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.support.app_pages import AUTH, LAB_PAGES
from tests.support.seeded_lab import PROJECT_ROOT

APP = str(PROJECT_ROOT / "streamlit_app.py")
PAGE_FILES = sorted(path.name for path in (PROJECT_ROOT / "pages").glob("*.py"))


@pytest.mark.parametrize("page_file", PAGE_FILES)
def test_a_page_module_run_on_its_own_renders_nothing(seed_lab, page_file: str) -> None:
    app = AppTest.from_file(str(PROJECT_ROOT / "pages" / page_file), default_timeout=60)
    app.run()
    assert not app.exception, [item.value for item in app.exception]
    assert not app.main.children or all(not block.children for block in app.main.children.values()), page_file
    assert not app.title and not app.button and not app.dataframe and not app.sidebar.children


@pytest.mark.parametrize("page_file", sorted(LAB_PAGES))
def test_with_sign_in_configured_a_first_request_for_any_page_shows_only_the_sign_in(seed_lab, page_file: str) -> None:
    app = AppTest.from_file(APP, default_timeout=60)
    app.secrets["auth"] = AUTH
    app.query_params["run"] = str(seed_lab.done_run_ids[0])
    app.switch_page(f"pages/{page_file}")
    app.run()
    assert not app.exception, [item.value for item in app.exception]
    assert [title.value for title in app.title] == ["Serving Lab"]
    assert [button.label for button in app.button] == ["Sign in"]
    assert not app.dataframe and not app.sidebar.metric and not app.tabs and not app.selectbox


@pytest.mark.parametrize("page_file", sorted(LAB_PAGES))
def test_without_sign_in_a_first_request_for_a_page_gets_the_page_and_the_sidebar(seed_lab, page_file: str) -> None:
    app = AppTest.from_file(APP, default_timeout=60)
    app.switch_page(f"pages/{page_file}")
    app.run()
    assert not app.exception, [item.value for item in app.exception]
    assert [title.value for title in app.title] == [LAB_PAGES[page_file]]
    assert [metric.label for metric in app.sidebar.metric] == ["queued", "running"]  # the entry file's sidebar


def test_the_entry_file_routes_every_page_of_the_folder() -> None:
    # A new page file must be added to the entry file's navigation (and to LAB_PAGES above).
    text = Path(APP).read_text()
    for page_file in LAB_PAGES:
        assert page_file.removesuffix(".py").upper() + "_PAGE" in text
    assert set(PAGE_FILES) - set(LAB_PAGES) == {"common.py"}
