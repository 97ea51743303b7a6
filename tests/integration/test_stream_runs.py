"""Streamed runs end to end through the lab (worker, k6, parser, store) against the stub
OpenAI server as an external target: one that streams, one that ignores ``stream``."""

from __future__ import annotations

import pytest

from db.models import RunStatus
from lab.specs.schema import load_preset
from services.processes import find_free_port
from tests.stub_openai import StubServer
from tests.support.integration_lab import run_experiment

pytestmark = pytest.mark.integration


def streamed_external_run(engine, settings, url: str) -> dict:
    spec = load_preset(
        "seed-exp1",
        overrides=[
            ("backend", "external"),
            ("target_url", url),
            ("grid.backend", ["external"]),
            ("grid.load.vus", [2]),
            ("load.duration_s", 3),
            ("warmup_requests", 0),
            ("workload.stream", True),
        ],
    )
    [record] = run_experiment(engine, settings, spec)
    assert record["status"] == RunStatus.DONE, record["status_reason"]
    return record


def test_a_streamed_run_stores_client_ttft_and_tpot(lab_engine, lab_settings) -> None:
    with StubServer(port=find_free_port(), delay_s=0.2, token_delay_s=0.01, completion_tokens=16) as stub:
        record = streamed_external_run(lab_engine, lab_settings, stub.url)
    assert 0.2 <= record["ttft_avg_s"] < record["latency_avg_s"]
    assert 0.01 <= record["tpot_avg_s"] < 0.05
    assert record["ttft_p50_s"] <= record["ttft_p95_s"] <= record["ttft_p99_s"]
    assert record["unstreamed_answers"] == 0
    assert record["ttft_hit_avg_s"] is None  # no response cache answered


def test_a_target_that_ignores_stream_is_timed_to_the_whole_body_and_flagged(lab_engine, lab_settings) -> None:
    with StubServer(port=find_free_port(), delay_s=0.2, streams=False) as stub:
        record = streamed_external_run(lab_engine, lab_settings, stub.url)
    assert record["unstreamed_answers"] == record["requests_ok"] > 0
    assert record["ttft_avg_s"] == pytest.approx(record["latency_avg_s"])
    assert record["tpot_avg_s"] is None
