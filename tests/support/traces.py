"""Mooncake traces made up for tests and benchmarks: requests at a steady rate, some sharing
leading blocks (a family's prefix), some repeating a whole earlier request."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any


def mooncake_lines(
    requests: int,
    rate_per_s: float,
    *,
    block_tokens: int = 32,
    families: int = 4,
    prefix_blocks: int = 2,
    own_blocks: int = 1,
    repeat_share: float = 0.2,
    output_length: int = 8,
    seed: int = 0,
) -> list[str]:
    """``requests`` JSON lines ``1 / rate_per_s`` apart. Each request starts with the
    ``prefix_blocks`` ids of one of ``families`` (ids ``family * 1000 + block``) and ends with
    ``own_blocks`` ids of its own; ``repeat_share`` of them repeat an earlier request whole."""
    rng = random.Random(seed)
    lines: list[dict[str, object]] = []
    next_id = 1_000_000
    for index in range(requests):
        timestamp = round(index * 1000 / rate_per_s, 3)
        if lines and rng.random() < repeat_share:
            earlier = dict(rng.choice(lines))
            lines.append({**earlier, "timestamp": timestamp})
            continue
        family = rng.randrange(families)
        own = list(range(next_id, next_id + own_blocks))
        next_id += own_blocks
        hash_ids = [family * 1000 + block for block in range(prefix_blocks)] + own
        lines.append(
            {
                "timestamp": timestamp,
                "input_length": len(hash_ids) * block_tokens,
                "output_length": output_length,
                "hash_ids": hash_ids,
                "session_id": f"s{family}",
            }
        )
    return [json.dumps(line) for line in lines]


def write_trace(path: Path, lines: list[str]) -> Path:
    """The lines as a trace file at ``path``."""
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def trace_replay_k6(spec: Any, run_dir: Path, target_url: str, backend: Any) -> Any:
    """The real k6 replaying ``spec``'s trace against ``target_url`` (a ``K6Process``, not yet
    started), its request file, summary, NDJSON and log in ``run_dir``."""
    from lab.run.k6_driver import K6Process, k6_environment, script_path
    from lab.workloads import get_workload

    requests_file = get_workload("trace").prepare(spec, run_dir, backend)
    return K6Process(
        script=script_path("trace"),
        env=k6_environment(spec, target_url=target_url, requests_file=requests_file),
        summary_path=run_dir / "summary.json",
        ndjson_path=run_dir / "k6.ndjson",
        log_path=run_dir / "k6.log",
    )
