"""Soak: one long cached run at full rate through the lab, and what it costs the lab per request.

One run of ``external+cache`` (the cache proxy and Redis in front of the OpenAI stub,
``tests/stub_openai.py``, its own process), the number-story workload with 50 prompts,
32 constant VUs, the cache filled first so every measured request is a hit: the hit path
at its full rate. A real ``python -m lab worker`` (own process, own data folder, SQLite)
executes it while this script samples, every ``--sample-s``:

- the run folder's size on disk (peak, and what is left once the figures are stored);
- the worker's and k6's resident memory (RSS over time: first, last, peak);
- when k6 exits (the load and its drain are over) and when the run's final state is stored.

From the stored run: requests, req/s and k6's CPU per 1,000 req/s (the runner's own
sampling); req/s in the first and last fifth of the load (from the per-second series) and
p99 latency of the first and last fifth of the requests (from the per-request figures):
whether the cache or the proxy degraded over the run.

    .venv/bin/python -m benchmarks.soak                 # 2 minutes (default)
    .venv/bin/python -m benchmarks.soak --minutes 30    # the real soak
    .venv/bin/python -m benchmarks.soak --keep-raw all  # the cost of keeping k6's raw NDJSON

Targets (issue 26): retained disk <= 100 B/request; peak disk <= 1 KB/request or a fixed
bound; figures stored <= 10 s after the load ends; worker RSS flat (within 100 MB).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Observed:
    """What the sampling loop saw, on this script's clock (monotonic seconds)."""

    worker_rss_mb: list[tuple[float, float]] = field(default_factory=list)
    k6_rss_mb: list[tuple[float, float]] = field(default_factory=list)
    run_dir_bytes_peak: int = 0
    k6_seen_at_s: float | None = None
    k6_exited_at_s: float | None = None
    final_at_s: float | None = None


def folder_bytes(folder: Path) -> int:
    """Bytes the files under ``folder`` take on disk (allocated blocks, as ``du``)."""
    total = 0
    for path in folder.rglob("*"):
        try:
            if path.is_file():
                total += path.stat().st_blocks * 512
        except OSError:
            continue  # removed while walking
    return total


def database_bytes(database: Path) -> int:
    """The SQLite file and its write-ahead log."""
    return sum(path.stat().st_size for path in (database, database.with_name(database.name + "-wal")) if path.exists())


def soak_spec(*, stub_url: str, minutes: float, vus: int, prompts: int) -> Any:
    from lab.specs.schema import ExperimentSpec, RunSpec

    base = RunSpec.model_validate(
        {
            "backend": "external+cache",
            "target_url": stub_url,
            "model": "stub",
            "max_tokens": 32,
            "warmup_requests": 0,
            "workload": {"kind": "number-story", "prompts": prompts},
            "load": {"kind": "constant-vus", "vus": vus, "duration_s": minutes * 60, "graceful_stop_s": 5},
            "cache": {"fill_first_up_to": prompts},
        }
    )
    return ExperimentSpec(name=f"soak {minutes:g} min", base=base)


def _k6_child(worker: psutil.Process, run_dir: Path) -> psutil.Process | None:
    """The measured load's k6: the one whose summary goes to the run folder itself (the
    unmeasured cache fill's goes elsewhere)."""
    summary_setting = f"SUMMARY_PATH={run_dir / 'summary.json'}"
    try:
        return next(
            (
                child
                for child in worker.children(recursive=True)
                if child.name() == "k6" and summary_setting in child.cmdline()
            ),
            None,
        )
    except psutil.Error:
        return None


def _rss_mb(process: psutil.Process | None) -> float | None:
    try:
        return process.memory_info().rss / 2**20 if process is not None else None
    except psutil.Error:
        return None


def watch(
    *, engine: Any, run_id: int, worker: psutil.Process, run_dir: Path, sample_s: float, timeout_s: float
) -> Observed:
    """Sample until the run is final (or ``timeout_s``): RSS, the run folder, k6's lifetime."""
    from sqlalchemy.orm import Session

    from db import store
    from db.models import RunStatus

    seen = Observed()
    began = time.monotonic()
    next_sample = began
    while time.monotonic() - began < timeout_s:
        now = time.monotonic()
        k6 = _k6_child(worker, run_dir)
        if k6 is not None and seen.k6_seen_at_s is None:
            seen.k6_seen_at_s = now
        if k6 is None and seen.k6_seen_at_s is not None and seen.k6_exited_at_s is None:
            seen.k6_exited_at_s = now
        if now >= next_sample:
            next_sample += sample_s
            if (worker_rss := _rss_mb(worker)) is not None:
                seen.worker_rss_mb.append((round(now - began, 1), round(worker_rss, 1)))
            if (k6_rss := _rss_mb(k6)) is not None:
                seen.k6_rss_mb.append((round(now - began, 1), round(k6_rss, 1)))
            seen.run_dir_bytes_peak = max(seen.run_dir_bytes_peak, folder_bytes(run_dir) if run_dir.exists() else 0)
        with Session(engine) as session:
            run = store.get_run(session=session, run_id=run_id)
            if run is not None and run.status in RunStatus.FINAL:
                seen.final_at_s = time.monotonic()
                return seen
        time.sleep(0.2)
    return seen


def fifths(engine: Any, run_id: int) -> dict[str, float | None]:
    """req/s of the first and last fifth of the load's seconds; p99 of the first and last fifth of the requests."""
    from sqlalchemy.orm import Session

    from db import store
    from lab.measurement import request_figures
    from lab.measurement.k6_results import percentile
    from lab.measurement.request_figures import RequestFigures

    with Session(engine) as session:
        stored_series = store.get_run_series(session=session, run_id=run_id)
        series = (stored_series.series if stored_series is not None else None) or {}
        row = store.get_run_requests(session=session, run_id=run_id)
        if row is None:
            raise SystemExit(f"run {run_id} kept no per-request figures")
        figures: RequestFigures = request_figures.decode(
            latency_s=row.latency_s, ok=row.ok, ttft_s=row.ttft_s, tpot_s=row.tpot_s
        )
    per_second = (series.get("requests_ok") or [])[1:-1]  # the first and last seconds are partial
    fifth = max(1, len(per_second) // 5)
    latencies = [latency for latency, ok in zip(figures.latency_s, figures.ok, strict=True) if ok]
    part = max(1, len(latencies) // 5)
    return {
        "req_per_s_first_fifth": sum(per_second[:fifth]) / fifth if per_second else None,
        "req_per_s_last_fifth": sum(per_second[-fifth:]) / fifth if per_second else None,
        "p99_s_first_fifth": percentile(sorted(latencies[:part]), 0.99),
        "p99_s_last_fifth": percentile(sorted(latencies[-part:]), 0.99),
    }


def start_worker(data_dir: Path, keep_raw: str, lab_root: Path) -> subprocess.Popen[bytes]:
    """``python -m lab worker`` from ``lab_root`` (another checkout: the lab before a change)."""
    env = {
        **os.environ,
        "LAB_DATA_DIR": str(data_dir),
        "LAB_KEEP_RAW": keep_raw,
        "LAB_WORKER_POLL_INTERVAL_S": "0.2",
        "LAB_WORKER_NAME": "soak",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    log = open(data_dir / "worker.log", "wb")  # noqa: SIM115 - the worker writes to it until it exits
    return subprocess.Popen(
        [sys.executable, "-m", "lab", "worker"],
        cwd=lab_root,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop_worker(worker: subprocess.Popen[bytes]) -> None:
    """SIGTERM (the worker stops the services it started), then SIGKILL."""
    worker.terminate()
    try:
        worker.wait(timeout=60)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()


def report(
    run: Any, seen: Observed, *, retained_bytes: int, database_bytes: int, degradation: dict[str, Any]
) -> dict[str, Any]:
    """The figures of one soak, per request where the target is per request."""
    requests = (run.requests_ok or 0) + (run.requests_failed or 0)
    load_end_to_stored_s = (
        seen.final_at_s - seen.k6_exited_at_s
        if seen.final_at_s is not None and seen.k6_exited_at_s is not None
        else None
    )
    worker_rss = [rss for _, rss in seen.worker_rss_mb]
    k6_rss = [rss for _, rss in seen.k6_rss_mb]
    return {
        "status": run.status,
        "status_reason": run.status_reason,
        "requests": requests,
        "req_per_s": run.req_per_s,
        "latency_p99_s": run.latency_p99_s,
        "k6_cpu_percent_avg": run.k6_cpu_percent_avg,
        "k6_cpu_percent_per_1000_req_per_s": (
            run.k6_cpu_percent_avg / run.req_per_s * 1000 if run.k6_cpu_percent_avg and run.req_per_s else None
        ),
        "peak_run_dir_bytes": seen.run_dir_bytes_peak,
        "peak_run_dir_bytes_per_request": seen.run_dir_bytes_peak / requests if requests else None,
        "retained_run_dir_bytes": retained_bytes,
        "retained_run_dir_bytes_per_request": retained_bytes / requests if requests else None,
        "database_bytes_per_request": database_bytes / requests if requests else None,
        "load_end_to_stored_s": load_end_to_stored_s,
        "worker_rss_mb_first_last_peak": (worker_rss[0], worker_rss[-1], max(worker_rss)) if worker_rss else None,
        "k6_rss_mb_first_last_peak": (k6_rss[0], k6_rss[-1], max(k6_rss)) if k6_rss else None,
        **degradation,
        "worker_rss_mb_over_time": seen.worker_rss_mb,
        "k6_rss_mb_over_time": seen.k6_rss_mb,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=2.0, help="measured load, minutes (default 2)")
    parser.add_argument("--vus", type=int, default=32)
    parser.add_argument("--prompts", type=int, default=50)
    parser.add_argument("--keep-raw", default="none", choices=("none", "compressed", "all"))
    parser.add_argument("--sample-s", type=float, default=1.0, help="seconds between RSS and disk samples")
    parser.add_argument("--output", type=Path, help="write the figures as JSON here")
    parser.add_argument(
        "--lab-root",
        type=Path,
        default=ROOT,
        help="the checkout whose worker executes the run (default this one; another checkout "
        "measures the lab before a change, e.g. its main branch)",
    )
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="soak-"))
    os.environ["LAB_DATA_DIR"] = str(data_dir)
    from sqlalchemy.orm import Session

    from db import store
    from db.engine import get_engine
    from lab.queue import experiments
    from lab.settings import get_settings
    from services.supervisor import ManagedService

    settings = get_settings()
    engine = get_engine(settings.resolved_database_url)
    stub = ManagedService(
        name="stub",
        argv=[sys.executable, "-m", "tests.stub_openai", "--host", "{host}", "--port", "{port}"],
        log_path=data_dir / "stub.log",
        cwd=ROOT,
        readiness_timeout_s=30,
    )
    with stub:
        with Session(engine) as session:
            spec = soak_spec(stub_url=stub.url, minutes=args.minutes, vus=args.vus, prompts=args.prompts)
            [queued] = experiments.enqueue_experiment(session=session, spec=spec).runs
            run_id = queued.id
        database = Path(settings.resolved_database_url.removeprefix("sqlite:///"))
        database_before = database_bytes(database)
        print(
            f"soak: run #{run_id}, {args.minutes:g} min at {args.vus} VUs through the cache, keep_raw "
            f"{args.keep_raw}, data in {data_dir}; load average {os.getloadavg()[0]:.2f}",
            file=sys.stderr,
        )
        worker = start_worker(data_dir, args.keep_raw, args.lab_root)
        try:
            seen = watch(
                engine=engine,
                run_id=run_id,
                worker=psutil.Process(worker.pid),
                run_dir=settings.runs_dir / str(run_id),
                sample_s=args.sample_s,
                timeout_s=args.minutes * 60 + 900,
            )
        finally:
            stop_worker(worker)
    with Session(engine) as session:
        run = store.get_run(session=session, run_id=run_id)
        if run is None:
            raise SystemExit(f"run {run_id} is gone from the store")
        session.expunge(run)
    figures = report(
        run,
        seen,
        retained_bytes=folder_bytes(settings.runs_dir / str(run_id)),
        database_bytes=database_bytes(database) - database_before,
        degradation=fifths(engine, run_id) if run.requests_ok else {},
    )
    figures.update(
        minutes=args.minutes,
        vus=args.vus,
        keep_raw=args.keep_raw,
        lab_root=str(args.lab_root),
        load_average_after=os.getloadavg()[0],
    )
    if args.output:
        args.output.write_text(json.dumps(figures, indent=1, default=str))
    print(
        json.dumps(
            {key: value for key, value in figures.items() if not key.endswith("_over_time")}, indent=1, default=str
        )
    )


if __name__ == "__main__":
    main()
