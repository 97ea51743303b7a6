"""Queue experiments: a validated :class:`~lab.specs.schema.ExperimentSpec` becomes the plain rows
the store keeps (``db`` knows nothing of specs; this is where specs meet the queue). The
pages' queue actions (cancel, delete, notes, run again) are reached here too."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from db import store
from db.models import Experiment, Run, RunStatus

# Queue actions the pages take on stored runs: db.store's own, reached through the domain.
from lab.analysis.wall_time import wall_and_measured_s
from lab.members import os_user
from lab.queue.round_order import BLOCKS, INTERLEAVED, QueuedRun, draw_order_seed, plan_runs
from lab.specs.schema import ExperimentSpec, RunSpec
from lab.workloads import get_workload


def service_group(spec: RunSpec) -> str:
    """What decides whether the backend must restart between two runs: its kind, model and
    options (the cache in front is cheap to start and does not count)."""
    options = spec.backend_options()
    if hasattr(options, "model_dump"):
        options = options.model_dump(mode="json")
    return json.dumps([spec.base_backend, spec.model, options], sort_keys=True, default=str)


def last_queued_group(session: Session) -> str | None:
    """The service group of the newest queued run, or None when the queue is empty."""
    spec = session.scalars(
        select(Run.spec).where(Run.status == RunStatus.QUEUED).order_by(Run.id.desc()).limit(1)
    ).first()
    if spec is None:
        return None
    try:
        return service_group(RunSpec.model_validate(spec))
    except ValueError:  # a spec no longer valid: it fails on its own when claimed
        return None


def wall_time_ratio(runs: list[Run]) -> float | None:
    """Wall time over measured seconds: the lab's own overhead (starting services, warm-up,
    parsing) on top of the load; 1.0 would be none."""
    figures = wall_and_measured_s(runs)
    return figures[0] / figures[1] if figures else None


def record_wall_time_ratio(*, session: Session, experiment_id: int | None) -> float | None:
    """Store the experiment's wall-time ratio as it stands now (called after each run). Commits."""
    experiment = session.get(Experiment, experiment_id) if experiment_id is not None else None
    if experiment is None:
        return None
    experiment.wall_time_ratio = wall_time_ratio(list(experiment.runs))
    session.commit()
    return experiment.wall_time_ratio


def with_round_random_seed(spec: RunSpec, round_index: int) -> RunSpec:
    """``spec`` with the random seed of its round: repeats get distinct random seeds so they are independent
    samples, each replayable. The one rule every round of every experiment uses."""
    return RunSpec.model_validate({**spec.model_dump(), "random_seed": (spec.random_seed + round_index) % 2**31})


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
        "prompts": get_workload(spec.workload.kind).prompts_column(spec),
        "duration_s": spec.load.planned_duration_s,
        "max_tokens": spec.max_tokens,
        "random_seed": spec.random_seed,
        "requires_labels": sorted(spec.requires) or None,
        "pinned_worker": spec.worker,
    }


def queue_plan(
    spec: ExperimentSpec, *, first_group: str | None = None
) -> tuple[ExperimentSpec, list[QueuedRun[tuple[str, RunSpec]]]]:
    """The runs of ``spec`` in queue order, and the spec with its run order resolved (the order seed
    drawn when it names none, so the order is recorded and replays).

    One repeat, or ``order="blocks"``: each backend configuration's cells together (each
    starts once; ``first_group``, the backend the queue ends with, first), a cell's repeats
    together. Otherwise interleaved rounds (lab/queue/round_order.py)."""
    order = spec.order if spec.repeats > 1 else BLOCKS
    if order == INTERLEAVED and spec.order_seed is None:
        spec = spec.model_copy(update={"order_seed": draw_order_seed()})
    plan = plan_runs(
        spec.distinct_cells(),
        repeats=spec.repeats,
        order=order,
        order_seed=spec.order_seed or 0,
        group_of=lambda cell: service_group(cell[1]),
        first_group=first_group,
    )
    return spec, plan


def enqueue_experiment(
    *,
    session: Session,
    spec: ExperimentSpec,
    tags: str = "",
    frozen_rules: dict[str, Any] | None = None,
    launched_by: str | None = None,
    priority: int = 0,
) -> Experiment:
    """Store an experiment and queue one run per grid cell and repeat, in the order of
    :func:`queue_plan` (the queue claims oldest first). ``frozen_rules``: the verdict rules
    its report will judge by, fixed now, before its data. ``launched_by``: who queues it (the
    web lab's member; by default the operating-system user, as for the CLI). ``priority``: the
    runs' place in the queue (higher first; a long experiment's rounds have the
    ``long_experiment_priority`` setting). Commits."""
    spec, plan = queue_plan(spec, first_group=last_queued_group(session))
    runs = []
    for queued in plan:
        cell_label, run_spec = queued.cell
        seeded = with_round_random_seed(run_spec, queued.round_index)
        runs.append(
            {"cell_label": cell_label, "repeat_index": queued.round_index, "priority": priority, **run_columns(seeded)}
        )
    return store.enqueue_experiment(
        session=session,
        name=spec.name,
        preset=spec.preset,
        scale=spec.scale,
        spec=spec.model_dump(mode="json"),
        runs=runs,
        tags=tags,
        frozen_rules=frozen_rules,
        launched_by=launched_by or os_user(),
    )
