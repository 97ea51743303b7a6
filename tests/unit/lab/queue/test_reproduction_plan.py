"""`lab reproduce --plan`: each cell's length at the chosen scale and why, and the predicted
wall time, from the stored history, with nothing queued."""

from __future__ import annotations

from types import SimpleNamespace

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from db.models import Run
from lab.queue import experiments
from lab.queue.reproduction_plan import plan_lines, plan_reproduction
from lab.specs.schema import load_preset
from tests.support.queue import finish_run


def test_the_plan_lengthens_cells_from_history_says_where_there_is_none_and_queues_nothing(engine) -> None:
    settings = SimpleNamespace(resolved_database_url=str(engine.url))
    with Session(engine) as session:
        history = experiments.enqueue_experiment(session=session, spec=load_preset("seed-exp2", quick=True))
        run_ids = {run.id: run.cell_label for run in history.runs}
    for run_id, label in run_ids.items():
        rate = 30.0 if "cache" in label else 0.3925  # direct vLLM here, and its cache
        finish_run(engine, run_id, req_per_s=rate, latency_avg_s=32 / rate)
    with Session(engine) as session:
        stored_runs = session.scalar(select(func.count(Run.id)))

    plan = plan_reproduction(settings=settings, scale="adapted", repeats=2, presets=("seed-exp2", "seed-exp3"))

    lengths = {(cell.experiment, cell.label): cell for cell in plan.cells}
    cached = lengths[("seed-exp2", "backend=vllm+cache prompts=50")]
    assert cached.duration_s == 180 and "storing 50 answers takes at least 127 s" in cached.why
    assert "at least 2,548 s, over the 600 s cap" in lengths[("seed-exp2", "backend=vllm+cache prompts=1000")].why
    # No run of experiment 3's configurations is stored: kept at the seed's length, and said so.
    assert all(
        cell.duration_s == 60 and "no done run of this configuration is stored" in cell.why
        for cell in plan.cells
        if cell.experiment == "seed-exp3"
    )
    assert plan.runs == 2 * len(plan.cells)
    assert plan.load_s == 2 * sum(cell.duration_s for cell in plan.cells)
    assert plan.predicted_wall_s > plan.load_s  # service starts, warm-ups and graceful stops on top
    assert "predicted wall time" in plan_lines(plan)[-1]
    with Session(engine) as session:
        assert session.scalar(select(func.count(Run.id))) == stored_runs  # nothing queued
