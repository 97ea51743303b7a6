"""Queue experiments: a validated :class:`~lab.specs.ExperimentSpec` becomes the plain rows
the store keeps (``db`` knows nothing of specs; this is where specs meet the queue)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from db import store
from db.models import Experiment
from lab.specs import ExperimentSpec, RunSpec


def run_columns(spec: RunSpec) -> dict[str, Any]:
    """The run's spec and the columns taken from it for filtering and comparing without parsing JSON."""
    return {
        "spec": spec.model_dump(mode="json"),
        "backend": spec.backend,
        "model": spec.model,
        "workload": spec.workload.kind,
        "load_kind": spec.load.kind,
        "vus": spec.load.peak_vus if spec.load.kind != "constant-arrival-rate" else None,
        "arrival_rate_per_s": spec.load.rate_per_s if spec.load.kind == "constant-arrival-rate" else None,
        "prompts": spec.workload.prompts if spec.workload.kind == "number-story" else None,
        "duration_s": spec.load.planned_duration_s,
        "max_tokens": spec.max_tokens,
        "random_seed": spec.random_seed,
        "requires_labels": sorted(spec.requires) or None,
        "pinned_worker": spec.worker,
    }


def enqueue_experiment(*, session: Session, spec: ExperimentSpec, tags: str = "") -> Experiment:
    """Store an experiment and queue one run per grid cell and repeat. Commits."""
    runs = []
    for cell_label, repeat_index, run_spec in spec.expand():
        # Repeats get distinct seeds so they are independent samples, each replayable.
        seed = (run_spec.random_seed + repeat_index) % 2**31
        run_spec = RunSpec.model_validate({**run_spec.model_dump(), "random_seed": seed})
        runs.append({"cell_label": cell_label, "repeat_index": repeat_index, **run_columns(run_spec)})
    return store.enqueue_experiment(
        session=session, name=spec.name, preset=spec.preset, scale=spec.scale, spec=spec.model_dump(mode="json"),
        runs=runs, tags=tags,
    )
