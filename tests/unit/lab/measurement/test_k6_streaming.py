"""Client-side streaming figures (lab_ttft, lab_tpot) from REAL k6 v1.1.0 output against the
stub (tests/fixtures/k6/make_stream_fixtures.py): 0.1 s to the first chunk, 16 chunks 10 ms
apart on a MISS, none apart on a HIT."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.measurement.k6_ndjson_files import stream_series
from lab.measurement.k6_results import client_figures, parse_summary, streaming_figures
from lab.measurement.results import RESULT_FIELDS, RunResults

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "k6"
COUNTS = json.loads((FIXTURES / "stream_counts.json").read_text())
STREAM_KEYS = (
    "ttft_avg_s",
    "ttft_p50_s",
    "ttft_p95_s",
    "ttft_p99_s",
    "tpot_avg_s",
    "tpot_p95_s",
    "ttft_hit_avg_s",
    "ttft_hit_p95_s",
    "ttft_miss_avg_s",
    "ttft_miss_p95_s",
    "tpot_hit_avg_s",
    "tpot_miss_avg_s",
    "unstreamed_answers",
)


def test_streamed_run_has_client_ttft_and_tpot_in_seconds() -> None:
    figures = parse_summary(FIXTURES / "stream_summary.json")
    assert figures["requests_ok"] == COUNTS["stream"]["completions_ok"]
    assert figures["output_tokens"] == COUNTS["stream"]["completion_tokens_total"]  # from the usage chunk
    for key in ("ttft_avg_s", "ttft_p50_s", "ttft_p95_s", "ttft_p99_s"):
        assert 0.1 <= figures[key] < 0.2, key  # the stub's 0.1 s before the first chunk
    assert figures["ttft_p50_s"] <= figures["ttft_p95_s"] <= figures["ttft_p99_s"]
    # MISS: 15 gaps of 10 ms over 15 tokens after the first; HIT: no gaps.
    assert 0.01 <= figures["tpot_miss_avg_s"] < 0.03
    assert figures["tpot_hit_avg_s"] < 0.005
    assert figures["ttft_avg_s"] < figures["latency_avg_s"]
    assert figures["unstreamed_answers"] == 0


def test_hit_and_miss_split_adds_up() -> None:
    summary = json.loads((FIXTURES / "stream_summary.json").read_text())["metrics"]
    hits = summary["lab_ttft{cache:HIT}"]["values"]["count"]
    misses = summary["lab_ttft{cache:MISS}"]["values"]["count"]
    assert hits == COUNTS["stream"]["cache_hits"]
    assert hits + misses == summary["lab_ttft"]["values"]["count"] == COUNTS["stream"]["completions_ok"]


def test_the_ndjson_gives_the_summary_figures() -> None:
    summary = parse_summary(FIXTURES / "stream_summary.json")
    streamed = stream_series(FIXTURES / "stream.ndjson").client_figures().figures()
    for key in STREAM_KEYS:
        assert streamed[key] == pytest.approx(summary[key], rel=1e-9), key


def test_an_answer_that_ignores_stream_is_timed_to_its_whole_body_and_flagged() -> None:
    figures = parse_summary(FIXTURES / "unstreamed_summary.json")
    assert figures["unstreamed_answers"] == COUNTS["unstreamed"]["completions_ok"] > 0
    assert figures["ttft_avg_s"] == pytest.approx(figures["latency_avg_s"])  # time to the whole body
    assert figures["tpot_avg_s"] is None and figures["tpot_p95_s"] is None
    assert figures["output_tokens"] == COUNTS["unstreamed"]["completion_tokens_total"]
    assert (
        stream_series(FIXTURES / "unstreamed.ndjson").client_figures().unstreamed_answers
        == figures["unstreamed_answers"]
    )


def test_a_run_without_stream_has_no_client_ttft() -> None:
    figures = parse_summary(FIXTURES / "number_story_summary.json")
    assert all(figures[key] is None for key in STREAM_KEYS)
    assert stream_series(FIXTURES / "number_story.ndjson").client_figures().ttft_avg_s is None


def test_a_declared_but_unfed_trend_is_not_a_zero_figure() -> None:
    empty = {"count": 0, "avg": 0, "med": 0, "p(95)": 0, "p(99)": 0}
    figures = streaming_figures({"lab_ttft": {"values": empty}, "lab_tpot": {"values": empty}})
    assert figures["ttft_avg_s"] is None and figures["tpot_p95_s"] is None and figures["unstreamed_answers"] is None


def test_every_streaming_figure_is_a_result_column() -> None:
    assert set(STREAM_KEYS) <= set(RESULT_FIELDS)
    results = RunResults.from_parts(client_figures(parse_summary(FIXTURES / "stream_summary.json")))
    assert results.ttft_p95_s is not None and results.ttft_hit_p95_s is not None


def test_one_request_s_points_share_tags_and_request_id() -> None:
    by_request: dict[str, dict[str, dict]] = {}
    for line in (FIXTURES / "stream.ndjson").read_text().splitlines():
        record = json.loads(line)
        if record.get("type") != "Point":
            continue
        request_id = (record["data"].get("metadata") or {}).get("lab_request_id")
        if request_id is not None:
            by_request.setdefault(request_id, {})[record["metric"]] = record["data"]
    assert len(by_request) >= COUNTS["stream"]["completions_ok"]
    complete = [points for points in by_request.values() if "lab_ttft" in points]
    assert len(complete) == COUNTS["stream"]["completions_ok"]
    for points in complete:
        assert points["lab_ttft"]["value"] == pytest.approx(points["http_req_waiting"]["value"])
        assert points["lab_ttft"]["tags"]["lab_request"] == points["http_req_duration"]["tags"]["lab_request"] == "chat"
        assert points["lab_ttft"]["tags"]["cache"] in ("HIT", "MISS")


def test_the_csv_export_carries_every_streaming_column() -> None:
    from lab.analysis.compare import RECORD_FIELDS

    assert set(STREAM_KEYS) <= set(RECORD_FIELDS)


def test_a_database_from_before_gets_the_streaming_columns_and_keeps_its_runs(tmp_path: Path) -> None:
    from sqlalchemy import inspect, text

    from db import migrations
    from db.engine import make_engine

    engine = make_engine(f"sqlite:///{tmp_path / 'old.db'}")
    migrations.upgrade(engine)
    version = migrations.MIGRATIONS.index(migrations._client_streaming_latency)
    with engine.begin() as connection:  # back to the schema before this migration
        for column in migrations.STREAMING_COLUMNS:
            connection.execute(text(f"ALTER TABLE runs DROP COLUMN {column}"))
        connection.execute(
            text(
                "INSERT INTO runs (spec, backend, model, workload, load_kind, duration_s, max_tokens, "
                "random_seed, cell_label, repeat_index, tags, notes, status, cancel_requested, created_at) VALUES "
                "('{}', 'vllm', 'm', 'number-story', 'constant-vus', 1, 1, 1, '', 0, '', '', 'done', 0, "
                "'2026-01-01 00:00:00')"
            )
        )
        connection.execute(text("UPDATE schema_version SET version = :v"), {"v": version})
    assert migrations.upgrade(engine) == version
    with engine.connect() as connection:
        columns = {column["name"] for column in inspect(connection).get_columns("runs")}
        assert set(migrations.STREAMING_COLUMNS) <= columns
        assert connection.execute(text("SELECT count(*) FROM runs")).scalar() == 1


def test_per_request_figures_of_a_streamed_run() -> None:
    from lab.measurement.k6_ndjson_files import stream_request_samples

    requests = stream_request_samples(FIXTURES / "stream.ndjson")
    assert len(requests) == COUNTS["stream"]["completions_total"]
    assert all(requests.ok)
    assert len(requests.ttft_s) == len(requests) and len(requests.tpot_s) == len(requests)
    assert max(requests.ttft_s) <= max(requests.latency_s)
    summary = parse_summary(FIXTURES / "stream_summary.json")
    assert sum(requests.ttft_s) / len(requests.ttft_s) == pytest.approx(summary["ttft_avg_s"], rel=1e-5)
    unstreamed = stream_request_samples(FIXTURES / "unstreamed.ndjson")
    assert len(unstreamed.tpot_s) == 0
    assert sorted(unstreamed.ttft_s) == pytest.approx(sorted(unstreamed.latency_s), rel=1e-5)
