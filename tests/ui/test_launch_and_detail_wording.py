"""The smaller things of issue 39 (item 6) as a user meets them: a web run launched without
sign-in and without a name is recorded as the OS user running the lab (and the sidebar says
so), "1 VU" and "(1 run)", repeats counted from 1, the naive server's figures under the lab's
names on Run detail, an estimate replaced by its reason, a placeholder that is no setting."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from db import store
from lab.analysis.trends import TrendPoint
from lab.members import os_user
from pages.view.baseline import spread_times, trend_figure
from tests.support.app_pages import PAGES, frame_with, open_page, runs_in_db, texts, widget
from tests.support.seeded_lab import SeededLab, add_done_run


def test_a_web_run_without_sign_in_or_name_is_launched_by_the_labs_os_user(seed_lab: SeededLab) -> None:
    app = open_page(PAGES["New experiment"])
    assert f"recorded as launched by {os_user()} (the user running the lab)" in "\n".join(
        caption.value.replace("\\", "") for caption in app.sidebar.caption
    )
    before = {run.id for run in runs_in_db(seed_lab)}
    widget(app.selectbox, "preset_name").select("seed-exp1").run()
    widget(app.button, "launch_preset").click().run()
    new = [run for run in runs_in_db(seed_lab) if run.id not in before]
    assert new and {run.launched_by for run in new} == {os_user()}


def test_one_vu_one_run_and_repeats_from_one(seed_lab: SeededLab) -> None:
    run_id = add_done_run(seed_lab.engine, vus=1, max_tokens=32, tok=16.0, p95=2.0)
    app = open_page(PAGES["Run detail"], run=str(run_id))
    assert "repeat 1 ·" in texts(app) and "repeat 0" not in texts(app)
    app = open_page("pages/trends.py")
    options = widget(app.selectbox, "trends_configuration").options
    assert any("· 1 VU ·" in option and "(1 run)" in option for option in options), options
    table = open_page(PAGES["Runs"]).dataframe[0].value
    assert "0" not in set(table["repeat"])


def test_run_detail_names_the_naive_servers_figures_as_the_lab_does(seed_lab: SeededLab) -> None:
    with Session(seed_lab.engine) as session:
        naive = next(r.id for r in store.list_runs(session=session) if r.backend == "naive" and r.status == "done")
    app = open_page(PAGES["Run detail"], run=str(naive))
    metrics = frame_with(app, "name on /metrics")
    row = metrics[metrics["name on /metrics"] == "vllm:request_success_total"].iloc[0]
    assert row["metric"] == "requests finished ok"


def test_the_estimate_gives_way_to_its_reason_and_the_placeholder_is_no_setting(seed_lab: SeededLab) -> None:
    app = open_page(PAGES["New experiment"])
    widget(app.multiselect, "grid_backends").set_value(["external"]).run()
    assert "No estimate yet:" in texts(app)
    box = widget(app.text_area, "grid_overrides")
    assert "=" not in (box.placeholder or "")


def test_trends_sets_the_runs_of_one_experiment_apart() -> None:
    points = [TrendPoint(run_id, 1, "2026-12-01T10:00:00", 1.0, "", "", "", False) for run_id in (1, 2, 3)] + [
        TrendPoint(4, 2, "2026-12-02T10:00:00", 1.0, "", "", "", False)
    ]
    xs = spread_times(points)
    assert len(set(xs)) == 4 and xs[3] == datetime(2026, 12, 2, 10)
    assert xs[1] == datetime(2026, 12, 1, 10)  # the middle run at the experiment's time
    figure = trend_figure(points, "output_tok_per_s")
    assert figure.layout.yaxis.rangemode == "tozero"
