"""A generated trace replayed by the real k6 against a stub that records arrivals: every
request arrives, on time, and requests sharing leading hash ids share their leading text."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.measurement.trace_figures import trace_part
from lab.specs.schema import RunSpec
from services.processes import find_free_port
from tests.stub_openai import StubServer
from tests.support.traces import mooncake_lines, trace_replay_k6, write_trace

pytestmark = [pytest.mark.integration, pytest.mark.timing, pytest.mark.timeout(180)]

REQUESTS, RATE_PER_S, BLOCK_TOKENS = 300, 20, 32


@pytest.fixture
def stub() -> Iterator[StubServer]:
    with StubServer(port=find_free_port(), delay_s=0.02, record_arrivals=True) as server:
        yield server


def test_a_trace_is_replayed_on_schedule_with_its_prefix_sharing(tmp_path: Path, stub: StubServer) -> None:
    lines = mooncake_lines(REQUESTS, RATE_PER_S, block_tokens=BLOCK_TOKENS, families=4, prefix_blocks=2, seed=7)
    trace = write_trace(tmp_path / "generated.jsonl", lines)
    spec = RunSpec.model_validate(
        {
            "backend": "external",
            "target_url": stub.url,
            "model": "models/SmolLM2-135M-Instruct",
            "workload": {"kind": "trace", "trace": {"path": str(trace), "block_tokens": BLOCK_TOKENS}},
            "load": {"duration_s": 60, "max_vus": 32, "graceful_stop_s": 10},
            "warmup_requests": 0,
        }
    )
    run_dir = tmp_path / "run"
    k6 = trace_replay_k6(spec, run_dir, stub.url, spec.backend_kind)
    with k6:
        assert k6.wait(timeout_s=120) == 0, k6.exit_message()

    arrivals = stub.stats.arrivals
    assert len(arrivals) == REQUESTS  # every request arrived, once
    figures = trace_part(run_dir, run_dir / "summary.json")
    assert figures is not None and figures.trace_name == "generated.jsonl"
    assert figures.lateness_p99_ms is not None and figures.lateness_p99_ms <= 10
    assert figures.requests_late_over_50ms == 0
    # Server side too: the arrivals keep the trace's spacing (1 / 20 s), nothing sent early.
    times = sorted(time for time, _ in arrivals)
    assert times[-1] - times[0] == pytest.approx((REQUESTS - 1) / RATE_PER_S, abs=0.5)

    # Arrivals in send order match the trace's lines by their schedule: compare their text.
    by_time = [body for _, body in sorted(arrivals, key=lambda arrival: arrival[0])]
    traced = [json.loads(line) for line in lines]
    contents = [body["messages"][-1]["content"] for body in by_time]
    sharing = differing = 0
    for a in range(0, REQUESTS, 7):
        for b in range(a + 1, min(REQUESTS, a + 40)):
            ids_a, ids_b = traced[a]["hash_ids"], traced[b]["hash_ids"]
            if ids_a[:2] == ids_b[:2]:
                # Two shared blocks of 32 tokens (template head included): a long common start.
                assert contents[a][:40] == contents[b][:40]
                sharing += 1
            elif ids_a[0] != ids_b[0]:
                assert contents[a][:40] != contents[b][:40]
                differing += 1
    assert sharing > 50 and differing > 50
