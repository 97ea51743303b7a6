"""vLLM on CPU: the lab's default flags against the alternatives, measured side by side.

Runs the seed's number-story request at 8 VUs against vLLM started with each
configuration in turn (through the lab's own runner, so exactly what a user gets) and
prints output tok/s, req/s and latency, with the ratio to the lab's default.

    .venv/bin/python -m benchmarks.vllm_cpu_flags [--duration-s 30] [--vus 8]
"""

from __future__ import annotations

import argparse
import os
import tempfile

from sqlalchemy.orm import Session

CONFIGS = {
    "float32, eager": {"vllm.dtype": "float32", "vllm.enforce_eager": True},
    "bfloat16, eager": {"vllm.dtype": "bfloat16", "vllm.enforce_eager": True},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration-s", type=float, default=30)
    parser.add_argument("--vus", type=int, default=8)
    args = parser.parse_args()
    os.environ.setdefault("LAB_DATA_DIR", tempfile.mkdtemp(prefix="bench-vllm-"))
    from db import store
    from db.engine import get_engine
    from lab import experiments
    from lab.runner import Worker
    from lab.settings import get_settings
    from lab.specs import load_preset

    settings = get_settings()
    engine = get_engine(settings.resolved_database_url)
    results = {}
    for label, overrides in CONFIGS.items():
        spec = load_preset("seed-exp1", overrides=[
            ("grid.backend", ["vllm"]), ("grid.load.vus", [args.vus]), ("load.duration_s", args.duration_s),
            *overrides.items(),
        ])
        with Session(engine) as session:
            [run] = experiments.enqueue_experiment(session=session, spec=spec).runs
            run_id = run.id
        worker = Worker(engine=engine, settings=settings)
        worker.run_one()
        worker.services.stop_all()
        with Session(engine) as session:
            run = store.get_run(session=session, run_id=run_id)
            results[label] = run
            print(f"{label}: {run.status} output {run.output_tok_per_s or 0:.1f} tok/s, "
                  f"{run.req_per_s or 0:.3f} req/s, avg {run.latency_avg_s or 0:.2f} s, "
                  f"k6 CPU {run.k6_cpu_percent_avg or 0:.0f}%", flush=True)
    from lab.backends.vllm import best_vllm_dtype

    default_label = f"{best_vllm_dtype()}, eager"
    default = results[default_label]
    print(f"\nThe lab's default here (dtype 'best'): {default_label}")
    print("| configuration | output tok/s | req/s | avg latency s | p95 latency s | vs lab default |")
    print("|---|---|---|---|---|---|")
    for label, run in results.items():
        ratio = (run.output_tok_per_s or 0) / (default.output_tok_per_s or 1)
        marker = " (lab default)" if label == default_label else ""
        print(f"| {label}{marker} | {run.output_tok_per_s or 0:.1f} | {run.req_per_s or 0:.3f} | "
              f"{run.latency_avg_s or 0:.2f} | {run.latency_p95_s or 0:.2f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
