"""Every page under Streamlit's AppTest, on a seeded temporary database.

Each test asserts what a user would see (titles, messages, table rows, CSV text) or
what an action leaves in the database (queued runs, cancel requests, deletions).
"""

from __future__ import annotations

import csv
import io
import os
import re
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from db import store, worker_store
from db.models import Run, RunStatus
from lab.members import os_user
from lab.settings import get_settings
from tests.support.app_pages import PAGES, elements, frame_with, open_page, runs_in_db, seen, texts, widget
from tests.support.seeded_lab import FORMULA_TAG, PROJECT_ROOT, SeededLab

FIXTURES = PROJECT_ROOT / "tests" / "fixtures" / "datasets"


# Every page rendering on a seeded database under its title: tests/ui/test_every_url_through_entry.py
# (each page opened first through the entry file, the sidebar included).


def test_sidebar_shows_the_queue_and_services(seed_lab: SeededLab) -> None:
    # AppTest drops the entry script's own elements after switch_page, so the shared
    # sidebar is checked on the default page (the browser test sees it on every page).
    app = open_page(PAGES["New experiment"])
    sidebar = "\n".join(element.value for element in elements(app.sidebar, "caption"))
    assert "4 done, 1 failed" in sidebar
    assert "none started yet" in sidebar
    assert [(m.label, m.value) for m in app.sidebar.metric] == [("queued", "1"), ("running", "0")]


def test_empty_lab_tells_what_to_do_next(empty_lab) -> None:
    assert "No runs yet. Start from the recommended first experiment" in texts(open_page(PAGES["Runs"]))
    assert "Nothing to compare yet" in texts(open_page(PAGES["Compare"]))
    assert "No runs yet. Launch one on New experiment" in texts(open_page(PAGES["Run detail"]))
    assert "No service has been started yet" in texts(open_page(PAGES["Services"]))


def test_launching_a_preset_queues_its_runs_and_goes_to_runs(seed_lab: SeededLab) -> None:
    app = open_page(PAGES["New experiment"])
    widget(app.selectbox, "preset_name").select("seed-exp1").run()
    assert "quick scale: 30 s per cell" in texts(app)
    before = len(runs_in_db(seed_lab))
    widget(app.button, "launch_preset").click().run()
    assert not app.exception
    assert [heading.value for heading in app.title] == ["Runs"]
    runs = runs_in_db(seed_lab)
    new = [run for run in runs if run.status == RunStatus.QUEUED][: len(runs) - before]
    assert len(runs) - before == 6
    assert sorted((run.backend, run.vus) for run in new) == [
        ("naive", 1),
        ("naive", 8),
        ("naive", 32),
        ("vllm", 1),
        ("vllm", 8),
        ("vllm", 32),
    ]
    assert "6 runs" in texts(app) and "queued" in texts(app)
    # Something is queued: the live view says so.
    assert "waiting for the worker" in texts(app)


def test_reproduce_tab_queues_a_long_experiment_shows_its_table_and_writes_an_interim_report(
    seed_lab: SeededLab, clean_checkout
) -> None:
    app = open_page(PAGES["New experiment"])
    assert "No long experiment yet" in texts(app)
    before = len(runs_in_db(seed_lab))
    widget(app.number_input, "reproduce_repeats").set_value(1).run()
    assert "Planned rounds: 13 runs, about " in texts(app)
    widget(app.selectbox, "reproduce_scale").select("adapted").run()
    # This lab's stored quick runs lengthen cells: the adapted estimate is longer than the quick one.
    assert "The adapted scale lengthens no cell here" not in texts(app)
    widget(app.selectbox, "reproduce_scale").select("quick").run()
    widget(app.checkbox, "reproduce_until_decided").check().run()
    widget(app.number_input, "reproduce_budget_h").set_value(0.25).run()
    assert "is under one round's predicted" in texts(app) and widget(app.button, "reproduce_queue").disabled
    widget(app.number_input, "reproduce_budget_h").set_value(8.0).run()
    widget(app.button, "reproduce_queue").click().run()
    assert not app.exception, [item.value for item in app.exception]
    # One round queued (repeats 1: every cell of the three presets), the table following it.
    assert len(runs_in_db(seed_lab)) - before == 6 + 4 + 3
    page_text = texts(app)
    assert "#1 seed reproduction, quick scale, until decided" in page_text
    assert "rounds 0 done of 1 planned; runs 0 done, 13 left" in page_text
    widget(app.button, "reproduce_report").click().run()
    assert not app.exception, [item.value for item in app.exception]
    markdown = (Path(app.session_state["reproduction_report"]) / "README.md").read_text()
    assert "Interim, after 0 of 1 planned rounds" in markdown
    assert '<script src="http' not in (Path(app.session_state["reproduction_report"]) / "report.html").read_text()


def test_the_adapted_scale_says_why_it_runs_like_the_seeds_on_an_empty_lab(empty_lab) -> None:
    app = open_page(PAGES["New experiment"])
    widget(app.selectbox, "reproduce_scale").select("adapted").run()
    assert not app.exception
    assert (
        "The adapted scale lengthens no cell here, so it runs like the seed's: 13 of 13 cells have no stored run "
        "on this machine to predict from" in texts(app)
    )


def test_grid_form_shows_validation_beside_the_field_and_queues_nothing(seed_lab: SeededLab) -> None:
    app = open_page(PAGES["New experiment"])
    widget(app.text_input, "grid_vus").input("0, 8").run()
    widget(app.number_input, "grid_max_tokens").set_value(0).run()
    before = len(runs_in_db(seed_lab))
    widget(app.button, "launch_grid").click().run()
    assert not app.exception
    errors = [seen(error.value) for error in app.error]
    assert "VUs must be whole numbers from 1 to 1024 (got 0)" in errors
    assert any(error.startswith("max tokens: Input should be greater than or equal to 1") for error in errors)
    assert "Fix the fields marked above, then launch again." in errors
    assert len(runs_in_db(seed_lab)) == before
    # Correcting the field clears its message.
    widget(app.text_input, "grid_vus").input("1, 8").run()
    assert not any(seen(error.value).startswith("VUs must") for error in app.error)
    widget(app.text_input, "grid_vus").input("two").run()
    assert "'two' is not a number" in [seen(error.value) for error in app.error]


def test_grid_form_refuses_more_runs_than_one_launch_may_queue(seed_lab: SeededLab) -> None:
    app = open_page(PAGES["New experiment"])
    widget(app.multiselect, "grid_backends").set_value(["naive"]).run()
    widget(app.text_input, "grid_vus").input(", ".join(str(vus) for vus in range(1, 401))).run()
    before = len(runs_in_db(seed_lab))
    widget(app.button, "launch_grid").click().run()
    assert not app.exception
    errors = [seen(error.value) for error in app.error]
    assert any(
        "would queue 400 runs (400 cells x 1 repeats); one launch may queue at most 300" in error for error in errors
    ), errors
    assert len(runs_in_db(seed_lab)) == before


def test_grid_form_launch_queues_one_run_per_cell(seed_lab: SeededLab) -> None:
    app = open_page(PAGES["New experiment"])
    widget(app.multiselect, "grid_backends").set_value(["naive"]).run()
    widget(app.text_input, "grid_vus").input("1, 2").run()
    widget(app.number_input, "grid_duration").set_value(5.0).run()
    widget(app.number_input, "grid_max_tokens").set_value(16).run()
    widget(app.text_input, "grid_name").input("ui grid").run()
    widget(app.checkbox, "grid_stream").check().run()
    widget(app.button, "launch_grid").click().run()
    assert not app.exception
    assert [heading.value for heading in app.title] == ["Runs"]
    new = [run for run in runs_in_db(seed_lab) if run.experiment and run.experiment.name == "ui grid"]
    assert sorted(run.vus or 0 for run in new) == [1, 2]
    assert all(run.max_tokens == 16 and run.duration_s == 5.0 and run.backend == "naive" for run in new)
    assert all(run.spec["workload"]["stream"] is True for run in new)


def test_upload_is_checked_then_stored_under_a_generated_name(seed_lab: SeededLab) -> None:
    app = open_page(PAGES["New experiment"])
    uploader = elements(app, "file_uploader")[0]
    uploader.set_value(("small.json", (FIXTURES / "sharegpt_small.json").read_bytes(), "application/json")).run()
    widget(app.button, "upload_save").click().run()
    assert not app.exception
    assert any(seen(message.value).startswith("Saved small.json:") for message in app.success)
    stored = [
        p for p in (seed_lab.data_dir / "uploads").iterdir() if p.name.endswith(".json") and ".meta" not in p.name
    ]
    assert len(stored) == 1 and stored[0].name != "small.json"

    elements(app, "file_uploader")[0].set_value(("bad.json", b"{not json", "application/json")).run()
    widget(app.button, "upload_save").click().run()
    assert any(seen(error.value).startswith("Not saved: bad.json") for error in app.error)


def test_runs_page_lists_runs_with_badges_and_sorts(seed_lab: SeededLab) -> None:
    app = open_page(PAGES["Runs"])
    table = app.dataframe[0].value
    assert len(table) == 6
    assert set(table["status"]) == {"✅ done", "❌ failed", "⏳ queued"}
    widget(app.selectbox, "runs_sort").select("output tok/s").run()
    table = app.dataframe[0].value
    assert list(table["output tok/s"].head(4)) == ["62.0", "22.7", "20.1", "17.0"]
    widget(app.multiselect, "filter_statuses").set_value(["failed"]).run()
    table = app.dataframe[0].value
    assert list(table["run"]) == [str(seed_lab.failed_run_id)]


def test_live_view_shows_progress_and_cancels(seed_lab: SeededLab) -> None:
    store.set_run_status(
        engine=seed_lab.engine,
        run_id=seed_lab.queued_run_id,
        status=RunStatus.RUNNING,
        progress={
            "elapsed_s": 5.0,
            "planned_s": 20.0,
            "fraction": 0.25,
            "requests_completed": 3,
            "requests_failed": 1,
            "req_per_s": 0.6,
            "vus": 8,
        },
    )
    app = open_page(PAGES["Runs"])
    assert f"Live: run #{seed_lab.queued_run_id}" in texts(app)
    progress = elements(app, "progress")[0]
    assert progress.value == 25 and "5 s elapsed, 15 s remaining" in progress.proto.text
    assert "failed requests=1" in texts(app) and "req/s so far=0.60" in texts(app)
    widget(app.button, f"cancel_live_{seed_lab.queued_run_id}").click().run()
    assert not app.exception
    with Session(seed_lab.engine) as session:
        assert session.get_one(Run, seed_lab.queued_run_id).cancel_requested


def test_delete_asks_for_confirmation(seed_lab: SeededLab) -> None:
    app = open_page(PAGES["Runs"])
    victim = seed_lab.failed_run_id
    widget(app.multiselect, "runs_selected").set_value([victim]).run()
    widget(app.button, "delete_selected").click().run()
    assert any("Delete 1 run and their series for good?" in w.value for w in app.warning)
    assert victim in [run.id for run in runs_in_db(seed_lab)]
    widget(app.button, "confirm_delete_yes").click().run()
    assert not app.exception
    assert victim not in [run.id for run in runs_in_db(seed_lab)]
    assert "Deleted 1 run." in texts(app)


def test_a_delete_confirmed_after_the_run_started_deletes_nothing_and_says_why(seed_lab: SeededLab) -> None:
    app = open_page(PAGES["Runs"])
    run_id = seed_lab.queued_run_id
    widget(app.multiselect, "runs_selected").set_value([run_id]).run()
    widget(app.button, "delete_selected").click().run()  # drawn while the run was queued
    store.set_run_status(engine=seed_lab.engine, run_id=run_id, status=RunStatus.RUNNING)
    widget(app.button, "confirm_delete_yes").click().run()
    assert not app.exception
    assert run_id in [run.id for run in runs_in_db(seed_lab)]
    assert f"Deleted 0 runs. Left as they are: #{run_id} (started since the page was drawn" in texts(app)


def test_tags_and_notes_are_editable(seed_lab: SeededLab) -> None:
    app = open_page(PAGES["Runs"])
    run_id = seed_lab.done_run_ids[1]
    widget(app.multiselect, "runs_selected").set_value([run_id]).run()
    widget(app.text_input, f"edit_tags_{run_id}").input("baseline, cpu")
    widget(app.text_area, f"edit_notes_{run_id}").input("warm cache")
    submit = next(b for b in app.button if b.label == "Save tags and notes")
    submit.click().run()
    assert not app.exception
    with Session(seed_lab.engine) as session:
        run = session.get_one(Run, run_id)
        notes = store.list_run_notes(session=session, run_id=run_id)
        assert run.tags == "baseline,cpu"
        # No name given, no sign-in: the user running the lab.
        assert [(note.author, note.text) for note in notes] == [(os_user(), "warm cache")]  # the thread
        assert [(a.action, a.actor) for a in store.list_run_actions(session=session, run_id=run_id)] == [
            ("tag", os_user()),
            ("note", os_user()),
        ]


def test_run_detail_shows_figures_charts_logs_and_runs_again(seed_lab: SeededLab) -> None:
    run_id = seed_lab.done_run_ids[0]
    app = open_page(PAGES["Run detail"], run=str(run_id))
    shown = texts(app)
    assert f"Run #{run_id} · ✅ done" in shown
    assert "output tok/s=22.7" in shown and "p95 latency=6.10 s" in shown
    charts = app.get("plotly_chart")
    assert len(charts) >= 5  # throughput, latency, VUs, CPU, RSS
    assert any("naive log line 2" in code.value for code in app.code)
    # The naive server's samples under the lab's names, their names on /metrics beside them.
    metrics = app.dataframe[0].value
    assert ("requests finished ok", "vllm:request_success_total") in set(
        zip(metrics["metric"], metrics["name on /metrics"], strict=True)
    )
    before = len(runs_in_db(seed_lab))
    widget(app.button, "run_again").click().run()
    # "Run again" opens New experiment with the run's spec in an editable form.
    assert [heading.value for heading in app.title] == ["New experiment"]
    assert f"Run again: run #{run_id}'s spec" in texts(app)
    app.switch_page(PAGES["New experiment"]).run()  # AppTest reruns its own page, not the one switched to
    lines = widget(app.text_area, "run_again_overrides").value
    assert "backend=naive" in lines and "max_tokens=128" in lines
    widget(app.text_area, "run_again_overrides").input(lines.replace("max_tokens=128", "max_tokens=16")).run()
    widget(app.button, "run_again_launch").click().run()
    assert [heading.value for heading in app.title] == ["Runs"]
    runs = runs_in_db(seed_lab)
    original = next(run for run in runs if run.id == run_id)
    assert len(runs) == before + 1 and runs[0].status == RunStatus.QUEUED
    assert runs[0].spec == {**original.spec, "max_tokens": 16}


def test_compare_shows_the_seed_table_ratios_and_safe_csv(seed_lab: SeededLab) -> None:
    app = open_page(PAGES["Compare"])
    assert "The seed's table (seed-exp1), ours beside the seed's" in texts(app)
    table = frame_with(app, "seed throughput (tok/s)")
    assert list(table["VUs"]) == ["1", "1", "8", "8"]
    assert list(table["server"]) == ["Transformers", "vLLM", "Transformers", "vLLM"]
    assert list(table["seed throughput (tok/s)"]) == ["27.0", "139.0", "25.6", "1,045.0"]
    assert list(table["throughput (tok/s)"]) == ["22.7", "17.0", "20.1", "62.0"]
    ratios = frame_with(app, "value")
    assert (
        dict(zip(ratios["ratio"], ratios["value"], strict=True))["vLLM over naive output tok/s at 8 VUs"]
        == f"{62.0 / 20.1:.2f}"
    )
    significance = frame_with(app, "what changes")
    assert set(significance["significance"]) == {"n too small (n=1 vs 1; needs 3 each)"}
    cost = frame_with(app, "cost per 1M output tokens")
    naive_1 = cost[(cost["backend"] == "naive") & (cost["VUs"] == "1")]["cost per 1M output tokens"].iloc[0]
    assert naive_1 == f"{1.0 / (22.7 * 3600) * 1e6:,.2f}"
    assert len(app.get("plotly_chart")) == 6  # tok/s, req/s, latency, hit rates, series, Pareto
    assert [button.label for button in elements(app, "download_button")] == [
        "Download this table (CSV)",
        "Download raw per-run data (CSV)",
    ]

    shown_rows = list(csv.DictReader(io.StringIO(app.session_state["compare_table_csv"])))
    assert [row["seed req/s"] for row in shown_rows] == ["0.21", "1.09", "0.20", "8.17"]
    raw_rows = list(csv.DictReader(io.StringIO(app.session_state["compare_raw_csv"])))
    assert len(raw_rows) == 4
    tags = {row["tags"] for row in raw_rows}
    assert "'" + FORMULA_TAG in tags and FORMULA_TAG not in tags

    widget(app.number_input, "compare_price").set_value(2.0).run()
    cost = frame_with(app, "cost per 1M output tokens")
    assert cost["cost per 1M output tokens"].iloc[0] == f"{2.0 / (22.7 * 3600) * 1e6:,.2f}"


def test_compare_shows_warned_runs_with_their_warning_and_leaves_them_out_when_asked(seed_lab: SeededLab) -> None:
    with Session(seed_lab.engine) as session:
        session.get_one(Run, seed_lab.done_run_ids[0]).measurement_warnings = "other processes used 150% of a core"
        session.commit()
    app = open_page(PAGES["Compare"])
    assert (
        f"1 run in the means carries a measurement warning (read with care): #{seed_lab.done_run_ids[0]}: other "
        "processes used 150% of a core." in texts(app)
    )
    assert len(frame_with(app, "seed throughput (tok/s)")) == 4
    widget(app.toggle, "compare_leave_out_warned").set_value(True).run()
    assert "1 run with measurement warnings left out of the means." in texts(app)
    assert len(frame_with(app, "seed throughput (tok/s)")) == 3


def test_compare_individual_runs_without_a_preset_table(seed_lab: SeededLab) -> None:
    app = open_page(PAGES["Compare"])
    widget(app.radio, "compare_mode").set_value("individual runs").run()
    widget(app.multiselect, "compare_runs").set_value(seed_lab.done_run_ids[:2]).run()
    assert not app.exception
    # Both runs come from seed-exp1, so its table still applies.
    assert "The seed's table (seed-exp1)" in texts(app)
    assert len(frame_with(app, "seed throughput (tok/s)")) == 2


def test_services_page_shows_state_and_log_tail(seed_lab: SeededLab) -> None:
    log_path = seed_lab.data_dir / "logs" / "naive.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text("INFO loading model\nINFO ready on /health\n")
    worker_store.upsert_service_record(
        engine=seed_lab.engine,
        worker=get_settings().worker_name,
        name="naive",
        kind="naive",
        state="stopped",
        log_path=str(log_path),
    )
    app = open_page(PAGES["Services"])
    table = app.dataframe[0].value
    assert list(table["service"]) == ["naive"] and list(table["state"]) == ["stopped"]
    assert any("INFO ready on /health" in code.value for code in app.code)
    assert [option for option in widget(app.selectbox, "service_to_start").options] == [
        "naive (about 10 s)",
        "vllm (about 1 min on a small CPU machine (several with compilation))",
        "llamacpp (a few seconds)",
        "redis (a second)",
        "cache-proxy (starts the default backend and Redis too if they are not up)",
    ]


def test_services_cannot_be_started_or_stopped_by_hand_during_a_run(seed_lab: SeededLab) -> None:
    worker_store.upsert_service_record(
        engine=seed_lab.engine, worker=get_settings().worker_name, name="naive", kind="naive", state="stopped"
    )
    store.claim_next_run(engine=seed_lab.engine, worker_pid=1)  # the queued run becomes active
    app = open_page(PAGES["Services"])
    assert "is using the services" in texts(app)
    assert widget(app.button, "start_service").disabled


def test_a_services_page_drawn_before_a_run_started_stops_nothing_at_the_click(
    seed_lab: SeededLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pages.services

    stopped: list[str] = []
    monkeypatch.setattr(pages.services, "stop_service_in_background", stopped.append)
    worker_store.upsert_service_record(
        engine=seed_lab.engine,
        worker=get_settings().worker_name,
        name="naive",
        kind="naive",
        state="running",
        pid=os.getpid(),
    )
    app = open_page(PAGES["Services"])
    stop = widget(app.button, "stop_naive")
    assert not stop.disabled  # drawn while nothing ran
    store.claim_next_run(engine=seed_lab.engine, worker_pid=1)  # then a run starts
    stop.click().run()
    assert not app.exception
    assert stopped == []
    assert any("Stop naive refused: run #" in text and "nothing changed" in text for text in texts(app).splitlines())


def test_streamlit_config_keeps_the_lab_on_loopback() -> None:
    import tomllib

    config = tomllib.loads(Path(PROJECT_ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["address"] == "127.0.0.1"
    assert config["client"]["showErrorDetails"] == "none"
    assert config["browser"]["gatherUsageStats"] is False
    from lab.settings import Settings

    assert config["server"]["maxUploadSize"] * 2**20 == Settings().upload_max_bytes


# --------------------------------------------------------------------------- workers

GPU_BOX = {
    "cpu_model": "AMD EPYC",
    "cpu_cores": 16,
    "memory_gib": 128.0,
    "gpus": [{"name": "NVIDIA H200", "memory_gib": 139.8}],
    "lab_version": "abc",
}


def test_workers_page_lists_workers_labels_hardware_heartbeat_and_services(seed_lab: SeededLab) -> None:
    worker_store.register_worker(
        engine=seed_lab.engine, name="gpu-box", host="gpu-host", pid=1, labels=["gpu", "h200"], hardware=GPU_BOX
    )
    worker_store.upsert_service_record(
        engine=seed_lab.engine, worker="gpu-box", name="vllm", kind="vllm", state="running"
    )
    app = open_page("pages/workers.py")
    assert not app.exception
    assert "1 of 1 workers alive" in texts(app)
    [row] = app.dataframe[0].value.to_dict("records")
    assert (row["worker"], row["labels"], row["current run"], row["services on its machine"]) == (
        "gpu-box on gpu-host",
        "gpu, h200",
        "–",
        "vllm: running",
    )
    assert re.fullmatch(r"alive, \d+ s ago", row["state"])  # the heartbeat's age beside the state
    assert row["hardware"] == "NVIDIA H200 (139.8 GiB), AMD EPYC (16 cores, 128.0 GiB)"


def test_runs_and_compare_filter_by_worker_and_say_where_the_seed_figures_ran(seed_lab: SeededLab) -> None:
    first, *_others = seed_lab.done_run_ids
    with Session(seed_lab.engine) as session:
        for run_id in seed_lab.done_run_ids:
            run = session.get_one(Run, run_id)
            run.worker_name, run.worker_hardware = ("gpu-box", GPU_BOX) if run_id == first else ("cpu-box", None)
        session.commit()
    app = open_page(PAGES["Runs"])
    widget(app.selectbox, "filter_worker").set_value("gpu-box").run()
    assert list(app.dataframe[0].value["run"]) == [str(first)]
    assert list(app.dataframe[0].value["worker"]) == ["gpu-box"]
    app = open_page(PAGES["Compare"])
    assert "measured on gpu-box: NVIDIA H200 (139.8 GiB)" in texts(app)
    widget(app.selectbox, "compare_worker").set_value("cpu-box").run()
    assert not app.exception and "measured on" not in texts(app)


def test_run_detail_shows_client_vs_server_ttft_of_a_streamed_run(seed_lab: SeededLab) -> None:
    run_id = seed_lab.done_run_ids[0]
    store.update_run(
        engine=seed_lab.engine,
        run_id=run_id,
        ttft_avg_s=0.25,
        ttft_p95_s=0.4,
        tpot_avg_s=0.05,
        tpot_p95_s=0.07,
        server_ttft_avg_s=0.2,
        ttft_hit_p95_s=0.012,
        ttft_miss_p95_s=0.5,
        unstreamed_answers=0,
    )
    shown = texts(open_page(PAGES["Run detail"], run=str(run_id)))
    assert "Client TTFT (time to first byte of a streamed answer): avg 250 ms, p95 400 ms" in shown
    assert "server TTFT avg 200 ms (client − server: +50 ms)" in shown
    assert "cache HIT TTFT p95 12 ms, MISS p95 500 ms" in shown
    store.update_run(engine=seed_lab.engine, run_id=run_id, unstreamed_answers=3)
    shown = texts(open_page(PAGES["Run detail"], run=str(run_id)))
    assert "3 answers were not streamed (one JSON body)" in shown
