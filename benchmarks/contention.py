"""Host contention is seen and stored: a vLLM run at 8 VUs with and without two busy loops.

Runs the seed's number-story request against vLLM at 8 VUs for 30 s through the lab's own
runner, twice: once as is, once with two busy-loop processes of this script's own started
10 s into the load. Prints each stored run's ``other_cpu_percent_avg`` and its measurement
warnings: the second carries the contention warning, with other processes above 50% of a core.

    .venv/bin/python -m benchmarks.contention [--duration-s 30] [--vus 8] [--busy-after-s 10]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time

from sqlalchemy.orm import Session

BUSY_LOOP = "while True:\n    pass\n"


def start_busy_loops_when_loaded(
    engine,
    run_id: int,
    *,
    after_s: float,
    count: int,
    started: list[subprocess.Popen],
    started_at: list[float],
    stop: threading.Event,
) -> None:
    """Once the run is loading, wait ``after_s`` then start ``count`` busy loops."""
    from db import store
    from db.models import RunStatus

    while not stop.is_set():
        with Session(engine) as session:
            run = store.get_run(session=session, run_id=run_id)
            status = run.status if run else None
        if status == RunStatus.RUNNING:
            break
        if status in RunStatus.FINAL:
            return
        time.sleep(0.2)
    if stop.wait(after_s):
        return
    # Each in its own session, like other people's jobs: with the kernel's autogroup
    # scheduling, loops sharing this script's session would share one group's CPU share.
    started.extend(subprocess.Popen([sys.executable, "-c", BUSY_LOOP], start_new_session=True) for _ in range(count))
    started_at.append(time.time())


def other_cpu_before_after(series: dict, at_epoch_s: float | None) -> tuple[float | None, float | None]:
    """Mean other-process CPU (% of a core) of the stored per-second series before and after ``at_epoch_s``."""
    resources = series.get("resources") or {}
    pairs = [(t, v) for t, v in zip(resources.get("t") or [], resources.get("other_cpu_percent") or [], strict=False)][
        1:
    ]
    if at_epoch_s is None:
        at_epoch_s = float("inf")
    before = [v for t, v in pairs if v is not None and t < at_epoch_s]
    after = [v for t, v in pairs if v is not None and t >= at_epoch_s]
    return (sum(before) / len(before) if before else None, sum(after) / len(after) if after else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration-s", type=float, default=30)
    parser.add_argument("--vus", type=int, default=8)
    parser.add_argument("--busy-after-s", type=float, default=10)
    parser.add_argument("--busy-loops", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("LAB_DATA_DIR", tempfile.mkdtemp(prefix="bench-contention-"))
    from db import store
    from db.engine import get_engine
    from lab.context import LabContext
    from lab.queue import experiments
    from lab.queue.worker import Worker
    from lab.settings import get_settings
    from lab.specs.schema import load_preset

    settings = get_settings()
    engine = get_engine(settings.resolved_database_url)
    worker = Worker(context=LabContext(settings=settings))
    rows = []
    try:
        for label, busy_loops in (
            ("as is", 0),
            (f"{args.busy_loops} busy loops from {args.busy_after_s:g} s", args.busy_loops),
        ):
            spec = load_preset(
                "seed-exp1",
                overrides=[
                    ("grid.backend", ["vllm"]),
                    ("grid.load.vus", [args.vus]),
                    ("load.duration_s", args.duration_s),
                ],
            )
            with Session(engine) as session:
                [queued] = experiments.enqueue_experiment(session=session, spec=spec).runs
                run_id = queued.id
            loops: list[subprocess.Popen] = []
            loops_started_at: list[float] = []
            stop = threading.Event()
            starter = threading.Thread(
                target=start_busy_loops_when_loaded,
                args=(engine, run_id),
                kwargs={
                    "after_s": args.busy_after_s,
                    "count": busy_loops,
                    "started": loops,
                    "started_at": loops_started_at,
                    "stop": stop,
                },
                daemon=True,
            )
            if busy_loops:
                starter.start()
            try:
                worker.run_one()
            finally:
                stop.set()
                for loop in loops:
                    loop.kill()
                    loop.wait()
            with Session(engine) as session:
                run = store.get_run(session=session, run_id=run_id)
                if run is None:
                    raise SystemExit(f"run {run_id} is gone from the store")
                series = store.get_run_series(session=session, run_id=run_id)
                if busy_loops:
                    print(
                        f"  {len(loops)} busy loops started "
                        + (
                            f"{loops_started_at[0] - run.load_started_at.timestamp():.1f} s into the load"
                            if run.load_started_at is not None
                            else "(the load's start was not recorded)"
                        )
                        if loops
                        else "  the busy loops never started",
                        flush=True,
                    )
                split_at = (
                    loops_started_at[0]
                    if loops_started_at
                    else (run.load_started_at.timestamp() + args.busy_after_s if run.load_started_at else None)
                )
                before, after = other_cpu_before_after(series.series if series else {}, split_at)
                rows.append(
                    (
                        label,
                        run.status,
                        run.other_cpu_percent_avg,
                        before,
                        after,
                        run.steal_cpu_percent_avg,
                        run.output_tok_per_s,
                        run.steady_output_tok_per_s,
                        run.measurement_warnings,
                    )
                )
                print(
                    f"{label}: run #{run_id} {run.status}, other CPU {run.other_cpu_percent_avg or 0:.0f}% "
                    f"of a core, warnings: {run.measurement_warnings}",
                    flush=True,
                )
    finally:
        worker.services.stop_all()
    print(f"\nthreshold: {settings.contention_warning_cpu_percent:g}% of a core")
    print(
        f"| run | other processes' CPU (% of a core, avg) | before / after {args.busy_after_s:g} s | steal (%) "
        "| output tok/s (k6) | steady output tok/s | contention warning |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, status, other, before, after, steal, tok, steady, warnings in rows:
        warned = "yes" if warnings and "other processes used" in warnings else "no"
        print(
            f"| {label} ({status}) | {other or 0:.0f} | {before or 0:.0f} / {after or 0:.0f} "
            f"| {steal if steal is not None else '–'} | {tok or 0:.1f} | {steady or 0:.1f} | {warned} |"
        )


if __name__ == "__main__":
    main()
