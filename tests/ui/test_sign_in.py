"""Optional sign-in: with an OIDC provider configured, no page shows before signing in."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from tests.support.app_pages import AUTH
from tests.support.seeded_lab import PROJECT_ROOT

APP = str(PROJECT_ROOT / "streamlit_app.py")


def test_with_sign_in_configured_nothing_shows_before_signing_in(seed_lab) -> None:
    # The gate stops the entry file before st.navigation, and Streamlit runs the entry file
    # before any page (deep links included), so no page can render. (AppTest's switch_page
    # runs a page file directly, without the entry file, so it cannot show that part.)
    app = AppTest.from_file(APP, default_timeout=60)
    app.secrets["auth"] = AUTH
    app.run()
    assert not app.exception, [item.value for item in app.exception]
    assert [title.value for title in app.title] == ["Serving Lab"]
    assert [button.label for button in app.button] == ["Sign in"]
    assert not app.dataframe and not app.sidebar.metric and not app.tabs


def test_without_sign_in_the_lab_opens_directly(seed_lab) -> None:
    app = AppTest.from_file(APP, default_timeout=60)
    app.run()
    assert not app.exception
    assert [title.value for title in app.title] == ["New experiment"]


def test_a_sign_in_older_than_the_labs_limit_is_asked_again(seed_lab, monkeypatch) -> None:
    import time

    from lab.settings import get_settings

    monkeypatch.setenv("LAB_SIGN_IN_MAX_AGE_H", "2")
    get_settings.cache_clear()
    app = AppTest.from_file(APP, default_timeout=60)
    app.secrets["auth"] = AUTH
    app.user = {"email": "ada@lab.example", "is_logged_in": True, "iat": time.time() - 3 * 3600}
    app.run()
    assert not app.exception, [item.value for item in app.exception]
    assert [button.label for button in app.button] == ["Sign in again"]
    assert "3.0 h old, over this lab's limit of 2 h" in app.info[0].value
    assert not app.dataframe and not app.sidebar.metric and not app.tabs

    app.user = {"email": "ada@lab.example", "is_logged_in": True, "iat": time.time() - 60}
    app.run()
    assert not app.exception and [title.value for title in app.title] == ["New experiment"]
    get_settings.cache_clear()
