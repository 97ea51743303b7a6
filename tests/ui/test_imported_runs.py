"""Imported runs on the pages (issue 36): Run detail says where a GuideLLM run's figures come
from and lists GuideLLM's own figures; Compare sets it beside a lab run, marked with its tool."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.orm import Session

from lab.imports import read_result_file
from lab.imports.saving import save_parsed
from lab.members import Member
from tests.support.app_pages import PAGES, frame_with, open_page, texts, widget
from tests.support.seeded_lab import SeededLab

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "imports"


def imported_run_ids(seed: SeededLab) -> list[int]:
    with Session(seed.engine) as session:
        return save_parsed(
            session=session, parsed=read_result_file(FIXTURES / "guidellm.json"), member=Member("ann")
        ).run_ids


def test_run_detail_shows_an_imported_runs_source_and_own_figures(seed_lab: SeededLab) -> None:
    run_id = imported_run_ids(seed_lab)[0]
    app = open_page(PAGES["Run detail"], run=str(run_id))
    shown = texts(app)
    assert not app.exception
    assert "Imported from guidellm 0.8.1" in shown and "guidellm's own figures" in shown
    assert not [button for button in app.button if button.key == "run_again"]  # another tool's run


def test_compare_sets_an_imported_guidellm_run_beside_a_lab_run(seed_lab: SeededLab) -> None:
    run_id = imported_run_ids(seed_lab)[0]
    app = open_page(PAGES["Compare"])
    widget(app.radio, "compare_mode").set_value("individual runs").run()
    widget(app.multiselect, "compare_runs").set_value([seed_lab.done_run_ids[0], run_id]).run()
    assert not app.exception
    table = frame_with(app, "measured by")
    assert set(table["measured by"]) == {"lab", "guidellm 0.8.1"}
