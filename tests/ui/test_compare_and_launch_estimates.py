"""Round 3 of the web lab in AppTest (issue 24): a Compare that says what differs and gives a
ratio only between runs one setting apart, a finished run that reports itself on Runs, launch
controls with estimates, and pages a person reads (no raw column names, no ``nan``, whole tile
values). The widths themselves (1280 and 800 px) are checked in Chromium by
``tests/ui/screenshots.py``; AppTest has no viewport."""

from __future__ import annotations

import csv
import io
import re

import pytest
from sqlalchemy.orm import Session

from db import store, worker_store
from db.models import Run, RunStatus
from lab.queue import experiments
from lab.settings import get_settings
from lab.specs.schema import ExperimentSpec, RunSpec
from tests.support.app_pages import INTERNAL_NAMES, PAGES, assert_tables_readable, frame_with, open_page, texts, widget
from tests.support.seeded_lab import SeededLab
from tests.support.seeded_lab import add_done_run as add_seeded_run

ELLIPSIS = re.compile(r"…|\.\.\.")


def add_done_run(seed: SeededLab, *, vus: int, max_tokens: int, tok: float, p95: float) -> int:
    """A one-run experiment with these settings, done, with figures."""
    return add_seeded_run(seed.engine, vus=vus, max_tokens=max_tokens, tok=tok, p95=p95)


@pytest.mark.parametrize("page", [*PAGES.values(), "pages/workers.py"])
def test_every_page_reads_as_a_person_would(seed_lab: SeededLab, page: str) -> None:
    """No raw column name in a table, no ``nan`` or None anywhere, no ellipsis in a metric tile."""
    worker_store.register_worker(engine=seed_lab.engine, name="cpu-box", host="cpu-host", pid=1, labels=[], hardware={})
    with Session(seed_lab.engine) as session:  # a run without some figures: dashes, not nan
        session.get_one(Run, seed_lab.done_run_ids[1]).latency_p99_s = float("nan")
        session.get_one(Run, seed_lab.done_run_ids[1]).backend_rss_max_mb = 56943.123456
        session.commit()
    app = open_page(page, **({"run": str(seed_lab.done_run_ids[1])} if page == PAGES["Run detail"] else {}))
    assert_tables_readable(app)
    shown = texts(app)
    assert not re.search(r"\bnan\b|\bNaN\b|\bNone\b", shown), shown
    for metric in app.metric:
        assert not ELLIPSIS.search(str(metric.value)), (metric.label, metric.value)
        assert "_" not in metric.label, metric.label
    assert not any(name in shown.split() for name in INTERNAL_NAMES)


def test_two_settings_apart_compare_names_both_and_gives_no_ratio(seed_lab: SeededLab) -> None:
    first = add_done_run(seed_lab, vus=2, max_tokens=128, tok=20.0, p95=8.0)
    second = add_done_run(seed_lab, vus=1, max_tokens=32, tok=16.0, p95=2.0)
    app = open_page(PAGES["Compare"], runs=f"{first},{second}")
    assert sorted(widget(app.multiselect, "compare_runs").value) == [first, second]
    diff = frame_with(app, "setting")
    values = {row["setting"]: (row[f"#{first} naive"], row[f"#{second} naive"]) for _, row in diff.iterrows()}
    assert values == {"max tokens": ("128", "32"), "VUs": ("2", "1")}
    shown = texts(app)
    assert re.search(r"2 settings differ: (max tokens, VUs|VUs, max tokens)\.", shown)
    assert "No ratio applies" in shown and "differ in more than one setting" in shown
    assert not [frame for frame in app.dataframe if "what changes" in frame.value.columns]
    side = frame_with(app, "settings that differ")
    assert set(side["settings that differ"].iloc[0].split("; ")) == {"max tokens 32 vs 128", "VUs 1 vs 2"}
    assert "growth" not in shown  # no seed ratio over runs from different set-ups


def test_one_setting_apart_compare_gives_the_ratio(seed_lab: SeededLab) -> None:
    first = add_done_run(seed_lab, vus=1, max_tokens=32, tok=16.0, p95=2.0)
    second = add_done_run(seed_lab, vus=4, max_tokens=32, tok=40.0, p95=4.0)
    app = open_page(PAGES["Compare"], runs=f"{first},{second}")
    assert list(frame_with(app, "setting")["setting"]) == ["VUs"]
    ratios = frame_with(app, "what changes")
    row = ratios[ratios["figure"] == "output tok/s"].iloc[0]
    assert row["what changes"] == "VUs 1 → 4" and row["ratio"] == "2.50x"
    assert "No ratio applies" not in texts(app)


def test_compare_preselects_the_newest_experiments_cells(seed_lab: SeededLab) -> None:
    app = open_page(PAGES["Compare"])
    widget(app.radio, "compare_mode").set_value("individual runs").run()
    assert sorted(widget(app.multiselect, "compare_runs").value) == sorted(seed_lab.done_run_ids)


def test_the_human_csv_leaves_missing_values_empty_and_translates_every_header(seed_lab: SeededLab) -> None:
    app = open_page(PAGES["Compare"])
    widget(app.toggle, "compare_csv_human").set_value(True).run()
    for name in ("compare_raw_csv", "compare_table_csv"):
        rows = list(csv.reader(io.StringIO(app.session_state[name])))
        assert not [cell for row in rows for cell in row if cell.lower() == "nan"], name
        assert not [header for header in rows[0] if "_" in header], rows[0]


def test_a_finished_run_reports_itself_on_runs(seed_lab: SeededLab) -> None:
    run_id = add_done_run(seed_lab, vus=1, max_tokens=32, tok=16.0, p95=2.5)
    app = open_page(PAGES["Runs"])
    shown = texts(app)
    assert f"**Run #{run_id}** · ✅ done" in shown
    assert "req/s=1.00" in shown and "p95 latency (s)=2.500" in shown and "output tok/s=16.0" in shown
    links = [link.proto.label for link in app.get("page_link")]
    assert f"Open run #{run_id}" in links
    table = app.dataframe[0].value
    assert list(table.columns[:7]) == ["run", "status", "backend", "cell", "req/s", "output tok/s", "p95 latency (s)"]


def test_ticked_runs_open_compare(seed_lab: SeededLab) -> None:
    app = open_page(PAGES["Runs"])
    widget(app.multiselect, "runs_selected").set_value(seed_lab.done_run_ids[:2]).run()
    widget(app.button, "compare_selected").click().run()
    assert [heading.value for heading in app.title] == ["Compare"]
    assert sorted(widget(app.multiselect, "compare_runs").value) == seed_lab.done_run_ids[:2]


def test_stop_the_experiment_beside_cancel_this_run(seed_lab: SeededLab) -> None:
    spec = ExperimentSpec(
        name="three", base=RunSpec(backend="naive", model=get_settings().default_model), grid={"load.vus": [1, 2, 3]}
    )
    with Session(seed_lab.engine, expire_on_commit=False) as session:
        ids = [run.id for run in experiments.enqueue_experiment(session=session, spec=spec).runs]
    store.set_run_status(engine=seed_lab.engine, run_id=ids[0], status=RunStatus.STARTING)
    app = open_page(PAGES["Runs"])
    assert widget(app.button, f"cancel_live_{ids[0]}")
    widget(app.button, next(b.key for b in app.button if b.key and b.key.startswith("stop_experiment_"))).click().run()
    with Session(seed_lab.engine) as session:
        runs = [session.get_one(Run, run_id) for run_id in ids]
        assert runs[0].cancel_requested and [run.status for run in runs[1:]] == [RunStatus.CANCELLED] * 2
    assert "3 runs cancelled" in texts(app)


def test_the_first_page_starts_small_then_offers_the_seed_with_its_estimate(seed_lab: SeededLab) -> None:
    app = open_page(PAGES["New experiment"])
    assert widget(app.selectbox, "preset_name").value == "first-run"
    assert re.search(r"1 run, about \d+ (s|min) in all \(1 service start", texts(app)), texts(app)
    widget(app.selectbox, "preset_name").select("seed-exp1").run()
    assert widget(app.toggle, "preset_quick").value is True
    assert re.search(r"6 runs, about \d+ (s|min) in all \(2 service starts", texts(app))
    widget(app.text_area, "preset_overrides").input("load.duration_s=10\ngrid.load.vus=[1]").run()
    assert re.search(r"2 runs, about \d+ (s|min) in all", texts(app))
    widget(app.text_area, "preset_overrides").input("load.vus=zero").run()
    assert "These settings cannot be used" in texts(app)


def test_the_grid_tab_shows_its_estimate_and_takes_overrides(seed_lab: SeededLab) -> None:
    app = open_page(PAGES["New experiment"])
    widget(app.text_input, "grid_vus").input("1, 2").run()
    assert re.search(r"2 runs, about \d+ (s|min) in all \(1 service start", texts(app))
    widget(app.text_area, "grid_overrides").input("temperature=0").run()
    widget(app.button, "launch_grid").click().run()
    with Session(seed_lab.engine) as session:
        newest = store.list_runs(session=session, limit=2)
        assert {run.spec["temperature"] for run in newest} == {0}


def test_a_start_abandoned_by_a_cancel_is_not_failed(seed_lab: SeededLab) -> None:
    worker_store.upsert_service_record(
        engine=seed_lab.engine,
        worker=get_settings().worker_name,
        name="vllm",
        kind="command",
        state="failed",
        message="vllm: start abandoned (cancelled)",
    )
    app = open_page(PAGES["Services"])
    assert "stopped (start cancelled)" in set(frame_with(app, "state")["state"])


def test_a_compare_link_to_a_deleted_run_keeps_the_others(seed_lab: SeededLab) -> None:
    app = open_page(PAGES["Compare"], runs=f"{seed_lab.done_run_ids[0]},{seed_lab.done_run_ids[1]},999")
    assert not app.exception
    assert sorted(widget(app.multiselect, "compare_runs").value) == seed_lab.done_run_ids[:2]
