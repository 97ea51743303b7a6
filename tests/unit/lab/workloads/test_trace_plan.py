"""The replay's plan from the trace alone: schedule, cut, clipping, the two ceilings, the summary."""

from __future__ import annotations

import json

import pytest

from lab.workloads.trace_file import TraceRequest, parse_trace
from lab.workloads.trace_plan import plan_trace, prefix_reuse_ceiling, response_cache_ceiling, summarise


def request(index: int, hash_ids: list[int], *, at_ms: float | None = None, tokens: int | None = None, out: int = 10):
    return TraceRequest(
        line=index + 1,
        timestamp_ms=at_ms if at_ms is not None else index * 100.0,
        input_length=tokens if tokens is not None else 4 * len(hash_ids),
        output_length=out,
        hash_ids=tuple(hash_ids),
    )


def test_the_schedule_is_the_timestamps_over_the_speedup_cut_at_the_duration() -> None:
    trace = [request(i, [i], at_ms=i * 1000.0) for i in range(10)]
    plan = plan_trace(trace, block_tokens=4, speedup=2.0, duration_s=3)
    assert [item.send_at_ms for item in plan.requests] == [0, 500, 1000, 1500, 2000, 2500]
    assert (plan.requests_cut, plan.cut_at_s) == (4, 3)
    assert plan.cut_note() == (
        "the trace was cut at 3 s, the run's duration: 4 of its 10 requests (from request 7 on) were not sent"
    )
    assert plan_trace(trace, block_tokens=4, duration_s=60).cut_note() is None


def test_over_long_prompts_are_clipped_to_the_context_less_the_output_or_skipped() -> None:
    trace = [request(0, [1, 2, 3], tokens=3000, out=100), request(1, [4], tokens=500, out=100)]
    plan = plan_trace(trace, block_tokens=1024, context_tokens=2048)
    clipped = plan.requests[0]
    assert (clipped.input_tokens, clipped.hash_ids, clipped.clipped) == (1948, (1, 2), True)
    assert (plan.requests_clipped, plan.requests_skipped) == (1, 0)
    skipping = plan_trace(trace, block_tokens=1024, max_input_tokens=1000, over_long="skip")
    assert [item.request.line for item in skipping.requests] == [2] and skipping.requests_skipped == 1


def test_the_response_cache_ceiling_counts_whole_repeats_of_prompt_and_output() -> None:
    trace = [
        request(0, [1, 2]),
        request(1, [1, 2]),  # a repeat: hit
        request(2, [1, 2], out=20),  # another output length: miss
        request(3, [1, 3]),  # another prompt sharing a prefix: miss
        request(4, [1, 2], out=20),  # hit
    ]
    assert response_cache_ceiling(plan_trace(trace, block_tokens=4).requests, block_tokens=4) == pytest.approx(2 / 5)


def test_a_prompt_longer_than_its_ids_never_repeats() -> None:
    # 2 ids of 4 tokens for 12 tokens: the last 4 are the request's own text.
    trace = [request(0, [1, 2], tokens=12), request(1, [1, 2], tokens=12)]
    assert response_cache_ceiling(plan_trace(trace, block_tokens=4).requests, block_tokens=4) == 0


def test_the_prefix_reuse_ceiling_counts_leading_known_blocks_in_tokens() -> None:
    trace = [
        request(0, [1, 2, 3]),  # 12 tokens, nothing known
        request(1, [1, 2, 4]),  # 8 of 12 reused
        request(2, [5, 2, 3]),  # another first block: nothing reused although 2 and 3 are known
        request(3, [1, 2, 3], tokens=10),  # all known, 10 tokens
    ]
    planned = plan_trace(trace, block_tokens=4).requests
    assert prefix_reuse_ceiling(planned, block_tokens=4) == pytest.approx((8 + 10) / (12 + 12 + 12 + 10))


def test_the_summary_gives_counts_rates_quantiles_sessions_and_ceilings() -> None:
    lines = [
        json.dumps({"timestamp": t, "input_length": 8, "output_length": 5, "hash_ids": [1, 2], "session_id": s})
        for t, s in ((0, "a"), (100, "a"), (200, "b"), (1500, "c"), (2000, "c"))
    ]
    summary = summarise(plan_trace(parse_trace(lines, block_tokens=4), block_tokens=4), block_tokens=4)
    assert (summary.requests, summary.duration_s, summary.peak_rate_per_s, summary.sessions) == (5, 2.0, 3, 3)
    assert summary.mean_rate_per_s == pytest.approx(2.5)
    assert summary.input_tokens == {"p50": 8, "p90": 8, "p99": 8, "max": 8}
    assert summary.response_cache_ceiling == pytest.approx(4 / 5)
    assert summary.prefix_reuse_ceiling == pytest.approx(32 / 40)
    text = "\n".join(summary.lines())
    assert "5 requests over 2.0 s: mean rate 2.50/s, peak 3 in one second; 3 sessions" in text
    assert "response cache 80.0%, prefix reuse 80.0%" in text
    assert "0 prompts clipped and 0 skipped" in text
