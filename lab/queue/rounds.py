"""The queue side of the adapted scale and of rounds until decided: what the store knows of a
configuration (its history), a spec adapted before queueing, one more round of chosen cells,
and how long a round of them takes.

The decisions are pure (:mod:`lab.analysis.measurability`, :mod:`lab.analysis.until_decided`);
this module reads the store for them.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Collection, Hashable
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from db.models import Experiment, Run, RunStatus
from lab.analysis.measurability import CellHistory, CellLoad, adapt
from lab.queue.experiments import run_columns, service_group, with_round_random_seed
from lab.queue.round_order import INTERLEAVED, plan_runs
from lab.specs.configuration import model_name
from lab.specs.schema import CellScale, ExperimentSpec, RunSpec

# The newest stored runs of a configuration its history is taken from.
HISTORY_RUNS = 10


def cell_history(session: Session, spec: RunSpec) -> CellHistory | None:
    """Medians of the newest done runs of ``spec``'s configuration (any length, its model matched
    by name, so runs from another clone or worktree of the lab count), or None."""
    columns = run_columns(spec)
    wanted = model_name(columns["model"])
    # Narrowed in SQL to this name or a folder of it; the exact match on the name is below.
    query = select(Run.req_per_s, Run.latency_avg_s, Run.model).where(
        Run.status == RunStatus.DONE, or_(Run.model == wanted, Run.model.endswith(f"/{wanted}", autoescape=True))
    )
    for name in ("backend", "workload", "load_kind", "vus", "prompts", "max_tokens"):
        value = columns[name]
        query = query.where(getattr(Run, name).is_(None) if value is None else getattr(Run, name) == value)
    same_model = (row for row in session.execute(query.order_by(Run.id.desc())) if model_name(row[2]) == wanted)
    rows = list(itertools.islice(same_model, HISTORY_RUNS))
    rates = [row[0] for row in rows if row[0]]
    if not rates:
        return None
    latencies = [row[1] for row in rows if row[1]]
    return CellHistory(statistics.median(rates), statistics.median(latencies) if latencies else None, len(rows))


def _cell_load(session: Session, label: str, spec: RunSpec) -> CellLoad:
    from lab.workloads import get_workload

    cold_cache = spec.uses_cache and not spec.fills_cache_first
    direct = None
    if cold_cache:
        direct_spec = RunSpec.model_validate({**spec.model_dump(), "backend": spec.base_backend})
        direct = cell_history(session, direct_spec)
    return CellLoad(
        label=label,
        duration_s=spec.load.planned_duration_s,
        vus=spec.load.peak_vus if spec.load.kind != "constant-arrival-rate" else None,
        history=cell_history(session, spec),
        cache_prompts=get_workload(spec.workload.kind).distinct_requests(spec) if cold_cache else None,
        direct=direct,
    )


def adapted_spec(session: Session, spec: ExperimentSpec, *, max_cell_s: float) -> ExperimentSpec:
    """``spec`` at the adapted scale: each cell the stored history says it cannot measure runs
    longer (up to ``max_cell_s``), with the reason; a need over the cap is kept as a note."""
    cells: dict[str, CellScale] = {}
    unknown = 0
    for label, run_spec in spec.distinct_cells():
        load = _cell_load(session, label, run_spec)
        if load.history is None and load.direct is None:
            unknown += 1
            why = (
                f"{load.duration_s:,.0f} s kept: no done run of this configuration is stored here to predict from "
                "(a quick reproduction on this machine stores one)"
            )
            cells[label] = CellScale(duration_s=load.duration_s, why=why)
            continue
        need = adapt(load, max_cell_s=max_cell_s)
        if need.lengthened or need.over_cap:
            cells[label] = CellScale(duration_s=need.duration_s, why=need.sentence(), over_cap="; ".join(need.over_cap))
    lengthened = sum(1 for cell in cells.values() if cell.duration_s > spec.base.load.planned_duration_s)
    note = (
        f"adapted scale: the seed's, with {lengthened} of {len(spec.distinct_cells())} cells lengthened (up to "
        f"{max_cell_s:,.0f} s) where this machine's stored runs say the seed's length cannot measure them"
    )
    if unknown:
        note += f"; {unknown} cells kept the seed's length with no stored run to predict from"
    return spec.model_copy(update={"scale": "adapted", "scale_note": note, "cell_scales": cells})


def round_run_columns(spec: ExperimentSpec, round_index: int, cells: Collection[Hashable]) -> list[dict[str, Any]]:
    """The runs of one more round of ``cells`` (labels) of ``spec``, in an order drawn from its order
    seed and the round; each run's random seed advanced by the round, as the planned rounds' are."""
    chosen = [(label, run_spec) for label, run_spec in spec.distinct_cells() if label in cells]
    plan = plan_runs(
        chosen,
        repeats=1,
        order=INTERLEAVED,
        order_seed=(spec.order_seed or 0) + round_index,
        group_of=lambda cell: service_group(cell[1]),
    )
    runs = []
    for queued in plan:
        label, run_spec = queued.cell
        seeded = with_round_random_seed(run_spec, round_index)
        runs.append({"cell_label": label, "repeat_index": round_index, **run_columns(seeded)})
    return runs


def round_seconds(session: Session, experiment_id: int, cells: Collection[Hashable]) -> float:
    """A round of ``cells``' predicted wall seconds: each cell's mean wall time so far (its planned
    seconds where no run of it finished)."""
    experiment = session.get(Experiment, experiment_id)
    if experiment is None:
        return 0.0
    total = 0.0
    for label in cells:
        runs = [run for run in experiment.runs if run.cell_label == label]
        walls = [
            (run.finished_at - run.started_at).total_seconds() for run in runs if run.started_at and run.finished_at
        ]
        total += statistics.fmean(walls) if walls else max((run.duration_s for run in runs), default=0.0)
    return total
