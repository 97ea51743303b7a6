"""The shared queue alone: queue-to-start latency (p50, p99) and claims per second, three workers
on a private PostgreSQL cluster.

Three worker processes (the lab's ``Worker``, each with its own data folder, as ``lab worker``
runs it) serve one fresh database on a private cluster made from Debian's binaries, the way the
integration tests make theirs (tests/support/integration_postgres.py). Each run is executed by a
stub that ends it ``done`` at once, so what is measured is the queue: the claim, the dispatch and
the worker's own steps between runs, never a load.

- **Latency**: ``--single-runs`` single runs are queued one at a time, a random 0 to 0.5 s apart
  (``--rng-seed``), on idle workers; each run's latency is its ``started_at`` minus its
  ``created_at`` (one machine, one clock). Half require the label ``gpu`` that one worker lacks.
- **Claims per second**: ``--burst-runs`` runs are queued in one commit; the rate is their number
  over the time from that commit to the last one's start.

    .venv/bin/python -m benchmarks.queue_latency --json docs/benchmarks/queue_latency.json

Takes about a minute on 2 cores. ``--poll-s`` is the workers' ``LAB_WORKER_POLL_INTERVAL_S``
(the lab's default, 1 s, unless given).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

WORKERS = (("bench-1", "cpu"), ("bench-2", "cpu,gpu"), ("bench-3", "cpu,gpu"))
SERVE_FLAG = "--serve-worker"


class InstantExecutor:
    """Stands in for ``lab.run.runner.RunExecutor``: ends the claimed run ``done`` at once."""

    def __init__(self, *, engine: Any, run_id: int, **_: Any) -> None:
        self.engine, self.run_id = engine, run_id
        self.fencing_token = _.get("fencing_token")

    def execute(self) -> str:
        from db import store
        from db.models import RunStatus

        extra = {"fencing_token": self.fencing_token} if self.fencing_token is not None else {}
        store.set_run_status(engine=self.engine, run_id=self.run_id, status=RunStatus.DONE, **extra)
        return RunStatus.DONE


def serve_worker(name: str, labels: str) -> None:
    """The body of one worker process: the lab's worker with the instant executor, until SIGTERM."""
    import lab.queue.worker as worker_module
    from lab.context import LabContext
    from lab.settings import Settings

    worker_module.RunExecutor = InstantExecutor  # type: ignore[misc,assignment]  # the queue alone is measured
    worker = worker_module.Worker(context=LabContext(settings=Settings()), name=name, labels=labels.split(","))
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    worker.run_forever()


def stub_spec(*, requires: list[str], repeats: int) -> Any:
    from lab.specs.schema import ExperimentSpec, RunSpec

    base = RunSpec.model_validate(
        {
            "backend": "external",
            "target_url": "http://127.0.0.1:9/v1",
            "model": "stub",
            "max_tokens": 8,
            "warmup_requests": 0,
            "workload": {"prompts": 1000},
            "load": {"vus": 1, "duration_s": 1, "graceful_stop_s": 1},
            "requires": requires,
        }
    )
    return ExperimentSpec(name="queue-latency", base=base, repeats=repeats)


def enqueue(engine: Any, *, requires: list[str], repeats: int = 1) -> list[int]:
    from sqlalchemy.orm import Session

    from lab.queue import experiments

    with Session(engine) as session:
        experiment = experiments.enqueue_experiment(session=session, spec=stub_spec(requires=requires, repeats=repeats))
        return [run.id for run in experiment.runs]


def times(engine: Any, run_ids: list[int]) -> list[tuple[str, datetime, datetime | None]]:
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from db.models import Run

    with Session(engine) as session:
        return [
            (row.status, row.created_at, row.started_at)
            for row in session.execute(
                select(Run.status, Run.created_at, Run.started_at).where(Run.id.in_(run_ids))
            ).all()
        ]


def wait_done(engine: Any, run_ids: list[int], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(status == "done" for status, _, _ in times(engine, run_ids)):
            return
        time.sleep(0.1)
    raise SystemExit(f"timed out: {sum(s != 'done' for s, _, _ in times(engine, run_ids))} runs not done")


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile (``share`` in 0..1) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered) + 0.5) - 1))]


def seconds(later: datetime, earlier: datetime) -> float:
    if later.tzinfo is None:
        later = later.replace(tzinfo=UTC)
    if earlier.tzinfo is None:
        earlier = earlier.replace(tzinfo=UTC)
    return (later - earlier).total_seconds()


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from db.engine import make_engine
    from db.migrations import upgrade
    from lab.measurement.environment import provenance
    from tests.support.integration_postgres import PostgresCluster

    cluster = PostgresCluster()
    work_dir = Path(tempfile.mkdtemp(prefix="queue-latency-"))
    url = cluster.url
    engine = make_engine(url)
    processes: list[subprocess.Popen[bytes]] = []
    try:
        upgrade(engine)
        for name, labels in WORKERS:
            env = {
                **os.environ,
                "LAB_DATABASE_URL": url,
                "LAB_DATA_DIR": str(work_dir / name),
                "LAB_WORKER_POLL_INTERVAL_S": str(args.poll_s),
                "LAB_BACKEND_IDLE_STOP_S": "0",
            }
            log = open(work_dir / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
            processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "benchmarks.queue_latency", SERVE_FLAG, name, labels],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        # Warm: one run each label set, so every worker has started and claimed once.
        wait_done(engine, enqueue(engine, requires=[], repeats=3) + enqueue(engine, requires=["gpu"]), 120)

        rng = random.Random(args.rng_seed)
        single = []
        for index in range(args.single_runs):
            single += enqueue(engine, requires=["gpu"] if index % 2 else [])
            time.sleep(rng.uniform(0, 0.5))
        wait_done(engine, single, 120)
        latencies = [seconds(started, created) for _, created, started in times(engine, single) if started]

        queued_at = datetime.now(UTC)
        burst = enqueue(engine, requires=[], repeats=args.burst_runs)
        wait_done(engine, burst, 300)
        last_start = max(started for _, _, started in times(engine, burst) if started)
        code = provenance()
        return {
            "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "commit": code.label,
            "machine": f"{os.cpu_count()} cores",
            # The machine is shared: its load says how much the figures may be disturbed.
            "load_average_1m": round(os.getloadavg()[0], 2),
            "workers": len(WORKERS),
            "poll_interval_s": args.poll_s,
            "single_runs": len(latencies),
            "queue_to_start_p50_s": round(percentile(latencies, 0.50), 3),
            "queue_to_start_p99_s": round(percentile(latencies, 0.99), 3),
            "queue_to_start_max_s": round(max(latencies), 3),
            "burst_runs": len(burst),
            "claims_per_s": round(len(burst) / seconds(last_start, queued_at), 1),
        }
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        engine.dispose()
        cluster.remove()


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == SERVE_FLAG:
        serve_worker(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--single-runs", type=int, default=60, help="runs queued one at a time (latency)")
    parser.add_argument("--burst-runs", type=int, default=100, help="runs queued in one commit (claims per second)")
    parser.add_argument("--poll-s", type=float, default=1.0, help="the workers' poll interval when idle")
    parser.add_argument("--rng-seed", type=int, default=7, help="seed of the gaps between single runs")
    parser.add_argument("--label", default="", help="a name kept with the result (e.g. before, after)")
    parser.add_argument("--json", type=Path, help="add the result to this data file (its measurements and medians)")
    args = parser.parse_args()
    result = {"label": args.label, **measure(args)}
    print(json.dumps(result, indent=2))
    if args.json:
        from benchmarks import data_files

        existing = json.loads(args.json.read_text()) if args.json.exists() else {}
        measurements = [*existing.get("measurements", []), result]
        data_files.write(args.json, {**existing, **summarised(measurements)})


SUMMARISED_FIGURES = ("queue_to_start_p50_s", "queue_to_start_p99_s", "claims_per_s")


def summarised(measurements: list[dict[str, Any]]) -> dict[str, Any]:
    """The data file: every measurement, and each label's median of each figure (interleaved
    before/after runs on a shared machine vary more than any one of them says)."""
    labels = dict.fromkeys(str(item["label"]) for item in measurements)
    summary = {
        label: {
            "measurements": len(rows := [item for item in measurements if item["label"] == label]),
            **{name: round(statistics.median(float(row[name]) for row in rows), 3) for name in SUMMARISED_FIGURES},
        }
        for label in labels
    }
    return {"summary": summary, "measurements": measurements}


if __name__ == "__main__":
    main()
