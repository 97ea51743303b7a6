"""Parser tests on small fixtures cut from REAL k6 v1.1.0 output (tests/fixtures/k6/make_fixtures.py).

The stub's server-side counts of each fixture run are in ``stub_counts.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.measurement.k6_ndjson_files import stream_series
from lab.measurement.k6_results import K6ResultsError, parse_summary, percentile
from lab.run.k6_driver import build_k6_command, describe_exit_code, script_path

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "k6"
STUB_COUNTS = json.loads((FIXTURES / "stub_counts.json").read_text())


def test_summary_counts_match_the_server_and_separate_failures() -> None:
    figures = parse_summary(FIXTURES / "number_story_summary.json")
    server = STUB_COUNTS["number_story"]
    assert figures["requests_ok"] == server["completions_ok"] == 12
    assert figures["requests_failed"] == server["completions_failed"] == 4
    assert figures["requests_total"] == server["completions_total"]  # the health check is not counted
    assert figures["output_tokens"] == server["completion_tokens_total"]
    assert figures["input_tokens"] == server["prompt_tokens_total"]
    assert figures["requests_interrupted"] == 0 and figures["iterations_interrupted"] == 0


def test_summary_rates_and_latency_units() -> None:
    figures = parse_summary(FIXTURES / "number_story_summary.json")
    assert figures["measured_duration_s"] == pytest.approx(2.025, abs=0.01)
    assert figures["req_per_s"] == pytest.approx(12 / figures["measured_duration_s"])
    assert figures["output_tok_per_s"] == pytest.approx(1536 / figures["measured_duration_s"])
    assert figures["input_tok_per_s"] == pytest.approx(480 / figures["measured_duration_s"])
    # The stub sleeps 0.25 s per completion: latencies are seconds, not ms.
    for key in (
        "latency_avg_s",
        "latency_min_s",
        "latency_p50_s",
        "latency_p90_s",
        "latency_p95_s",
        "latency_p99_s",
        "latency_max_s",
    ):
        assert 0.25 <= figures[key] < 0.30, key
    assert figures["latency_min_s"] <= figures["latency_p50_s"] <= figures["latency_p95_s"] <= figures["latency_max_s"]
    assert figures["latency_source"] == "http_req_duration{lab_request:chat,expected_response:true}"


def test_summary_cache_hit_rate_from_x_cache() -> None:
    figures = parse_summary(FIXTURES / "number_story_summary.json")
    assert figures["cache_hits"] == STUB_COUNTS["number_story"]["cache_hits"] == 9
    assert figures["cache_lookups"] == 12  # failed answers carry no X-Cache header
    assert figures["response_cache_hit_rate"] == pytest.approx(0.75)


def test_summary_without_cache_header_has_no_hit_rate() -> None:
    assert parse_summary(FIXTURES / "arrival_summary.json")["response_cache_hit_rate"] is None


def test_cancelled_run_counts_interrupted_iterations_and_requests() -> None:
    figures = parse_summary(FIXTURES / "cancelled_summary.json")
    assert figures["iterations_completed"] == 4
    assert figures["iterations_interrupted"] == 4
    assert figures["requests_interrupted"] == 4
    assert figures["requests_ok"] + figures["requests_interrupted"] == STUB_COUNTS["cancelled"]["completions_total"]


def test_arrival_rate_records_dropped_iterations_and_turns() -> None:
    figures = parse_summary(FIXTURES / "arrival_summary.json")
    assert figures["iterations_dropped"] > 0
    assert figures["iterations_completed"] * 2 == figures["requests_ok"] == STUB_COUNTS["arrival"]["completions_ok"]
    assert figures["vus_max"] == 1


def test_summary_export_layout_is_read_too(tmp_path: Path) -> None:
    handle_summary = json.loads((FIXTURES / "number_story_summary.json").read_text())
    exported = {
        "root_group": handle_summary["root_group"],
        "metrics": {name: metric["values"] for name, metric in handle_summary["metrics"].items()},
    }
    path = tmp_path / "export.json"
    path.write_text(json.dumps(exported))
    figures = parse_summary(path)
    assert figures["requests_ok"] == 12
    assert figures["measured_duration_s"] == pytest.approx(
        parse_summary(FIXTURES / "number_story_summary.json")["measured_duration_s"], rel=1e-6
    )


@pytest.mark.parametrize("content", [None, "", "{not json", '{"metrics": 3}'])
def test_bad_summary_raises_clear_error(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "summary.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(K6ResultsError, match="k6 summary"):
        parse_summary(path)


def test_stream_totals_match_the_summary_exactly() -> None:
    summary = parse_summary(FIXTURES / "number_story_summary.json")
    series = stream_series(FIXTURES / "number_story.ndjson")
    totals = series.totals()
    assert totals["requests_ok"] == summary["requests_ok"]
    assert totals["requests_failed"] == summary["requests_failed"]
    assert totals["output_tokens"] == summary["output_tokens"]
    for key in ("latency_avg_s", "latency_p50_s", "latency_p90_s", "latency_p95_s", "latency_p99_s", "latency_max_s"):
        assert totals[key] == pytest.approx(summary[key], rel=1e-9), key


def test_stream_buckets_per_second() -> None:
    series = stream_series(FIXTURES / "number_story.ndjson")
    assert series.time_s == [0.0, 1.0, 2.0][: len(series)]
    assert 2 <= len(series) <= 4
    assert sum(series.requests_ok) == 12 and sum(series.requests_failed) == 4
    assert max(vus for vus in series.vus if vus is not None) == 2
    for row in series.rows():
        if row["requests_ok"]:
            assert 0.25 <= row["latency_p50_s"] <= row["latency_p95_s"] < 0.3
            assert row["output_tokens"] == 128 * row["requests_ok"]


def test_stream_half_second_buckets_keep_totals() -> None:
    series = stream_series(FIXTURES / "number_story.ndjson", bucket_s=0.5)
    assert series.time_s[1] == 0.5
    assert sum(series.requests_ok) == 12


def test_stream_falls_back_when_the_line_layout_changes(tmp_path: Path) -> None:
    # Same samples, keys re-ordered: the fast path misses them, the JSON path must not.
    path = tmp_path / "reordered.ndjson"
    with open(FIXTURES / "number_story.ndjson") as source, open(path, "w") as target:
        for line in source:
            record = json.loads(line)
            target.write(
                json.dumps({"data": record["data"], "type": record["type"], "metric": record["metric"]}) + "\n"
            )
    fast = stream_series(FIXTURES / "number_story.ndjson")
    slow = stream_series(path)
    assert slow.requests_ok == fast.requests_ok and slow.requests_failed == fast.requests_failed
    assert slow.latency == fast.latency


def test_stream_ignores_a_truncated_last_line(tmp_path: Path) -> None:
    path = tmp_path / "cut.ndjson"
    data = (FIXTURES / "number_story.ndjson").read_bytes()
    path.write_bytes(data + b'{"metric":"http_req_duration","type":"Point","data":{"time":"2026-')
    assert stream_series(path).requests_ok_total == 12


def test_stream_missing_file_raises() -> None:
    with pytest.raises(K6ResultsError):
        stream_series(FIXTURES / "absent.ndjson")


def test_percentile_matches_k6_linear_interpolation() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.95) == pytest.approx(3.85)
    assert percentile([7.0], 0.99) == 7.0
    assert percentile([], 0.5) is None


def test_build_k6_command_is_an_argv_with_env_and_samples_on_stdout(tmp_path: Path) -> None:
    argv = build_k6_command(
        script=script_path("number-story"),
        env={"TARGET": "http://127.0.0.1:1", "VUS": "8"},
        summary_path=tmp_path / "s.json",
        api_address="127.0.0.1:7000",
    )
    assert argv[1] == "run" and "--quiet" in argv and "--no-usage-report" in argv
    assert argv[argv.index("--out") + 1] == "json=-"  # a pipe the lab reads, never a file
    assert argv[argv.index("--address") + 1] == "127.0.0.1:7000"
    pairs = [argv[i + 1] for i, arg in enumerate(argv) if arg == "-e"]
    assert pairs == [f"SUMMARY_PATH={tmp_path / 's.json'}", "TARGET=http://127.0.0.1:1", "VUS=8"]
    assert argv[-1].endswith("k6/number_story.js")
    with pytest.raises(ValueError):
        build_k6_command(script=script_path("custom"), env={"bad key": "x"}, summary_path=tmp_path / "s.json")


def test_exit_codes_have_clear_messages() -> None:
    assert "thresholds" in describe_exit_code(99)
    assert "exception" in describe_exit_code(107)
    assert "aborted" in describe_exit_code(108)
    assert "code 42" in describe_exit_code(42)
