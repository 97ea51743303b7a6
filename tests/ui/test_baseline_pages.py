"""Baselines on the pages (AppTest, seeded database): Run detail marks a baseline and offers
the spec file, Compare shows later runs against the baseline, Trends plots a configuration
over time with the baseline marked and what each run ran with in the hover."""

from __future__ import annotations

import json

from sqlalchemy.orm import Session

from db import baselines as baseline_store
from db import store
from db.models import Run, RunStatus
from lab import baselines
from lab.baselines import Subject
from lab.specs.configuration import configuration_key
from tests.support.app_pages import PAGES, elements, open_page, texts, widget
from tests.support.seeded_lab import SeededLab

TRENDS = "pages/trends.py"


def later_run_of(seed_lab: SeededLab, run_id: int, output_tok_per_s: float) -> int:
    """A done run with the spec of ``run_id`` (so of its configuration), made after it."""
    with Session(seed_lab.engine) as session:
        new_id = store.enqueue_run_again(session=session, run_id=run_id).id
        run = session.get_one(Run, new_id)
        run.status, run.output_tok_per_s, run.req_per_s, run.latency_p95_s = RunStatus.DONE, output_tok_per_s, 0.1, 7.0
        run.environment = {"lab_git_commit": "abc1234def", "packages": {"torch": "2.5.0"}, "config_sha256": "f" * 64}
        session.commit()
    return new_id


def output_of(seed_lab: SeededLab, run_id: int) -> float:
    with Session(seed_lab.engine) as session:
        figure = session.get_one(Run, run_id).output_tok_per_s
        assert figure is not None
        return figure


def mark(seed_lab: SeededLab, subject: Subject) -> None:
    with Session(seed_lab.engine) as session:
        baselines.mark_baseline(session=session, subject=subject)


def test_run_detail_marks_the_run_as_baseline_and_offers_its_spec_file(seed_lab: SeededLab) -> None:
    run_id = seed_lab.done_run_ids[0]
    app = open_page(PAGES["Run detail"], run=str(run_id))
    assert "No baseline is marked for this run's configuration." in texts(app)
    labels = [button.label for button in elements(app, "download_button")]
    assert "Run's spec file (JSON)" in labels
    assert f"Experiment #{seed_lab.experiment_id}'s spec file (JSON)" in labels
    widget(app.button, "baseline_mark_run").click().run()
    shown = texts(app)
    assert f"run #{run_id} is now the baseline of 1 configuration(s)." in shown
    assert "This run is part of its configuration's baseline." in shown
    with Session(seed_lab.engine) as session:
        [row] = baseline_store.list_baselines(session=session)
        assert row.run_ids == [run_id]


def test_a_failed_run_cannot_be_marked(seed_lab: SeededLab) -> None:
    app = open_page(PAGES["Run detail"], run=str(seed_lab.failed_run_id))
    assert "Only a done run can be a baseline." in texts(app)
    assert not [button for button in app.button if button.key == "baseline_mark_run"]


def test_run_detail_and_compare_show_later_runs_against_the_baseline(seed_lab: SeededLab) -> None:
    run_id = seed_lab.done_run_ids[0]
    mark(seed_lab, Subject("run", run_id))
    later = later_run_of(seed_lab, run_id, output_tok_per_s=output_of(seed_lab, run_id) / 2)
    app = open_page(PAGES["Compare"])
    assert "Against the baseline" in texts(app)
    [table] = [frame.value for frame in app.dataframe if "verdict" in frame.value.columns]
    row = table[table["figure"] == "output tok/s"].iloc[0]
    assert row["change"] == "-50.0%" and row["runs"] == "1 vs 1"
    assert row["verdict"] == "too few runs to tell (n=1 vs 1; needs 3 a side)"
    detail = open_page(PAGES["Run detail"], run=str(later))
    [table] = [frame.value for frame in detail.dataframe if "verdict" in frame.value.columns]
    assert set(table["later runs"]) == {f"experiment #{seed_lab.experiment_id}"}
    # Compare of the baseline's run alone: the later run was not chosen, so it is not listed.
    alone = open_page(PAGES["Compare"], runs=str(run_id))
    assert not [frame for frame in alone.dataframe if "verdict" in frame.value.columns]
    assert "No later run of this configuration yet." in texts(alone)


def test_trends_plots_the_configuration_with_the_baseline_and_provenance(seed_lab: SeededLab) -> None:
    run_id = seed_lab.done_run_ids[0]
    mark(seed_lab, Subject("run", run_id))
    later = later_run_of(seed_lab, run_id, output_tok_per_s=20.0)
    app = open_page(TRENDS)
    assert [heading.value for heading in app.title] == ["Trends"]
    options = widget(app.selectbox, "trends_configuration").options
    assert options[0].startswith("★ ") and "(2 runs)" in options[0]
    widget(app.selectbox, "trends_figure").set_value("output_tok_per_s").run()
    chart = json.loads(app.get("plotly_chart")[0].proto.spec)
    traces = {trace.get("name"): trace for trace in chart["data"]}
    assert traces["baseline runs"]["y"] == [output_of(seed_lab, run_id)] and traces["runs"]["y"] == [20.0]
    provenance = [later, seed_lab.experiment_id, "abc1234def", "torch 2.5.0", "ffffffffffff"]
    assert traces["runs"]["customdata"][0] == provenance
    assert "lab commit" in traces["runs"]["hovertemplate"]
    table = app.dataframe[0].value
    assert list(table["run"]) == [run_id, later] and list(table["baseline"]) == ["yes", ""]


def test_run_detail_opens_its_configurations_trend(seed_lab: SeededLab) -> None:
    run_id = seed_lab.done_run_ids[1]
    app = open_page(PAGES["Run detail"], run=str(run_id))
    widget(app.button, "baseline_trend").click().run()
    assert [heading.value for heading in app.title] == ["Trends"]
    with Session(seed_lab.engine) as session:
        key = configuration_key(session.get_one(Run, run_id).spec)
    assert widget(app.selectbox, "trends_configuration").value == key
