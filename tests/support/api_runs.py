"""Runs of an external target as ``lab.api`` reads them: figures, per-request samples, a series."""

from __future__ import annotations

from array import array

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from db import store
from db.models import RunStatus
from lab.measurement.k6_ndjson import RequestSamples
from lab.measurement.request_figures import encode
from lab.measurement.results import RESULT_FIELDS
from lab.queue import experiments
from lab.specs.schema import ExperimentSpec

NUMERIC_FIGURES = [
    name for name in RESULT_FIELDS if name not in ("slo_evaluated", "steady_source", "measurement_warnings")
]


def seed(engine: Engine) -> list[int]:
    """Three done runs of an external target with figures, per-request samples and a series."""
    spec = ExperimentSpec.model_validate(
        {
            "name": "api test",
            "repeats": 3,
            "base": {
                "backend": "external",
                "target_url": "http://127.0.0.1:9",
                "model": "stub",
                "load": {"vus": 2, "duration_s": 3},
            },
        }
    )
    with Session(engine, expire_on_commit=False) as session:
        run_ids = [run.id for run in experiments.enqueue_experiment(session=session, spec=spec, tags="nb").runs]
    for index, run_id in enumerate(run_ids):
        latencies = array("f", [0.1 * (index + 1), 0.2, 0.35, 1 / 3])
        samples = RequestSamples(latency_s=latencies, ok=bytearray([1, 1, 1, 0]), ttft_s=array("f"), tpot_s=array("f"))
        store.save_run_requests(engine=engine, run_id=run_id, **encode(samples))
        store.save_run_series(
            engine=engine,
            run_id=run_id,
            series={
                "time_s": [0, 1, 2],
                "requests_ok": [1, 1, 1],
                "vus": [2, 2, 2],
                "start_epoch_s": 1.8e9,
                "bucket_s": 1,
                "resources": {"t": [1.8e9, 1.8e9 + 1], "k6_cpu_percent": [3.0, 4.0]},
            },
        )
        store.set_run_status(
            engine=engine,
            run_id=run_id,
            status=RunStatus.DONE,
            requests_ok=3,
            requests_failed=1,
            output_tok_per_s=100 / 3 + index,
            latency_p95_s=0.35 + index / 7,
            req_per_s=1.1,
        )
    return run_ids
