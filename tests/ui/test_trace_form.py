"""The New experiment form offers an uploaded trace, shows its summary before the launch, and
queues runs that name the trace by name and sha256."""

from __future__ import annotations

from pathlib import Path

from lab.workloads.uploads import record_upload, save_upload
from tests.support.app_pages import PAGES, open_page, runs_in_db, seen, widget
from tests.support.seeded_lab import SeededLab

TRACE = Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "mooncake_sample.jsonl"


def test_a_trace_is_offered_summarised_before_the_launch_and_named_by_its_runs(seed_lab: SeededLab) -> None:
    saved = save_upload(
        data=TRACE.read_bytes(),
        original_name="prod-sample.jsonl",
        kind="trace",
        upload_dir=seed_lab.data_dir / "uploads",
        max_bytes=10**6,
    )
    record_upload(saved)
    app = open_page(PAGES["New experiment"])
    widget(app.selectbox, "grid_workload").set_value("trace").run()
    widget(app.selectbox, "grid_trace_trace.path").set_value(str(saved.path)).run()
    widget(app.number_input, "grid_trace_trace.block_tokens").set_value(32).run()
    widget(app.number_input, "grid_duration").set_value(5.0).run()
    captions = " ".join(seen(caption.value) for caption in app.caption)
    assert "20 requests over 4.8 s" in captions and "3 sessions" in captions
    assert "ceilings from the trace: response cache" in captions and "prefix reuse" in captions
    assert "cut at 5 s (the run's duration): 4 requests not sent" in captions

    widget(app.text_input, "grid_name").input("trace grid").run()
    widget(app.button, "launch_grid").click().run()
    assert not app.exception
    (run,) = [run for run in runs_in_db(seed_lab) if run.experiment and run.experiment.name == "trace grid"]
    trace = run.spec["workload"]["trace"]
    assert trace["name"] == "prod-sample.jsonl" and len(trace["sha256"]) == 64
