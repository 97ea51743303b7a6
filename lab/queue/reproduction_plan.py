"""What a reproduction would run, before anything is queued (``lab reproduce --plan``): each
cell's length at the chosen scale and why, and the wall time the lab predicts for the planned
rounds from this machine's stored runs (lab/history.py), so a reader can tell beforehand whether
it fits the quiet hours they have."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import TYPE_CHECKING, Any

from lab.analysis.measurability import DEFAULT_MAX_CELL_S
from lab.queue.rounds import adapted_spec
from lab.report.build import PRESETS
from lab.specs.schema import ExperimentSpec, load_preset

if TYPE_CHECKING:
    from sqlalchemy.orm import Session


def scaled_preset(
    session: Session, preset: str, *, scale: str, repeats: int | None, max_cell_s: float
) -> ExperimentSpec:
    """The seed preset's experiment spec at ``scale``: the adapted scale lengthens cells from the
    history stored in ``session``."""
    spec = load_preset(preset, quick=scale == "quick", overrides=[("repeats", repeats)] if repeats else [])
    return adapted_spec(session, spec, max_cell_s=max_cell_s) if scale == "adapted" else spec


@dataclass(frozen=True)
class PlannedCell:
    """One cell of a seed experiment as it would run: seconds per run, and the adapted scale's reason."""

    experiment: str
    label: str
    duration_s: float
    why: str


@dataclass(frozen=True)
class ReproductionPlan:
    """The planned rounds of a reproduction: its cells, its runs, their load seconds, and the
    predicted wall time (service starts at each switch of backend, warm-ups, graceful stops and
    collecting included); ``runs_from_history``: runs whose time came from past runs of the
    same configuration rather than a guess."""

    scale: str
    repeats: int
    cells: tuple[PlannedCell, ...]
    runs: int
    load_s: float
    predicted_wall_s: float
    runs_from_history: int


def plan_reproduction(
    *,
    settings: Any,
    scale: str = "seed",
    repeats: int | None = None,
    max_cell_s: float = DEFAULT_MAX_CELL_S,
    presets: Sequence[str] = PRESETS,
) -> ReproductionPlan:
    """The reproduction ``lab reproduce`` would queue with these options; queues nothing."""
    from sqlalchemy.orm import Session

    from db.engine import get_engine
    from lab.history import estimate_runs
    from lab.queue.experiments import queue_plan, run_columns, service_group

    cells: list[PlannedCell] = []
    runs = 0
    load_s = wall_s = 0.0
    from_history = 0
    repeats_used = 1
    with Session(get_engine(settings.resolved_database_url)) as session:
        for preset in presets:
            spec = scaled_preset(session, preset, scale=scale, repeats=repeats, max_cell_s=max_cell_s)
            repeats_used = spec.repeats
            for label, run_spec in spec.distinct_cells():
                scaled = spec.cell_scales.get(label)
                cells.append(PlannedCell(preset, label, run_spec.load.planned_duration_s, scaled.why if scaled else ""))
            _, plan = queue_plan(spec)
            runs += len(plan)
            load_s += sum(queued.cell[1].load.planned_duration_s for queued in plan)
            # The worker starts a backend's services again after each run of another backend.
            for _, stretch in groupby(plan, key=lambda queued: service_group(queued.cell[1])):
                estimate = estimate_runs(
                    session=session, specs=[run_columns(queued.cell[1])["spec"] for queued in stretch]
                )
                wall_s += estimate.seconds
                from_history += estimate.runs_from_history
    return ReproductionPlan(scale, repeats_used, tuple(cells), runs, load_s, wall_s, from_history)


def plan_lines(plan: ReproductionPlan) -> list[str]:
    """The plan as the CLI prints it: one line a cell, then the totals."""
    lines = [f"scale {plan.scale}, {plan.repeats} repeats a cell (planned rounds only):"]
    for cell in plan.cells:
        reason = f"  ({cell.why})" if cell.why else ""
        lines.append(f"  {cell.experiment}  {cell.label}: {cell.duration_s:,.0f} s{reason}")
    hours = plan.predicted_wall_s / 3600
    lines.append(
        f"{plan.runs} runs, {plan.load_s:,.0f} s of load; predicted wall time {plan.predicted_wall_s:,.0f} s "
        f"({hours:.1f} h) for one drawn run order (each order restarts services differently), "
        f"{plan.runs_from_history} of {plan.runs} runs timed from past runs of their "
        "configuration, the rest guessed from their planned load"
    )
    return lines
