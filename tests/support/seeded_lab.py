"""A temporary lab database seeded with what a finished quick seed-exp1 looks like (naive and
vLLM at 1 and 8 VUs, with figures, per-second series and log tails), plus a failed run, a
queued run and a run whose tag starts with ``=`` (to check CSV neutralisation)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from db import store
from db.models import Run, RunStatus
from lab.queue import experiments
from lab.settings import get_settings
from lab.specs.schema import ExperimentSpec, LoadSpec, RunSpec, load_preset

PROJECT_ROOT = Path(__file__).resolve().parents[2]


# Figures per (backend, VUs) of the seeded quick seed-exp1 runs.
SEEDED_FIGURES: dict[tuple[str, int], dict[str, Any]] = {
    ("naive", 1): {"output_tok_per_s": 22.7, "req_per_s": 0.18, "latency_avg_s": 5.6, "latency_p95_s": 6.1},
    ("naive", 8): {"output_tok_per_s": 20.1, "req_per_s": 0.16, "latency_avg_s": 30.0, "latency_p95_s": 41.0},
    ("vllm", 1): {"output_tok_per_s": 17.0, "req_per_s": 0.13, "latency_avg_s": 7.4, "latency_p95_s": 7.9},
    ("vllm", 8): {"output_tok_per_s": 62.0, "req_per_s": 0.48, "latency_avg_s": 16.6, "latency_p95_s": 18.0},
}


FORMULA_TAG = "=HYPERLINK(evil)"


@dataclass
class SeededLab:
    """What ``seed_lab`` created."""

    data_dir: Path
    engine: Engine
    experiment_id: int
    done_run_ids: list[int]
    failed_run_id: int
    queued_run_id: int


def fake_series(seconds: int, output_tok_per_s: float, vus: int) -> dict[str, Any]:
    """A per-second series shaped like the runner's (k6 lists plus resource samples)."""
    start = 1_800_000_000.0
    return {
        "time_s": list(range(seconds)),
        "requests_ok": [1] * seconds,
        "requests_failed": [0] * seconds,
        "output_tokens": [int(output_tok_per_s)] * seconds,
        "latency_avg_s": [1.0 + 0.01 * i for i in range(seconds)],
        "latency_p50_s": [1.0] * seconds,
        "latency_p95_s": [1.5] * seconds,
        "vus": [vus] * seconds,
        "start_epoch_s": start,
        "resources": {
            "t": [start + i for i in range(seconds)],
            "naive_cpu_percent": [95.0] * seconds,
            "naive_rss_mb": [600.0] * seconds,
            "k6_cpu_percent": [3.0] * seconds,
            "k6_rss_mb": [80.0] * seconds,
        },
    }


def seed_database(engine: Engine) -> SeededLab:
    """Fill ``engine``'s database through db.store, then set figures with the ORM."""
    spec = load_preset("seed-exp1", quick=True, overrides=[("grid.load.vus", [1, 8])])
    with Session(engine, expire_on_commit=False) as session:
        experiment = experiments.enqueue_experiment(session=session, spec=spec, tags="ui-test")
        experiment_id = experiment.id
        run_ids = [run.id for run in experiment.runs]
    done_ids: list[int] = []
    with Session(engine) as session:
        for run_id in run_ids:
            run = session.get_one(Run, run_id)
            assert run.vus is not None  # a constant-VUs preset
            figures = SEEDED_FIGURES[(run.backend, run.vus)]
            for name, value in figures.items():
                setattr(run, name, value)
            run.status = RunStatus.DONE
            run.requests_ok, run.requests_failed = 20, 0
            run.latency_p50_s, run.latency_p99_s, run.latency_max_s = 1.0, 2.0, 2.5
            run.backend_cpu_percent_avg, run.backend_rss_max_mb, run.k6_cpu_percent_avg = 95.0, 600.0, 3.0
            run.prefix_cache_hit_rate = 0.5 if run.backend == "vllm" else None
            run.environment = {"cpu": "test CPU", "python": "3.11"}
            run.server_metrics = {
                "before": {"backend": {"vllm:request_success_total": 10.0}},
                "after": {"backend": {"vllm:request_success_total": 30.0}},
            }
            run.count_check = {"requests": {"client": 20, "server": 20, "difference": 0, "difference_ratio": 0.0}}
            done_ids.append(run_id)
        session.commit()
    for run_id in done_ids:
        with Session(engine) as session:
            run = session.get_one(Run, run_id)
            backend, vus, tok = run.backend, run.vus, run.output_tok_per_s
            assert vus is not None and tok is not None  # set just above
        store.save_run_series(
            engine=engine,
            run_id=run_id,
            series=fake_series(20, tok, vus),
            service_log_tails={backend: f"{backend} log line 1\n{backend} log line 2"},
        )
    # A failed run, a queued run and one whose tag is formula-like.
    with Session(engine, expire_on_commit=False) as session:
        other = experiments.enqueue_experiment(
            session=session,
            spec=load_preset("seed-exp1", quick=True, overrides=[("grid.load.vus", [1]), ("grid.backend", ["naive"])]),
        )
        failed_id = other.runs[0].id
        queued = experiments.enqueue_experiment(
            session=session,
            spec=load_preset(
                "seed-exp2", quick=True, overrides=[("grid.backend", ["vllm"]), ("grid.workload.prompts", [50])]
            ),
        )
        queued_id = queued.runs[0].id
    store.set_run_status(
        engine=engine, run_id=failed_id, status=RunStatus.FAILED, reason="the naive service did not start: port in use"
    )
    with Session(engine) as session:
        store.set_run_notes(session=session, run_id=done_ids[0], tags=FORMULA_TAG, notes="first run")
    return SeededLab(
        data_dir=Path(),
        engine=engine,
        experiment_id=experiment_id,
        done_run_ids=done_ids,
        failed_run_id=failed_id,
        queued_run_id=queued_id,
    )


def add_done_run(
    engine: Engine, *, vus: int, max_tokens: int, tok: float, p95: float, requires: tuple[str, ...] = ()
) -> int:
    """A one-run experiment of the naive server with these settings, done, with figures.
    ``requires``: worker labels it asks for; in a lab whose worker is running, a label no worker
    has keeps the worker from claiming the run in the moment it is queued, before it is done."""
    spec = ExperimentSpec(
        name=f"vus {vus} max {max_tokens}",
        base=RunSpec(
            backend="naive",
            model=get_settings().default_model,
            max_tokens=max_tokens,
            load=LoadSpec(vus=vus, duration_s=5),
            requires=list(requires),
        ),
    )
    with Session(engine, expire_on_commit=False) as session:
        run_id = experiments.enqueue_experiment(session=session, spec=spec).runs[0].id
    store.set_run_status(
        engine=engine,
        run_id=run_id,
        status=RunStatus.DONE,
        output_tok_per_s=tok,
        req_per_s=tok / 16,
        latency_p95_s=p95,
        latency_avg_s=p95 / 2,
        requests_ok=10,
        requests_failed=0,
    )
    return run_id
