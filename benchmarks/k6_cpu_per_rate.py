"""k6's own CPU cost per 1,000 requests/s: when does one k6 process stop being enough?

Runs the lab's number-story k6 script at constant arrival rates against the OpenAI stub
(tests/stub_openai.py, a cheap server on loopback, in its own process), through the lab's
own runner (external backend), and prints k6's average CPU (percent of one core, sampled
by the runner) per 1,000 requests/s achieved.

    .venv/bin/python -m benchmarks.k6_cpu_per_rate [--rates 200,500,1000] [--duration-s 20]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="200,500,1000", help="arrival rates to try, requests/s")
    parser.add_argument("--duration-s", type=float, default=20)
    args = parser.parse_args()
    os.environ.setdefault("LAB_DATA_DIR", tempfile.mkdtemp(prefix="bench-k6-cpu-"))
    from sqlalchemy.orm import Session

    from db import store
    from db.engine import get_engine
    from lab.context import LabContext
    from lab.queue import experiments
    from lab.queue.worker import Worker
    from lab.settings import get_settings
    from lab.specs.schema import ExperimentSpec, RunSpec
    from services.processes import PROJECT_ROOT
    from services.supervisor import ManagedService

    settings = get_settings()
    engine = get_engine(settings.resolved_database_url)
    stub = ManagedService(
        name="stub",
        argv=[sys.executable, "-m", "tests.stub_openai", "--host", "{host}", "--port", "{port}"],
        log_path=Path(settings.logs_dir) / "stub.log",
        cwd=PROJECT_ROOT,
        readiness_timeout_s=30,
    )
    print(f"{'target req/s':>12} {'achieved req/s':>14} {'k6 CPU %':>9} {'k6 CPU % per 1,000 req/s':>25} dropped")
    with stub:
        worker = Worker(context=LabContext(settings=settings))
        for rate in (float(value) for value in args.rates.split(",")):
            spec = RunSpec.model_validate(
                {
                    "backend": "external",
                    "target_url": stub.url,
                    "model": "stub",
                    "max_tokens": 8,
                    "warmup_requests": 0,
                    "workload": {"prompts": 1000},
                    "load": {
                        "kind": "constant-arrival-rate",
                        "rate_per_s": rate,
                        "duration_s": args.duration_s,
                        "max_vus": 200,
                        "graceful_stop_s": 2,
                    },
                }
            )
            with Session(engine) as session:
                [queued] = experiments.enqueue_experiment(
                    session=session, spec=ExperimentSpec(name="k6 cpu", base=spec)
                ).runs
                run_id = queued.id
            worker.run_one()
            with Session(engine) as session:
                run = store.get_run(session=session, run_id=run_id)
                if run is None:
                    raise SystemExit(f"run {run_id} is gone from the store")
                per_1000 = (run.k6_cpu_percent_avg or 0) / run.req_per_s * 1000 if run.req_per_s else None
                print(
                    f"{rate:>12.0f} {run.req_per_s or 0:>14.1f} {run.k6_cpu_percent_avg or 0:>9.1f} "
                    f"{per_1000 or 0:>25.1f} {run.iterations_dropped or 0}"
                    + (f"  ({run.status}: {run.status_reason})" if run.status != "done" else "")
                )


if __name__ == "__main__":
    main()
