"""A round trip through the real proxy, Redis and the naive server: traffic recorded by the
proxy (``--record-trace``), that recording replayed through a second recording proxy, and the
two recordings compared: the same number of requests, the same hash ids and lengths,
inter-arrival quantiles within 5%, and a response-cache hit rate within one point."""

from __future__ import annotations

import itertools
import json
import re
import time
from pathlib import Path

import httpx
import pytest

from lab.backends import get_backend
from lab.specs.schema import RunSpec
from lab.workloads.trace_plan import quantiles
from lab.workloads.trace_synth import SynthShape, synth_text
from services.supervisor import ManagedService
from tests.conftest import RunningService
from tests.support.integration_proxy import start_proxy
from tests.support.traces import trace_replay_k6

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

BLOCK_TOKENS = 32
MIN_GAP_MS = 40
# About 30 requests in 60 s from 20 users: openings repeat (hits), sessions grow (prefixes). Slow
# enough for the naive server on a shared CPU to answer each before the next: a repeat that came
# while its first was still being answered would wait (single-flight) instead of hitting, as the
# server's speed on the day decides.
SHAPE = SynthShape(
    rate_per_s=0.5, duration_s=60, sessions=20, prompts=10, system_prompts=2, system_prompt_tokens=32,
    prompt_tokens=16, output_tokens=2, block_tokens=BLOCK_TOKENS, random_seed=38,
)  # fmt: skip


def replay(trace: Path, proxy: ManagedService, model: str, run_dir: Path) -> None:
    """The lab's trace workload sends ``trace`` through ``proxy`` with the real k6."""
    spec = RunSpec.model_validate(
        {
            "backend": "external",
            "target_url": proxy.url,
            "model": model,
            "workload": {"kind": "trace", "trace": {"path": str(trace), "block_tokens": BLOCK_TOKENS}},
            "load": {"duration_s": 120, "max_vus": 64, "graceful_stop_s": 60},
            "warmup_requests": 0,
        }
    )
    k6 = trace_replay_k6(spec, run_dir, proxy.url, get_backend("naive"))
    with k6:
        assert k6.wait(timeout_s=240) == 0, k6.exit_message()


def hit_rate(proxy: ManagedService) -> float:
    text = httpx.get(f"{proxy.url}/metrics", timeout=5).text

    def total(name: str) -> float:
        found = re.search(rf"^lab_cache_{name}_total (\S+)$", text, re.MULTILINE)
        return float(found.group(1)) if found else 0.0

    hits = total("hits")
    return hits / (hits + total("misses") + total("bypasses") + total("errors"))


def recorded(path: Path, requests: int) -> list[dict]:
    """The recording's lines once all ``requests`` are written (the writer runs every 0.1 s)."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        if len(lines) >= requests:
            return lines
        time.sleep(0.2)
    return [json.loads(line) for line in path.read_text().splitlines()]


def spaced(text: str, min_gap_ms: float = MIN_GAP_MS) -> str:
    """The trace with requests at least ``min_gap_ms`` apart: two requests closer than the load
    generator's jitter may arrive in either order, and hash ids are numbered in arrival order."""
    lines, previous = [], -min_gap_ms
    for raw in text.splitlines():
        line = json.loads(raw)
        line["timestamp"] = previous = max(float(line["timestamp"]), previous + min_gap_ms)
        lines.append(json.dumps(line))
    return "\n".join(lines) + "\n"


def gaps_ms(lines: list[dict]) -> list[float]:
    return [b["timestamp"] - a["timestamp"] for a, b in itertools.pairwise(lines)]


def test_a_recorded_run_replayed_gives_back_its_requests_timing_and_hit_rate(
    tmp_path: Path, naive_service: RunningService, redis_service: RunningService, default_model_path: Path
) -> None:
    original = tmp_path / "original.jsonl"
    original.write_text(spaced(synth_text(SHAPE)))
    sent = len(original.read_text().splitlines())
    record = ["--record-tokenizer", str(default_model_path), "--record-block-tokens", str(BLOCK_TOKENS)]

    first_recording, second_recording = tmp_path / "recorded-1.jsonl", tmp_path / "recorded-2.jsonl"
    with start_proxy(
        naive_service.url, redis_service.redis_url, tmp_path, "--record-trace", str(first_recording), *record
    ) as proxy:
        replay(original, proxy, str(default_model_path), tmp_path / "run-1")
        first = recorded(first_recording, sent)
        first_hit_rate = hit_rate(proxy)
    with start_proxy(
        naive_service.url, redis_service.redis_url, tmp_path, "--record-trace", str(second_recording), *record
    ) as proxy:
        replay(first_recording, proxy, str(default_model_path), tmp_path / "run-2")
        second = recorded(second_recording, sent)
        second_hit_rate = hit_rate(proxy)

    assert len(first) == len(second) == sent
    assert {block for line in first for block in line["hash_ids"]} == {
        block for line in second for block in line["hash_ids"]
    }
    assert sorted(line["input_length"] for line in first) == sorted(line["input_length"] for line in second)
    # The hash ids say what the prompts share: the same sharing, request by request.
    assert [line["hash_ids"] for line in first] == [line["hash_ids"] for line in second]
    first_gaps, second_gaps = quantiles(gaps_ms(first)), quantiles(gaps_ms(second))
    for name in ("p50", "p90", "p99"):
        assert second_gaps[name] == pytest.approx(first_gaps[name], rel=0.05), (name, first_gaps, second_gaps)
    assert first_hit_rate > 0.05
    assert abs(second_hit_rate - first_hit_rate) <= 0.01, (first_hit_rate, second_hit_rate)
