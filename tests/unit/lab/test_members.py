"""Lab members: roles from the settings, who may do what, names kept as plain text, actions
audited, and a database of the previous release upgraded with "unknown" launchers."""

from __future__ import annotations

import re
import string
from pathlib import Path

import pytest
from sqlalchemy import inspect, text
from sqlalchemy.orm import Session

from db import migrations, store
from db.engine import make_engine
from db.models import Run, RunStatus
from lab import run_actions
from lab.analysis.compare import RunRecord
from lab.analysis.safe_csv import records_to_csv
from lab.members import (
    ADMIN,
    MEMBER,
    OUTSIDER,
    RUN_ACTIONS,
    Member,
    RolesError,
    check_settings_at_start,
    clean_name,
    may_act_on_run,
    may_manage_lab,
    member_from_sign_in,
    member_without_sign_in,
    os_user,
    parse_roles,
)
from lab.queue import experiments
from lab.specs.schema import load_preset
from pages.view.text import plain

ALICE = Member(name="alice@lab.example", role=MEMBER, signed_in=True)
BOB = Member(name="bob@lab.example", role=MEMBER, signed_in=True)
ADA = Member(name="ada@lab.example", role=ADMIN, signed_in=True)


# --------------------------------------------------------------------------- roles


def test_roles_come_from_the_settings_and_everyone_signed_in_is_a_member_by_default() -> None:
    roles = parse_roles({"admin": ["Ada@Lab.example"]})
    assert roles.role_of("ada@lab.example") == ADMIN  # e-mails compare without case
    assert roles.role_of("anyone@else.example") == MEMBER
    listed = parse_roles({"admin": ["ada@lab.example"], "member": ["bob@lab.example"]})
    assert listed.role_of("bob@lab.example") == MEMBER
    assert listed.role_of("mallory@lab.example") == OUTSIDER
    assert not member_from_sign_in({"email": "mallory@lab.example"}, listed).may_use_lab
    assert member_from_sign_in({"sub": "user-42"}, listed).name == "user-42"  # no e-mail: the subject


@pytest.mark.parametrize(
    "table, message",
    [
        ({"superuser": ["eve@lab.example"]}, "unknown role 'superuser' in [roles]"),
        ({"admin": "ada@lab.example", "admins": ["x"]}, "unknown role 'admins' in [roles]"),
        ({"admin": [1, 2]}, "[roles] admin must be a list of e-mail addresses or names"),
    ],
)
def test_a_settings_file_with_an_unknown_role_is_refused(table: dict, message: str) -> None:
    with pytest.raises(RolesError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_roles(table)


def test_lab_start_refuses_an_unknown_role_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = tmp_path / "secrets.toml"
    secrets.write_text('[auth]\nclient_id = "lab"\n\n[roles]\nadmin = ["ada@lab.example"]\nowner = ["eve@x"]\n')
    monkeypatch.setenv("STREAMLIT_SECRETS_FILES", str(secrets))
    problem = check_settings_at_start(tmp_path)
    assert problem is not None and "\n" not in problem
    assert problem.startswith("error: unknown role 'owner' in [roles]") and "admin, member" in problem
    secrets.write_text('[roles]\nadmin = ["ada@lab.example"]\n')
    assert check_settings_at_start(tmp_path) is None
    secrets.write_text("[roles\nadmin = \n")
    problem = check_settings_at_start(tmp_path)
    assert problem is not None and problem.startswith("error: ")


# --------------------------------------------------------------------------- who may do what


@pytest.mark.parametrize("action", RUN_ACTIONS)
def test_with_sign_in_off_everyone_may_do_everything(action: str) -> None:
    laptop = member_without_sign_in("me")
    assert may_act_on_run(laptop, action=action, launched_by="somebody else").allowed
    assert may_manage_lab(laptop).allowed


@pytest.mark.parametrize("action", ["cancel", "delete", "tag"])
def test_a_member_may_change_only_their_own_runs_and_an_admin_any(action: str) -> None:
    assert may_act_on_run(ALICE, action=action, launched_by="alice@lab.example").allowed
    assert may_act_on_run(ALICE, action=action, launched_by="ALICE@lab.example").allowed
    refused = may_act_on_run(BOB, action=action, launched_by="alice@lab.example")
    assert not refused.allowed and "only alice@lab.example (who launched it) or an admin" in refused.reason
    assert not may_act_on_run(BOB, action=action, launched_by="unknown").allowed
    assert may_act_on_run(ADA, action=action, launched_by="alice@lab.example").allowed


def test_any_member_may_add_a_note_or_run_a_run_again_but_an_outsider_may_not() -> None:
    for action in ("note", "run_again"):
        assert may_act_on_run(BOB, action=action, launched_by="alice@lab.example").allowed
        outsider = Member(name="mallory@x", role=OUTSIDER, signed_in=True)
        assert not may_act_on_run(outsider, action=action, launched_by="mallory@x").allowed


def test_services_and_workers_are_for_admins_when_sign_in_is_on() -> None:
    assert may_manage_lab(ADA).allowed
    refused = may_manage_lab(ALICE)
    assert not refused.allowed and "only an admin" in refused.reason


# --------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    "raw, kept",
    [
        ("  Ada\tLovelace \n", "Ada Lovelace"),
        ("bob\x1b[31m\x07@lab", "bob[31m@lab"),  # terminal escapes and bells gone
        ("eve\u200b\u202e@lab", "eve@lab"),  # zero-width space and right-to-left override gone
        ("**bold** <img src=x onerror=alert(1)> [x](http://e)", "**bold** <img src=x onerror=alert(1)> [x](http://e)"),
        ("x" * 500, "x" * 200),
        (None, ""),
    ],
)
def test_names_lose_control_characters_and_keep_markup_as_typed(raw: object, kept: str) -> None:
    assert clean_name(raw) == kept


def test_a_name_with_markdown_or_html_is_shown_as_plain_text() -> None:
    shown = plain(clean_name("**bob** <b>x</b> :red[y] $z$"))
    # Every ASCII punctuation character is escaped: Markdown renders the text, not markup.
    assert all(
        shown[index - 1] == "\\" for index, char in enumerate(shown) if char in string.punctuation and char != "\\"
    )
    assert member_without_sign_in("\n\t ").name == "unknown"


def test_the_cli_records_the_operating_system_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGNAME", "carol")
    monkeypatch.setenv("USER", "carol")
    assert os_user() == "carol"


# --------------------------------------------------------------------------- actions, audited


def queue(engine, launched_by: str, count: int = 2) -> list[int]:
    spec = load_preset(
        "seed-exp1", quick=True, overrides=[("grid.backend", ["naive"]), ("grid.load.vus", list(range(1, count + 1)))]
    )
    with Session(engine) as session:
        experiment = experiments.enqueue_experiment(session=session, spec=spec, launched_by=launched_by)
        return [run.id for run in experiment.runs]


def audit(engine, run_id: int) -> list[tuple[str, str]]:
    with Session(engine) as session:
        return [(line.action, line.actor) for line in store.list_run_actions(session=session, run_id=run_id)]


def test_another_members_cancel_is_refused_on_the_server_and_an_admins_is_recorded(engine) -> None:
    first, second = queue(engine, ALICE.name)
    with (
        Session(engine) as session,
        pytest.raises(run_actions.PermissionDenied, match=re.escape(f"run #{second}: only alice@lab.example")),
    ):
        run_actions.cancel_runs(session=session, member=BOB, run_ids=[second, first])
    with Session(engine) as session:
        assert {session.get_one(Run, rid).status for rid in (first, second)} == {RunStatus.QUEUED}  # nothing done
    assert audit(engine, first) == []
    with Session(engine) as session:
        assert run_actions.cancel_runs(session=session, member=ADA, run_ids=[first]) == [first]
        assert session.get_one(Run, first).status == RunStatus.CANCELLED
    assert audit(engine, first) == [("cancel", ADA.name)]


def test_tags_notes_run_again_and_delete_are_recorded_with_who_and_when(engine) -> None:
    (run_id, _) = queue(engine, ALICE.name)
    with Session(engine) as session:
        run_actions.set_tags(session=session, member=ALICE, run_id=run_id, tags="baseline, cpu")
        run_actions.add_note(session=session, member=BOB, run_id=run_id, text="**looks** <b>slow</b>")
        copy = run_actions.run_again(session=session, member=BOB, run_id=run_id)
        assert copy.launched_by == BOB.name
        with pytest.raises(run_actions.PermissionDenied):
            run_actions.delete_runs(session=session, member=BOB, run_ids=[run_id])
        notes = store.list_run_notes(session=session, run_id=run_id)
        assert [(note.author, note.text) for note in notes] == [(BOB.name, "**looks** <b>slow</b>")]
        assert notes[0].created_at is not None
    assert audit(engine, run_id) == [("tag", ALICE.name), ("note", BOB.name), ("run_again", BOB.name)]
    with Session(engine) as session:
        assert run_actions.delete_runs(session=session, member=ALICE, run_ids=[run_id]) == [run_id]
        assert store.list_run_notes(session=session, run_id=run_id) == []
    assert audit(engine, run_id)[-1] == ("delete", ALICE.name)  # the trail outlives the run


def test_runs_filter_by_launcher_and_the_csv_carries_it(engine) -> None:
    queue(engine, ALICE.name, count=1)
    queue(engine, BOB.name, count=2)
    with Session(engine) as session:
        assert store.run_launchers(session=session) == [ALICE.name, BOB.name]
        mine = store.list_runs(session=session, launched_by=BOB.name)
        assert len(mine) == 2 and {run.launched_by for run in mine} == {BOB.name}
        records = [RunRecord.of(run) for run in store.list_runs(session=session)]
    header, *_rows = records_to_csv(records).splitlines()
    assert "launched_by" in header.split(",")
    assert {record["launched_by"] for record in records} == {ALICE.name, BOB.name}


# --------------------------------------------------------------------------- the upgrade


# The schema version of the release before launchers (the migration that adds them starts there).
PREVIOUS_RELEASE = migrations.MIGRATIONS.index(migrations._members)


def downgrade_to_previous_release(engine) -> None:
    """What a database of the previous release holds: no launchers, no audit or notes tables
    (SQLite 3.35+ drops columns)."""
    with engine.begin() as connection:
        for table_name in ("runs", "experiments"):
            connection.execute(text(f"DROP INDEX ix_{table_name}_launched_by"))
            connection.execute(text(f"ALTER TABLE {table_name} DROP COLUMN launched_by"))
        connection.execute(text("DROP TABLE run_audit"))
        connection.execute(text("DROP TABLE run_notes"))
        connection.execute(text(f"UPDATE schema_version SET version = {PREVIOUS_RELEASE} WHERE id = 1"))


def dump(engine) -> dict[str, list[dict]]:
    with engine.connect() as connection:
        names = [name for name in inspect(connection).get_table_names()]
        return {
            name: [dict(row._mapping) for row in connection.execute(text(f"SELECT * FROM {name} ORDER BY 1"))]
            for name in names
        }


def test_a_previous_release_database_upgrades_with_unknown_launchers_and_nothing_else_changed(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'lab.db'}")
    migrations.upgrade(engine)
    ids = queue(engine, "whoever", count=2)
    store.set_run_status(engine=engine, run_id=ids[0], status=RunStatus.DONE, requests_ok=7, req_per_s=1.5)
    store.save_run_series(engine=engine, run_id=ids[0], series={"time_s": [0, 1]})
    with Session(engine) as session:
        store.set_run_notes(session=session, run_id=ids[0], tags="a,b", notes="the old single note")
    downgrade_to_previous_release(engine)
    before = dump(engine)
    assert migrations.upgrade(engine) == PREVIOUS_RELEASE
    after = dump(engine)
    with engine.connect() as connection:
        assert migrations.current_version(connection) == migrations.LATEST_VERSION
        launched_by = {c["name"]: c for c in inspect(connection).get_columns("runs")}["launched_by"]
        assert launched_by["nullable"] is False and "unknown" in str(launched_by["default"])  # as a new database
    for name, rows in before.items():
        if name == "schema_version":
            continue
        assert len(after[name]) == len(rows), name
        assert [{key: row[key] for key in old} for row, old in zip(after[name], rows, strict=True)] == rows, name
        if name in ("runs", "experiments"):
            assert {row["launched_by"] for row in after[name]} == {"unknown"}, name
    assert after["run_audit"] == [] and after["run_notes"] == []
    assert migrations.upgrade(engine) == migrations.LATEST_VERSION  # a second upgrade is a no-op
    assert dump(engine) == after


def test_a_sign_ins_age_comes_from_auth_time_else_iat_and_only_an_old_one_expires() -> None:
    from lab.members import expired_sign_in_message, sign_in_age_s

    now_s = 1_800_000_000.0
    assert sign_in_age_s({"iat": now_s - 90}, now_s) == 90
    assert sign_in_age_s({"auth_time": now_s - 7200, "iat": now_s - 60}, now_s) == 7200  # re-issued tokens keep it
    assert sign_in_age_s({"iat": now_s + 30}, now_s) == 0  # a clock a little ahead is not negative
    for claims in ({}, {"iat": "yesterday"}, {"iat": True}, {"iat": None}):
        assert sign_in_age_s(claims, now_s) is None
        assert expired_sign_in_message(claims, max_age_h=1, now_s=now_s) is None  # cannot tell: not refused
    assert expired_sign_in_message({"iat": now_s - 3599}, max_age_h=1, now_s=now_s) is None
    assert expired_sign_in_message({"iat": now_s - 5400}, max_age_h=1, now_s=now_s) == (
        "Your sign-in is 1.5 h old, over this lab's limit of 1 h: sign in again."
    )
