"""Round 2 of the web lab, page by page in AppTest: tables a person can read (no raw None,
no internal column name, no unrounded number), one status vocabulary across the live
panel, the table and the sidebar, start-up you can follow, failures as one line, charts
only with data, and launch-time refusals."""

from __future__ import annotations

import re

import pytest
from sqlalchemy.orm import Session

from db import store, worker_store
from db.models import Run, RunStatus, utc_now
from lab.settings import get_settings
from tests.support.app_pages import PAGES, assert_tables_readable, elements, frame_with, open_page, texts, widget
from tests.support.seeded_lab import SeededLab

TRACEBACK = """Traceback (most recent call last):
  File "/srv/lab/runner.py", line 10, in __aenter__
    await client.post("http://127.0.0.1:1/v1")
httpx.ConnectError: [Errno 111] Connection refused"""


def make_running(seed: SeededLab, **progress) -> int:
    run_id = seed.queued_run_id
    store.set_run_status(
        engine=seed.engine,
        run_id=run_id,
        status=RunStatus.RUNNING,
        progress={
            "phase": "load",
            "in_flight": 1,
            "elapsed_s": 12.0,
            "planned_s": 20.0,
            "fraction": 0.6,
            "requests_completed": 4,
            "requests_failed": 0,
            "req_per_s": 0.33,
            "vus": 1,
            "graceful_stop_s": 30,
            "live": {
                "k6": {
                    "time_s": [0, 1, 2, 3, 4, 5],
                    "output_tokens": [0, 16, 16, 0, 16, 16],
                    "requests_ok": [0, 1, 1, 0, 1, 1],
                    "requests_failed": [0] * 6,
                    "latency_avg_s": [None, 0.81234, 0.8, None, 0.79, 0.8],
                    "latency_p95_s": [None, 0.81234, 0.8, None, 0.79, 0.8],
                },
                "cpu": {
                    "time_s": [0, 1, 2],
                    "naive_cpu_percent": [95.0, 99.0, 97.5],
                    "k6_cpu_percent": [2.0, 3.0, 2.5],
                    "other_cpu_percent": [10.0, 5.0, 0.0],
                },
                "server": {"time_s": [0, 1, 2], "running_requests": [1, 1, 1], "waiting_requests": [0, 0, 0]},
            },
            **progress,
        },
    )
    return run_id


@pytest.mark.parametrize("page", [*list(PAGES.values()), "pages/workers.py"])
def test_every_table_reads_as_a_person_would(seed_lab: SeededLab, page: str) -> None:
    with Session(seed_lab.engine) as session:  # a figure with a long tail, as k6 writes them
        session.get_one(Run, seed_lab.done_run_ids[0]).latency_avg_s = 44.684187910000006
        session.commit()
    worker_store.upsert_service_record(
        engine=seed_lab.engine, worker=get_settings().worker_name, name="naive", kind="naive", state="stopped"
    )  # no PID, no URL: dashes, not None
    worker_store.register_worker(engine=seed_lab.engine, name="cpu-box", host="cpu-host", pid=1, labels=[], hardware={})
    app = open_page(page, **({"run": str(seed_lab.done_run_ids[0])} if page == PAGES["Run detail"] else {}))
    assert assert_tables_readable(app) >= (0 if page == PAGES["New experiment"] else 1)
    assert "None" not in texts(app)


def test_runs_page_table_shows_local_times_and_dashes(seed_lab: SeededLab) -> None:
    table = open_page(PAGES["Runs"]).dataframe[0].value
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", value) for value in table["created"])
    assert "–" in set(table["output tok/s"])  # the queued and failed runs have no figures
    assert {"avg latency (s)", "p95 latency (s)", "output tok/s", "req/s"} <= set(table.columns)


def test_panel_table_and_sidebar_say_the_same_phase(seed_lab: SeededLab) -> None:
    run_id = make_running(seed_lab, phase="draining", in_flight=3)
    app = open_page(PAGES["Runs"])
    phase = "draining (3 requests in flight)"
    assert f"Live: run #{run_id}** · ▶️ {phase}" in texts(app)
    table = app.dataframe[0].value
    assert table[table["run"] == str(run_id)]["status"].iloc[0] == f"▶️ {phase}"
    assert "waiting for 3 requests still in flight (graceful stop, at most 30 s)" in app.get("progress")[0].proto.text
    sidebar = "\n".join(element.value for element in elements(open_page(PAGES["New experiment"]).sidebar, "caption"))
    assert phase in sidebar


def test_live_charts_during_the_load_only_those_with_data(seed_lab: SeededLab) -> None:
    make_running(seed_lab)
    app = open_page(PAGES["Runs"])
    charts = app.get("plotly_chart")
    titles = [chart.proto.spec for chart in charts]
    assert len(charts) == 5  # tokens, requests, latency, backend queue, CPU
    # Legends name the process, the axis carries the unit.
    assert any('"name":"other processes"' in spec and "% of one core" in spec for spec in titles)
    assert not any("output_tok_per_s" in spec or "naive_cpu_percent" in spec for spec in titles)
    assert "requests done=4" in texts(app)


def test_run_detail_follows_a_running_run(seed_lab: SeededLab) -> None:
    run_id = make_running(seed_lab)
    app = open_page(PAGES["Run detail"], run=str(run_id))
    assert f"Run #{run_id} · ▶️ load" in texts(app)
    assert len(app.get("plotly_chart")) == 5
    assert "follow it live on Runs" not in texts(app)


def test_starting_shows_elapsed_the_last_log_line_and_the_expected_time(seed_lab: SeededLab) -> None:
    with Session(seed_lab.engine) as session:
        queued = session.get_one(Run, seed_lab.queued_run_id)
        earlier = session.get_one(Run, seed_lab.done_run_ids[-1])  # a vLLM run, same model and options
        queued_spec = dict(queued.spec)
        earlier.spec, earlier.model = queued_spec, queued.model
        earlier.environment = {"startup": {"seconds": 61.4, "fresh": True}}
        session.commit()
    log_path = seed_lab.data_dir / "logs" / "vllm.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text(
        'INFO Loading weights took 3.2 s\nINFO "GET /metrics HTTP/1.1" 200\nINFO "GET /health HTTP/1.1" 200\n'
    )
    worker_store.upsert_service_record(
        engine=seed_lab.engine,
        worker=get_settings().worker_name,
        name="vllm",
        kind="vllm",
        state="starting",
        log_path=str(log_path),
    )
    store.set_run_status(engine=seed_lab.engine, run_id=seed_lab.queued_run_id, status=RunStatus.STARTING)
    with Session(seed_lab.engine) as session:
        session.get_one(Run, seed_lab.queued_run_id).started_at = utc_now()
        session.commit()
    app = open_page(PAGES["Runs"])
    shown = texts(app)
    assert "s elapsed" in shown and "the last start of this configuration took 61 s" in shown
    assert [code.value for code in app.code] == ["INFO Loading weights took 3.2 s"]


def test_a_failure_is_one_plain_line_with_the_full_log_below(seed_lab: SeededLab) -> None:
    store.set_run_status(
        engine=seed_lab.engine, run_id=seed_lab.failed_run_id, status=RunStatus.FAILED, reason=TRACEBACK
    )
    app = open_page(PAGES["Run detail"], run=str(seed_lab.failed_run_id))
    assert (
        next(seen.value for seen in app.error).replace("\\", "") == "httpx.ConnectError: [Errno 111] Connection refused"
    )
    assert any(code.value == TRACEBACK for code in app.code)


def test_compare_names_the_experiments_and_drops_empty_charts(seed_lab: SeededLab) -> None:
    with Session(seed_lab.engine) as session:
        for run_id in seed_lab.done_run_ids:
            session.get_one(Run, run_id).prefix_cache_hit_rate = None
        session.commit()
    app = open_page(PAGES["Compare"])
    shown = texts(app)
    assert "of 4 runs from experiment #1" in shown
    keys = [chart.key for chart in app.get("plotly_chart")]
    assert keys == [
        "compare_throughput",
        "compare_requests",
        "compare_latency",
        "compare_series",
        "compare_pareto_chart",
    ]  # no cache-hit chart
    ratios = list(frame_with(app, "value")["ratio"])
    assert "vLLM over naive output tok/s at 1 VU" in ratios and not any("hit" in ratio for ratio in ratios)
    assert not any("·" in ratio or "_" in ratio for ratio in ratios)
    widget(app.toggle, "compare_csv_human").set_value(True).run()
    header = app.session_state["compare_raw_csv"].splitlines()[0]
    assert "output tok/s" in header and "output_tok_per_s" not in header


def test_grid_form_offers_the_graceful_stop_and_refuses_a_model_not_on_an_offline_machine(
    seed_lab: SeededLab, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    app = open_page(PAGES["New experiment"])
    widget(app.number_input, "grid_graceful_stop").set_value(90.0)
    widget(app.text_input, "grid_model").input("nobody/not-on-this-machine")
    widget(app.button, "launch_grid").click().run()
    assert "neither a local folder nor in the Hugging Face cache" in texts(app)
    with Session(seed_lab.engine) as session:
        before = len(store.list_runs(session=session))
    widget(app.text_input, "grid_model").input("models/SmolLM2-135M-Instruct")
    widget(app.button, "launch_grid").click().run()
    with Session(seed_lab.engine) as session:
        runs = store.list_runs(session=session)
        assert len(runs) == before + 1 and runs[0].spec["load"]["graceful_stop_s"] == 90.0


def test_a_starting_run_says_it_prepares_its_requests() -> None:
    from lab.run.steps import PREPARING_PHASE
    from pages.view.tables import phase_text

    assert phase_text("starting", {"phase": PREPARING_PHASE}) == "starting: preparing the requests"
    assert phase_text("warming", {"phase": PREPARING_PHASE}) == phase_text("warming")
