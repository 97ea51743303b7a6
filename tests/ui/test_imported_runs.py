"""Imported runs on the pages (issue 36): Run detail says where a GuideLLM run's figures come
from and lists GuideLLM's own figures; Compare sets it beside a lab run, marked with its tool."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.orm import Session

from lab.imports import read_result_file
from lab.imports.saving import save_parsed
from lab.members import Member
from lab.settings import get_settings
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


def external_run(seed: SeededLab, *, workload: str, tok: float, preset: str | None = None) -> int:
    """A done run against an external server, of one workload (a preset's name when ``preset``)."""
    from db import store
    from db.models import RunStatus
    from lab.queue import experiments
    from lab.settings import get_settings
    from lab.specs.schema import ExperimentSpec, RunSpec

    spec = ExperimentSpec(
        name=f"external {workload}",
        preset=preset,
        base=RunSpec.model_validate(
            {
                "backend": "external",
                "target_url": "http://127.0.0.1:9",
                "model": get_settings().default_model,  # a local folder's absolute path, as a run stores it
                "workload": {"kind": workload},
                "load": {"vus": 1, "duration_s": 5},
            }
        ),
    )
    with Session(seed.engine, expire_on_commit=False) as session:
        run_id = experiments.enqueue_experiment(session=session, spec=spec).runs[0].id
    store.set_run_status(
        engine=seed.engine,
        run_id=run_id,
        status=RunStatus.DONE,
        output_tok_per_s=tok,
        req_per_s=tok / 16,
        latency_p95_s=1.0,
        latency_avg_s=0.5,
        requests_ok=10,
        requests_failed=0,
    )
    return run_id


def test_compare_never_joins_two_workloads_and_diffs_only_what_an_imported_run_records(seed_lab: SeededLab) -> None:
    story = external_run(seed_lab, workload="number-story", tok=290.1)
    synthetic = external_run(seed_lab, workload="synthetic", tok=66.6)
    imported = imported_run_ids(seed_lab)[0]
    app = open_page(PAGES["Compare"])
    widget(app.radio, "compare_mode").set_value("individual runs").run()
    widget(app.multiselect, "compare_runs").set_value([story, synthetic, imported]).run()
    assert not app.exception, [item.value for item in app.exception]
    tables = [frame.value for frame in app.dataframe if "cost per 1M output tokens" in frame.value.columns]
    shown = texts(app)
    # One row per workload (and per tool): no mean of 290.1 and 66.6 anywhere.
    assert len(tables) == 2  # the figures by cell, and the cost per million output tokens
    for table in tables:
        assert len(table) == 3, table  # one row per workload and per tool
        numbers = table.select_dtypes("number").to_numpy().ravel()
        assert not any(abs(value - (290.1 + 66.6) / 2) < 0.5 for value in numbers)  # no mean of the two
    assert "of the lab's not recorded by the imported run's tool" in shown
    # A model by its name, never the machine's folder the run stored (a screenshot is published).
    models = {str(value) for table in tables if "model" in table.columns for value in table["model"]}
    assert models and not any("/" in model for model in models), models
    diff = frame_with(app, "setting")
    assert not diff.isna().any().any() and not (diff == "–").any().any()
    # Nor in the settings diff, the legends or any text: the model by its name.
    folder = str(get_settings().default_model)
    assert folder not in shown and not diff.astype(str).apply(lambda column: column.str.contains(folder)).any().any()
    legends = [str(chart.proto.spec) for chart in app.get("plotly_chart")]
    assert legends and not any(folder in legend for legend in legends)


def test_the_seed_table_is_not_shown_for_a_stub_run_under_a_seed_preset(seed_lab: SeededLab) -> None:
    first = external_run(seed_lab, workload="number-story", tok=7312.0, preset="seed-exp1")
    app = open_page(PAGES["Compare"])
    widget(app.radio, "compare_mode").set_value("individual runs").run()
    widget(app.multiselect, "compare_runs").set_value([first]).run()
    assert not app.exception, [item.value for item in app.exception]
    shown = texts(app)
    assert "The seed's table is not shown: runs of seed-exp1 with backend external" in shown
    assert "The seed's table (seed-exp1)" not in shown


def test_runs_marks_an_imported_run_with_its_tool(seed_lab: SeededLab) -> None:
    imported_run_ids(seed_lab)
    app = open_page(PAGES["Runs"])
    assert not app.exception
    table = frame_with(app, "status")
    assert any(str(value).startswith("📥 imported: guidellm 0.8.1") for value in table["status"])
