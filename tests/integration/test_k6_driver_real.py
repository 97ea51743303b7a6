"""The k6 driver runs the REAL k6 binary against the stub OpenAI server.

Client-side figures (parsed from k6's own summary and NDJSON) are checked against the
stub's server-side counts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.measurement.k6_ndjson_files import stream_series
from lab.measurement.k6_results import parse_summary
from lab.run.k6_driver import K6Process, script_path
from services.processes import find_free_port
from tests.stub_openai import StubServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
def stub() -> Iterator[StubServer]:
    """A stub answering each completion after 20 ms, X-Cache by request body."""
    with StubServer(port=find_free_port(), delay_s=0.02, cache_mode="by-body") as server:
        yield server


def _k6(tmp_path: Path, workload: str, env: dict[str, str], keep_raw: str = "all") -> K6Process:
    return K6Process(
        script=script_path(workload),
        env=env,
        summary_path=tmp_path / "summary.json",
        ndjson_path=tmp_path / "samples.ndjson",
        log_path=tmp_path / "k6.log",
        keep_raw=keep_raw,
    )


def test_constant_vus_counts_match_the_server(tmp_path: Path, stub: StubServer) -> None:
    process = _k6(
        tmp_path, "number-story", {"TARGET": stub.url, "MODEL": "stub", "VUS": "4", "DURATION": "3s", "PROMPTS": "50"}
    )
    process.start()
    time.sleep(1.5)
    progress = process.progress()
    exit_code = process.wait(timeout_s=60)
    assert exit_code == 0, process.exit_message()
    assert progress.running and progress.requests_completed and progress.requests_completed > 0

    figures = parse_summary(process.summary_path)
    served = stub.stats.completions_ok
    assert served > 100  # 4 VUs x 3 s at 20 ms each: ~500 at most
    assert abs(figures["requests_ok"] - served) <= 0.02 * served
    assert figures["requests_failed"] == 0
    assert figures["output_tokens"] == stub.stats.completion_tokens_total
    assert figures["req_per_s"] == pytest.approx(served / figures["measured_duration_s"], rel=0.02)
    assert 0.02 <= figures["latency_p50_s"] < 0.5
    # 50 prompts: after the first of each, every request is a hit (the stub's own count).
    assert figures["response_cache_hit_rate"] == pytest.approx(stub.stats.cache_hits / served, rel=0.02)
    assert figures["vus_max"] == 4

    results = process.results()  # waits for the pipe's last bytes (the raw copy's too)
    assert results is not None
    piped, per_request = results
    series = stream_series(process.ndjson_path)
    assert series.requests_ok_total == figures["requests_ok"]
    assert series.latency.p95_s == pytest.approx(figures["latency_p95_s"], rel=1e-9)
    assert 3 <= len(series) <= 5
    assert max(vus for vus in series.vus if vus is not None) == 4
    # What the pipe gave as k6 wrote it is what the raw copy holds.
    assert piped.rows() == series.rows() and len(per_request) == figures["requests_total"]


def test_samples_come_through_the_pipe_and_nothing_is_left_on_disk(tmp_path: Path, stub: StubServer) -> None:
    process = _k6(
        tmp_path, "number-story", {"TARGET": stub.url, "MODEL": "stub", "VUS": "2", "DURATION": "2s"}, keep_raw="none"
    )
    process.start()
    assert process.wait(timeout_s=60) == 0, process.exit_message()
    results = process.results()
    assert results is not None
    series, per_request = results
    figures = parse_summary(process.summary_path)
    assert series.requests_ok_total == figures["requests_ok"] > 20
    assert len(per_request) == figures["requests_total"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["k6.log", "summary.json"]


def test_cancel_mid_run_still_writes_a_summary_with_interrupted_iterations(tmp_path: Path) -> None:
    with StubServer(port=find_free_port(), delay_s=1.0) as slow:
        process = _k6(tmp_path, "number-story", {"TARGET": slow.url, "VUS": "4", "DURATION": "30s"})
        process.start()
        time.sleep(2.5)  # two rounds answered, the third in flight
        started = time.monotonic()
        exit_code = process.cancel(grace_s=20)
        assert time.monotonic() - started < 10
        received = slow.stats.completions_total
    assert exit_code == 105
    assert "interrupted" in process.exit_message()
    figures = parse_summary(process.summary_path)
    assert figures["iterations_interrupted"] == 4  # one per VU, never silently dropped
    assert figures["requests_interrupted"] == 4
    assert figures["requests_ok"] + figures["requests_interrupted"] == received
    assert figures["measured_duration_s"] < 5


def test_chat_replay_sends_each_turn_tagged(tmp_path: Path, stub: StubServer) -> None:
    sessions = [
        [
            [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"Question {index}"}],
            [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": f"Question {index}"},
                {"role": "assistant", "content": "Answer"},
                {"role": "user", "content": "And then?"},
            ],
        ]
        for index in range(5)
    ]
    requests_file = tmp_path / "requests.json"
    requests_file.write_text(json.dumps(sessions))
    process = _k6(
        tmp_path,
        "sharegpt-chat",
        {
            "TARGET": stub.url,
            "REQUESTS_FILE": str(requests_file),
            "LOAD_KIND": "ramping-vus",
            "STAGES": json.dumps([{"duration": "1s", "target": 2}, {"duration": "1s", "target": 2}]),
        },
    )
    process.start()
    assert process.wait(timeout_s=60) == 0, process.exit_message()
    figures = parse_summary(process.summary_path)
    assert figures["requests_ok"] == stub.stats.completions_ok
    assert figures["requests_ok"] == 2 * figures["iterations_completed"]
    # Five distinct sessions replayed in a loop: from the sixth session on, every turn repeats.
    assert figures["cache_hits"] == stub.stats.cache_hits
    process.results()  # the raw copy is complete once the pipe is read to its end
    turns = {
        json.loads(line)["data"]["tags"].get("turn")
        for line in process.ndjson_path.open()
        if '"metric":"http_reqs","type":"Point"' in line and '"lab_request":"chat"' in line
    }
    assert turns == {"0", "1"}


def test_unhealthy_target_aborts_with_a_clear_message(tmp_path: Path) -> None:
    with StubServer(port=find_free_port(), healthy=False) as sick:
        process = _k6(tmp_path, "number-story", {"TARGET": sick.url, "VUS": "1", "DURATION": "5s"})
        process.start()
        exit_code = process.wait(timeout_s=60)
        assert sick.stats.completions_total == 0
    assert exit_code == 108
    message = process.exit_message()
    assert "aborted" in message and "is not healthy" in message and "503" in message


def test_constant_arrival_rate_records_dropped_iterations(tmp_path: Path) -> None:
    with StubServer(port=find_free_port(), delay_s=0.3) as slow:
        process = _k6(
            tmp_path,
            "number-story",
            {
                "TARGET": slow.url,
                "LOAD_KIND": "constant-arrival-rate",
                "RATE": "20",
                "DURATION": "2s",
                "PRE_ALLOCATED_VUS": "2",
                "MAX_VUS": "2",
            },
        )
        process.start()
        assert process.wait(timeout_s=60) == 0, process.exit_message()
        served = slow.stats.completions_ok
    figures = parse_summary(process.summary_path)
    assert figures["requests_ok"] == served
    assert figures["iterations_dropped"] >= 20  # 40 asked, 2 VUs x ~6 answered
    assert figures["iterations_completed"] + figures["iterations_dropped"] + figures[
        "iterations_interrupted"
    ] == pytest.approx(40, abs=2)
