"""Lab members on the pages (AppTest, sign-in configured, ``st.user`` set by the test): who
launched a run is shown and filtered on, controls a member may not use are disabled with the
reason, and a forged click on one is refused by the server. With sign-in off, nothing changes.
"""

from __future__ import annotations

from sqlalchemy import update
from sqlalchemy.orm import Session
from streamlit.testing.v1 import AppTest

from db import store
from db.models import Run, RunStatus
from tests.support.app_pages import AUTH
from tests.support.seeded_lab import PROJECT_ROOT, SeededLab

APP = str(PROJECT_ROOT / "streamlit_app.py")
ROLES = {"admin": ["ada@lab.example"]}


def signed_in_as(email: str | None, page: str, **query: str) -> AppTest:
    app = AppTest.from_file(APP, default_timeout=60)
    if email:
        app.secrets["auth"] = AUTH
        app.secrets["roles"] = ROLES
        app.user = {"email": email, "is_logged_in": True}
    app.query_params.update(query)
    app.switch_page(page).run()  # the page's URL, opened first (open_page in tests/support/app_pages.py)
    assert not app.exception, [item.value for item in app.exception]
    return app


def launched_by(seed: SeededLab, run_id: int, name: str) -> None:
    with Session(seed.engine) as session:
        session.execute(update(Run).where(Run.id == run_id).values(launched_by=name))
        session.commit()


def unescaped(markdown: str) -> str:
    """Markdown source of plain text (``pages.view.text.plain``) as the text a user reads."""
    return markdown.replace("\\", "")


def button(app: AppTest, key: str):
    return next(b for b in app.button if b.key == key)


def test_a_member_cannot_cancel_anothers_run_and_a_forged_click_is_refused(seed_lab: SeededLab) -> None:
    run_id = seed_lab.queued_run_id
    launched_by(seed_lab, run_id, "alice@lab.example")
    app = signed_in_as("bob@lab.example", "pages/runs.py")
    assert [c.value for c in app.sidebar.caption if "bob@lab.example" in unescaped(c.value)]  # who is signed in
    next(m for m in app.multiselect if m.key == "runs_selected").set_value([run_id]).run()
    cancel = button(app, "cancel_selected")
    assert cancel.disabled and "only alice@lab.example (who launched it) or an admin" in cancel.help
    # A forged request: the click sent although the control is disabled. Streamlit discards a
    # disabled widget's value; lab.run_actions refuses it too (tests/unit/lab/test_members.py).
    cancel.proto.disabled = False
    cancel.click().run()
    assert not app.exception
    with Session(seed_lab.engine) as session:
        assert session.get_one(Run, run_id).status == RunStatus.QUEUED
        assert store.list_run_actions(session=session, run_id=run_id) == []


def test_an_admin_cancels_anyones_run_and_the_audit_says_who(seed_lab: SeededLab) -> None:
    run_id = seed_lab.queued_run_id
    launched_by(seed_lab, run_id, "alice@lab.example")
    app = signed_in_as("ada@lab.example", "pages/runs.py")
    next(m for m in app.multiselect if m.key == "runs_selected").set_value([run_id]).run()
    assert not button(app, "cancel_selected").disabled
    button(app, "cancel_selected").click().run()
    with Session(seed_lab.engine) as session:
        assert session.get_one(Run, run_id).status == RunStatus.CANCELLED
        assert [(a.action, a.actor) for a in store.list_run_actions(session=session, run_id=run_id)] == [
            ("cancel", "ada@lab.example")
        ]
    detail = signed_in_as("ada@lab.example", "pages/run_detail.py", run=str(run_id))
    assert any("ada@lab.example" in unescaped(c.value) and "cancel" in c.value for c in detail.caption)


def test_runs_filter_mine_and_services_and_workers_are_for_admins(seed_lab: SeededLab) -> None:
    launched_by(seed_lab, seed_lab.failed_run_id, "bob@lab.example")
    app = signed_in_as("bob@lab.example", "pages/runs.py")
    next(s for s in app.selectbox if s.key == "filter_launched_by").select("mine").run()
    assert list(app.dataframe[0].value["run"]) == [str(seed_lab.failed_run_id)]
    assert list(app.dataframe[0].value["launched by"]) == ["bob@lab.example"]
    services = signed_in_as("bob@lab.example", "pages/services.py")
    assert button(services, "start_service").disabled
    assert any("only an admin" in info.value for info in services.info)
    workers = signed_in_as("bob@lab.example", "pages/workers.py")
    assert any("only an admin" in info.value for info in workers.info) and not workers.dataframe
    assert not button(signed_in_as("ada@lab.example", "pages/services.py"), "start_service").disabled


def test_someone_not_on_the_member_list_sees_only_a_refusal(seed_lab: SeededLab) -> None:
    app = AppTest.from_file(APP, default_timeout=60)
    app.secrets["auth"] = AUTH
    app.secrets["roles"] = {"admin": ["ada@lab.example"], "member": ["bob@lab.example"]}
    app.user = {"email": "mallory@else.example", "is_logged_in": True}
    app.run()
    assert [unescaped(e.value) for e in app.error] == [
        "mallory@else.example is not a member of this lab: ask one of its admins."
    ]
    assert not app.dataframe and not app.sidebar.metric


def test_an_unknown_role_in_the_settings_is_refused_in_one_line(seed_lab: SeededLab) -> None:
    app = AppTest.from_file(APP, default_timeout=60)
    app.secrets["auth"] = AUTH
    app.secrets["roles"] = {"owner": ["ada@lab.example"]}
    app.user = {"email": "ada@lab.example", "is_logged_in": True}
    app.run()
    assert len(app.error) == 1 and "unknown role" in app.error[0].value and "owner" in app.error[0].value
    assert not app.sidebar.metric


def test_with_sign_in_off_the_name_asked_once_is_recorded_on_a_launch(seed_lab: SeededLab) -> None:
    app = AppTest.from_file(APP, default_timeout=60)
    app.run()
    next(t for t in app.sidebar.text_input if t.key == "member_name_input").input("  Ada <b>L</b>\x07 ").run()
    assert any("Ada <b>L</b>" in c.value.replace("\\", "") for c in app.sidebar.caption)
    assert app.session_state["member_name"] == "Ada <b>L</b>"
    app.switch_page("pages/runs.py").run()
    next(m for m in app.multiselect if m.key == "runs_selected").set_value([seed_lab.queued_run_id]).run()
    assert not button(app, "cancel_selected").disabled  # one trusted user: everything allowed
