"""Where one decoded token's time goes in vLLM on CPU, at 1 VU: a torch-profiler breakdown.

Starts vLLM with the lab's `best` options (or `--compiled`), with vLLM's own torch profiler
(`--profiler-config`) and its step scopes (`VLLM_CUSTOM_SCOPES_FOR_PROFILING`), sends one
warm-up request, then profiles `--requests` requests of the seed's number-story prompt sent
one after another (128 tokens each) and prints, per decoded token:

- the wall time of an engine step and of its phases (preprocess, forward, sample, ...);
- inside the forward pass, the top-level torch operators grouped into matrix products (the
  weights: what the memory-bandwidth bound is about), attention, and everything else;
- what is left: time in Python between operators (dispatch, scheduling, bookkeeping);
- the bandwidth bound (bf16 weights read once per token over the machine's copy bandwidth).

The profiler itself slows each operator a little: read the shares, not the absolute times.

    .venv/bin/python -m benchmarks.vllm_cpu_profile [--requests 1] [--compiled]
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import json
import os
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from benchmarks.vllm_cpu_flags import COPY_BANDWIDTH_BYTES_PER_S, WEIGHT_BYTES_PER_TOKEN

# Operator names (lower case) by what they do; the first match wins.
OPERATOR_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("matrix products (weights)", ("linear", "addmm", "matmul", "::mm", "bmm", "gemm", "onednn", "dnnl")),
    ("attention", ("attention", "attn", "paged", "sdpa")),
)


def group_of(name: str) -> str:
    lowered = name.lower()
    for group, needles in OPERATOR_GROUPS:
        if any(needle in lowered for needle in needles):
            return group
    return "other operators"


def load_trace(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        data = json.load(handle)
    events = data["traceEvents"] if isinstance(data, dict) else data
    return [e for e in events if e.get("ph") == "X" and "dur" in e]


def top_level(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Operators not inside another operator on the same thread (their time is inclusive)."""
    outer: list[dict[str, Any]] = []
    by_thread: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        by_thread[(event.get("pid"), event.get("tid"))].append(event)
    for thread_events in by_thread.values():
        end_of_open = -1.0
        for event in sorted(thread_events, key=lambda e: (e["ts"], -e["dur"])):
            if event["ts"] >= end_of_open:
                outer.append(event)
                end_of_open = event["ts"] + event["dur"]
    return outer


def within(events: list[dict[str, Any]], spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events that start inside one of ``spans`` (which do not overlap) on the same thread."""
    starts: dict[Any, list[float]] = defaultdict(list)
    ends: dict[Any, list[float]] = defaultdict(list)
    for span in sorted(spans, key=lambda e: e["ts"]):
        thread = (span.get("pid"), span.get("tid"))
        starts[thread].append(span["ts"])
        ends[thread].append(span["ts"] + span["dur"])
    inside = []
    for event in events:
        thread = (event.get("pid"), event.get("tid"))
        index = bisect.bisect_right(starts.get(thread, []), event["ts"]) - 1
        if index >= 0 and event["ts"] < ends[thread][index]:
            inside.append(event)
    return inside


def breakdown(events: list[dict[str, Any]], tokens: int) -> list[tuple[str, float]]:
    """(what, ms per token) rows from a worker trace."""
    rows: list[tuple[str, float]] = []
    scopes = [e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("gpu_model_runner: ")]
    steps = [e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("execute_")]
    by_phase: dict[str, float] = defaultdict(float)
    for scope in scopes:
        by_phase[scope["name"].removeprefix("gpu_model_runner: ")] += scope["dur"]
    for phase, micros in sorted(by_phase.items(), key=lambda item: -item[1]):
        rows.append((f"phase: {phase}", micros / 1000 / tokens))
    forward = [s for s in scopes if s["name"] == "gpu_model_runner: forward"]
    operators = [e for e in events if e.get("cat") == "cpu_op"]
    outer_ops = top_level(within(operators, forward) if forward else operators)
    by_group: dict[str, float] = defaultdict(float)
    for op in outer_ops:
        by_group[group_of(op["name"])] += op["dur"]
    forward_total = sum(s["dur"] for s in forward) or sum(op["dur"] for op in outer_ops)
    for group, micros in sorted(by_group.items(), key=lambda item: -item[1]):
        rows.append((f"forward, {group}", micros / 1000 / tokens))
    rows.append(
        (
            "forward, between operators (Python, dispatch)",
            max(0.0, forward_total - sum(by_group.values())) / 1000 / tokens,
        )
    )
    if steps:
        rows.append(("model execution (vLLM's execute_* scopes)", sum(s["dur"] for s in steps) / 1000 / tokens))
    top_ops: dict[str, float] = defaultdict(float)
    for op in outer_ops:
        top_ops[op["name"]] += op["dur"]
    for name, micros in sorted(top_ops.items(), key=lambda item: -item[1])[:8]:
        rows.append((f"  operator {name}", micros / 1000 / tokens))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1, choices=range(1, 101), metavar="1-100")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--compiled", action="store_true", help="torch.compile instead of eager")
    args = parser.parse_args()
    os.environ.setdefault("LAB_DATA_DIR", tempfile.mkdtemp(prefix="bench-vllm-profile-"))
    from db.engine import get_engine
    from lab.backends import get_backend
    from lab.settings import get_settings
    from lab.specs.schema import RunSpec
    from lab.workloads.number_story import NUMBER_STORY_PROMPT
    from services.manager import ServiceManager

    settings = get_settings()
    engine = get_engine(settings.resolved_database_url)
    trace_dir = Path(tempfile.mkdtemp(prefix="vllm-trace-"))
    spec = RunSpec.model_validate({"backend": "vllm", "vllm": {"enforce_eager": not args.compiled}})
    backend = get_backend("vllm")
    config = backend.service_config(model=spec.model, options=spec.backend_options(), settings=settings)
    # No stacks, no gzip and no summary table: 3 requests already write a 440 MB trace, and the
    # table took the worker minutes after /stop_profile.
    profiler = {
        "profiler": "torch",
        "torch_profiler_dir": str(trace_dir),
        "torch_profiler_with_stack": False,
        "torch_profiler_use_gzip": False,
        "torch_profiler_dump_cuda_time_total": False,
        "ignore_frontend": True,
    }
    config.params["argv"] = [*config.params["argv"], "--profiler-config", json.dumps(profiler)]
    config.params["env"] = {**config.params["env"], "VLLM_CUSTOM_SCOPES_FOR_PROFILING": "1"}
    manager = ServiceManager(engine=engine, logs_dir=settings.logs_dir)
    print(
        f"{datetime.now().astimezone():%Y-%m-%d %H:%M %Z}, load average {os.getloadavg()[0]:.1f}, "
        f"{'compiled' if args.compiled else 'eager'}",
        flush=True,
    )
    try:
        url = manager.ensure("vllm", config)

        def story(n: int) -> list[dict[str, str]]:
            return [{"role": "user", "content": NUMBER_STORY_PROMPT.format(n=n)}]

        body = {
            "model": spec.model,
            "messages": story(0),
            "max_tokens": args.max_tokens,
            "temperature": 0,
            "ignore_eos": True,
        }
        with httpx.Client(base_url=url, timeout=1200) as client:
            client.post("/v1/chat/completions", json=body).raise_for_status()  # warm-up
            client.post("/start_profile").raise_for_status()
            tokens, began = 0, time.monotonic()
            for index in range(args.requests):
                answer = client.post("/v1/chat/completions", json={**body, "messages": story(index + 1)})
                tokens += answer.raise_for_status().json()["usage"]["completion_tokens"]
            wall_s = time.monotonic() - began
            client.post("/stop_profile").raise_for_status()
        # The trace is written after /stop_profile returns: wait until its size stops changing.
        deadline = time.monotonic() + 180
        traces: list[Path] = []
        sizes: dict[Path, int] = {}
        while time.monotonic() < deadline:
            time.sleep(3)
            current = {p: p.stat().st_size for p in trace_dir.rglob("*.json*")}
            if current and current == sizes and all(current.values()):
                traces = sorted(current)
                break
            sizes = current
    finally:
        manager.stop_all()
    if not traces:
        raise SystemExit(f"no trace was written under {trace_dir.name}")
    events = [e for path in traces for e in load_trace(path)]
    bound_ms = WEIGHT_BYTES_PER_TOKEN / COPY_BANDWIDTH_BYTES_PER_S * 1000
    print(
        f"{tokens} tokens in {wall_s:.1f} s under the profiler ({tokens / wall_s:.1f} tok/s, "
        f"{wall_s / tokens * 1000:.1f} ms a token); the bandwidth bound is {bound_ms:.1f} ms a token"
    )
    print("\n| where | ms per token | share of a token |\n|---|---|---|")
    per_token_ms = wall_s / tokens * 1000
    for what, ms in breakdown(events, tokens):
        print(f"| {what} | {ms:.2f} | {ms / per_token_ms:.0%} |")


if __name__ == "__main__":
    main()
