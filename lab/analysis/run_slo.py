"""A stored run judged against an SLO: its per-request figures read back and evaluated, and
the verdict (goodput, attainment, the SLO) written onto the run.

Here, above :mod:`lab.measurement.request_figures` (which stores and reads the figures), so
that measurement never imports the analysis that judges what it measured."""

from __future__ import annotations

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from db import store
from lab.analysis.slo import Slo, SloEvaluation, evaluate
from lab.measurement.request_figures import load_request_figures, run_duration_s
from lab.measurement.results import SloFigures


def evaluate_run(*, session: Session, run_id: int, slo: Slo) -> SloEvaluation:
    """Evaluate a stored run against ``slo`` from its per-request figures."""
    run = store.get_run(session=session, run_id=run_id)
    if run is None:
        raise LookupError(f"no run with id {run_id}")
    return evaluate(slo, load_request_figures(session=session, run_id=run_id), duration_s=run_duration_s(run))


def save_evaluation(*, engine: Engine, run_id: int, evaluation: SloEvaluation) -> None:
    """Write goodput, attainment and the SLO they are against onto the run."""
    figures = SloFigures(
        goodput_req_per_s=evaluation.goodput_req_per_s,
        slo_attainment=evaluation.attainment,
        slo_evaluated=str(evaluation.slo),
    )
    store.update_run(engine=engine, run_id=run_id, **figures.figures())
