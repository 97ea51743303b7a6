"""Compare's charts join only runs that differ in the chart's own axis (issue 39, item 1), and
its picker's one default and run labels (item 3): the pure helpers, then the page."""

from __future__ import annotations

import base64
import json
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from pages.view.compare_picker import DEFAULT_TEXT, default_choice, run_labels
from pages.view.figures import coinciding, figure_vs_vus, line_figure
from pages.view.series import LOAD_AXIS, NO_AXIS, VUS_AXIS, chart_series, with_series
from tests.support.app_pages import PAGES, open_page, texts, widget
from tests.support.seeded_lab import SeededLab, add_done_run


def spec(backend: str = "naive", vus: int = 1, max_tokens: int = 128, seed: int = 1) -> dict[str, Any]:
    return {"backend": backend, "load": {"vus": vus, "duration_s": 5}, "max_tokens": max_tokens, "random_seed": seed}


def record(run_id: int, backend: str = "naive", vus: int = 1, tok: float = 10.0) -> dict[str, Any]:
    return {"run_id": run_id, "backend": backend, "vus": vus, "status": "done", "output_tok_per_s": tok}


def test_runs_apart_in_vus_alone_are_one_series() -> None:
    records = [record(1, vus=1), record(2, vus=2)]
    series = chart_series(records, [spec(vus=1, seed=1), spec(vus=2, seed=2)], VUS_AXIS)
    assert [(s.label, s.run_ids) for s in series] == [("naive", (1, 2))]


def test_runs_apart_in_vus_and_max_tokens_are_two_series_named_by_what_differs() -> None:
    records = [record(1, vus=1), record(2, vus=2)]
    series = chart_series(records, [spec(vus=1, max_tokens=32), spec(vus=2, max_tokens=16)], VUS_AXIS)
    assert [(s.label, s.run_ids) for s in series] == [("naive · max tokens 32", (1,)), ("naive · max tokens 16", (2,))]


def test_backends_are_series_and_repeats_share_one() -> None:
    records = [record(1), record(2), record(3, "vllm"), record(4, "vllm", vus=8)]
    specs = [spec(seed=1), spec(seed=2), spec("vllm"), spec("vllm", vus=8)]
    assert [(s.label, s.run_ids) for s in chart_series(records, specs, VUS_AXIS)] == [
        ("naive", (1, 2)),
        ("vllm", (3, 4)),
    ]


def test_over_time_each_run_is_named_by_every_setting_that_differs() -> None:
    records = [record(1, vus=1), record(2, vus=2)]
    labelled = with_series(records, [spec(vus=1, max_tokens=32), spec(vus=2, max_tokens=16)], NO_AXIS)
    assert [r["series"] for r in labelled] == ["naive · 1 VU · max tokens 32", "naive · 2 VUs · max tokens 16"]


def test_legend_names_are_short_and_an_imported_run_is_named_by_its_tool() -> None:
    long_url = "http://127.0.0.1:8611/a/very/long/path/to/a/server"
    native = {**spec(max_tokens=32), "target_url": long_url, "temperature": 0.5, "top_p": 0.9}
    other = {**spec(max_tokens=16), "target_url": long_url + "/2", "temperature": 0.7, "top_p": 0.8}
    imported = {"backend": "naive", "load": {"vus": 1}, "max_tokens": 64}  # only what its tool wrote
    records = [record(1), record(2), {**record(3), "source": "guidellm 0.8.1"}]
    labels = [s.label for s in chart_series(records, [native, other, imported], VUS_AXIS)]
    assert all(len(label) <= 80 for label in labels), labels
    assert labels[2].startswith("naive · imported from guidellm 0.8.1")
    assert "127.0.0.1" not in labels[2]  # settings the imported run does not record name no series


def test_the_pareto_axis_is_the_load_and_a_run_without_a_spec_is_its_own_series() -> None:
    records = [record(1, vus=1), record(2, vus=4), record(3, vus=2)]
    series = chart_series(records, [spec(vus=1), spec(vus=4), None], LOAD_AXIS)
    assert [s.run_ids for s in series] == [(1, 2), (3,)]


def test_the_chart_draws_one_line_per_series() -> None:
    records = [record(1, vus=1, tok=10), record(2, vus=2, tok=20)]
    apart = with_series(records, [spec(vus=1, max_tokens=32), spec(vus=2, max_tokens=16)], VUS_AXIS)
    joined = with_series(records, [spec(vus=1), spec(vus=2)], VUS_AXIS)
    assert [len(trace.x) for trace in figure_vs_vus(apart, "output_tok_per_s", title="t").data] == [1, 1]
    assert [len(trace.x) for trace in figure_vs_vus(joined, "output_tok_per_s", title="t").data] == [2]


def test_coinciding_lines_say_so_and_no_axis_goes_below_zero() -> None:
    frame = pd.DataFrame({"time_s": [0], "latency_avg_s": [1.0], "latency_p50_s": [1.0], "latency_p95_s": [1.0]})
    assert coinciding(frame, ["latency_avg_s", "latency_p50_s", "latency_p95_s"]) == {
        "latency_p50_s": "latency_avg_s",
        "latency_p95_s": "latency_avg_s",
    }
    figure = line_figure(frame, ["latency_avg_s", "latency_p50_s", "latency_p95_s"], title="t", y_title="s")
    assert [trace.name for trace in figure.data] == [
        "avg latency",
        "p50 latency (= avg latency)",
        "p95 latency (= avg latency)",
    ]
    assert len({trace.line.dash for trace in figure.data}) == 3
    assert figure.layout.xaxis.rangemode == "nonnegative" and figure.layout.yaxis.rangemode == "tozero"


def run(run_id: int, experiment_id: int | None, **fields: Any) -> SimpleNamespace:
    return SimpleNamespace(
        **{"backend": "naive", "vus": 1, "repeat_index": 0, **fields}, id=run_id, experiment_id=experiment_id
    )


def test_one_default_for_both_modes() -> None:
    runs = [run(9, 5), run(8, 4), run(7, 4), run(6, None)]  # newest first; #5 holds one done run
    assert default_choice(runs) == default_choice(runs)
    choice = default_choice(runs)
    assert (choice.experiment_ids, choice.run_ids) == ([4], [7, 8])
    alone = default_choice([run(3, 1), run(2, None)])
    assert (alone.experiment_ids, alone.run_ids) == ([1], [2, 3])


def test_run_labels_name_what_differs_from_neighbours_and_where_a_run_came_from() -> None:
    runs = [
        run(3, 1, spec=spec(max_tokens=32), source_tool="guidellm"),
        run(2, 1, spec=spec(max_tokens=16), trace_name="chat-day"),
        run(1, 1, spec=spec(max_tokens=16, vus=2), vus=2, repeat_index=0),
        run(0, 1, spec=spec(max_tokens=16, vus=2, seed=2), vus=2, repeat_index=1),
        run(-1, None, spec=None, source_tool="lab", vus=None),
    ]
    labels = run_labels(runs)
    assert labels[3] == "#3 naive · 1 VU · max tokens 32 · imported from guidellm"
    assert labels[2] == "#2 naive · 1 VU · max tokens 16 · trace chat-day"
    assert labels[1] == "#1 naive · 2 VUs · repeat 1"
    assert labels[0] == "#0 naive · 2 VUs · repeat 2"
    assert labels[-1] == "#-1 naive"


@pytest.fixture
def two_pairs(seed_lab: SeededLab) -> dict[str, tuple[int, int]]:
    return {
        "apart": (
            add_done_run(seed_lab.engine, vus=1, max_tokens=32, tok=16.0, p95=2.0),
            add_done_run(seed_lab.engine, vus=2, max_tokens=16, tok=20.0, p95=3.0),
        ),
        "vus alone": (
            add_done_run(seed_lab.engine, vus=1, max_tokens=64, tok=16.0, p95=2.0),
            add_done_run(seed_lab.engine, vus=2, max_tokens=64, tok=30.0, p95=3.0),
        ),
    }


def points(values: Any) -> int:
    """How many values a Plotly JSON array holds (plain, or base64 typed as Plotly 6 writes numpy)."""
    if isinstance(values, dict) and "bdata" in values:
        return len(np.frombuffer(base64.b64decode(values["bdata"]), dtype=np.dtype(values["dtype"])))
    return len(values or [])


def chart_lines(app: Any, key: str) -> list[int]:
    """How many points each trace of the chart ``key`` joins."""
    (chart,) = [chart for chart in app.get("plotly_chart") if chart.key == key]
    return [points(trace.get("x")) for trace in json.loads(chart.proto.spec)["data"]]


def test_compare_joins_runs_only_along_the_charts_own_axis(two_pairs: dict[str, tuple[int, int]]) -> None:
    first, second = two_pairs["apart"]
    app = open_page(PAGES["Compare"], runs=f"{first},{second}")
    assert chart_lines(app, "compare_throughput") == [1, 1]
    assert chart_lines(app, "compare_requests") == [1, 1]
    assert chart_lines(app, "compare_pareto_chart") == [1, 1]
    assert "A line joins only runs that differ in the chart's own axis" in texts(app)
    spec_text = json.dumps([json.loads(c.proto.spec)["data"] for c in app.get("plotly_chart")])
    assert "max tokens 32" in spec_text and "max tokens 16" in spec_text
    first, second = two_pairs["vus alone"]
    app = open_page(PAGES["Compare"], runs=f"{first},{second}")
    assert chart_lines(app, "compare_throughput") == [2]
    assert chart_lines(app, "compare_pareto_chart") == [2]


def test_the_picker_defaults_alike_in_both_modes_and_says_so(seed_lab: SeededLab) -> None:
    app = open_page(PAGES["Compare"])
    assert widget(app.multiselect, "compare_experiments").value == [seed_lab.experiment_id]
    assert DEFAULT_TEXT in texts(app)
    widget(app.radio, "compare_mode").set_value("individual runs").run()
    assert sorted(widget(app.multiselect, "compare_runs").value) == sorted(seed_lab.done_run_ids)
    options = widget(app.multiselect, "compare_runs").options
    assert any("naive · 8 VUs" in option for option in options), options
