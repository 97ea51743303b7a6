"""vLLM on CPU: the lab's `best` flags against the alternatives, measured side by side.

Runs the seed's number-story request at 1 VU and 8 VUs against vLLM started with each
configuration in turn (through the lab's own runner, so exactly what a user gets) and prints
output tok/s, server TTFT, the prefix-cache hit rate and the start-up time (claim to the
first k6 request: start, warm-up and cache reset), with the ratio to the first configuration.
Also prints where the time of one decoded token goes: the measured time per output token
beside the memory-bandwidth bound (bytes of weights read per token / copy bandwidth).

    .venv/bin/python -m benchmarks.vllm_cpu_flags [--duration-s 30] [--vus 1 8] [--only LABEL ...]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from datetime import datetime

# Each configuration: spec overrides (the vllm section's options). The first is the baseline.
CONFIGS: dict[str, dict[str, object]] = {
    "before: auto bind, block 128, eager": {"vllm.threads_bind": "auto", "vllm.block_size": 128},
    "bind 0-1, block 128, eager": {"vllm.threads_bind": "0-1", "vllm.block_size": 128},
    "nobind, block 128, eager": {"vllm.threads_bind": "nobind", "vllm.block_size": 128},
    "auto bind, block 32, eager (the lab's best)": {"vllm.threads_bind": "auto", "vllm.block_size": 32},
    "auto bind, block 32, compiled": {"vllm.threads_bind": "auto", "vllm.block_size": 32, "vllm.enforce_eager": False},
    "auto bind, block 32, max-num-seqs 8": {
        "vllm.threads_bind": "auto",
        "vllm.block_size": 32,
        "vllm.extra_args": ["--max-num-seqs", "8"],
    },
}
# SmolLM2-135M: 134.5 M parameters read once per decoded token (bf16: 2 bytes each).
WEIGHT_BYTES_PER_TOKEN = 134.5e6 * 2
# This machine's memory copy bandwidth (measured-facts: 21-24 GB/s): the single-stream ceiling.
COPY_BANDWIDTH_BYTES_PER_S = 22.5e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration-s", type=float, default=30)
    parser.add_argument("--vus", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--only", nargs="+", help="configuration labels to run (default: all)")
    args = parser.parse_args()
    os.environ.setdefault("LAB_DATA_DIR", tempfile.mkdtemp(prefix="bench-vllm-"))
    from benchmarks.lab_runs import run_experiment
    from db.engine import get_engine
    from db.models import Run
    from lab.settings import get_settings
    from lab.specs.schema import load_preset

    settings = get_settings()
    engine = get_engine(settings.resolved_database_url)
    configs = {label: o for label, o in CONFIGS.items() if not args.only or label in args.only}
    print(f"{datetime.now().astimezone():%Y-%m-%d %H:%M %Z}, load average {os.getloadavg()[0]:.1f}", flush=True)
    rows: dict[tuple[str, int], Run] = {}
    start_up_s: dict[str, float | None] = {}
    for label, overrides in configs.items():
        spec = load_preset(
            "seed-exp1",
            overrides=[
                ("grid.backend", ["vllm"]),
                ("grid.load.vus", args.vus),
                ("load.duration_s", args.duration_s),
                *overrides.items(),
            ],
        )
        for index, run in enumerate(run_experiment(engine=engine, settings=settings, spec=spec)):
            rows[(label, run.vus)] = run
            if index == 0:  # the first run paid the start (eager or compiled)
                start_up_s[label] = (
                    (run.load_started_at - run.started_at).total_seconds()
                    if run.load_started_at and run.started_at
                    else None
                )
            print(
                f"{label} @ {run.vus} VUs: {run.status} {run.status_reason or ''} output "
                f"{run.output_tok_per_s or 0:.1f} tok/s, TTFT {run.server_ttft_avg_s or 0:.3f} s, "
                f"TPOT {run.server_time_per_output_token_avg_s or 0:.4f} s, prefix hits "
                f"{run.prefix_cache_hit_rate or 0:.0%}, load avg {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    baseline = next(iter(configs))
    print(
        "\n| configuration | start-up s | "
        + " | ".join(f"{v} VU tok/s | {v} VU TTFT s | {v} VU prefix hits" for v in args.vus)
        + " | vs first |"
    )
    print("|---|---|" + "---|---|---|" * len(args.vus) + "---|")
    for label in configs:
        cells = []
        for vus in args.vus:
            run = rows.get((label, vus))
            cells.append(
                f"{run.output_tok_per_s or 0:.1f} | {run.server_ttft_avg_s or 0:.3f} | "
                f"{run.prefix_cache_hit_rate or 0:.0%}"
                if run
                else "- | - | -"
            )
        ratios = []
        for vus in args.vus:
            run, base = rows.get((label, vus)), rows.get((baseline, vus))
            if run and base and base.output_tok_per_s:
                ratios.append(f"{(run.output_tok_per_s or 0) / base.output_tok_per_s:.2f}x")
        up = start_up_s.get(label)
        print(f"| {label} | {up:.0f} | " if up else f"| {label} | - | ", end="")
        print(" | ".join(cells) + f" | {' / '.join(ratios)} |")
    ceiling = COPY_BANDWIDTH_BYTES_PER_S / WEIGHT_BYTES_PER_TOKEN
    print(
        f"\nWhere one token's time goes at 1 VU: the weights alone bound one stream at {ceiling:.0f} tok/s "
        f"({1 / ceiling * 1000:.1f} ms a token)."
    )
    for label in configs:
        if (run := rows.get((label, 1))) and run.server_time_per_output_token_avg_s:
            tpot_s = run.server_time_per_output_token_avg_s
            print(
                f"- {label}: {tpot_s * 1000:.1f} ms a token ({1 / tpot_s:.0f} tok/s in decode), "
                f"{tpot_s * ceiling:.1f}x the bandwidth bound"
            )


if __name__ == "__main__":
    main()
