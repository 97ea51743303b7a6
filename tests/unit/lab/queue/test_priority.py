"""`lab run --priority N`: an experiment's runs take their place in the queue by priority (higher
first), then by age; the option is bounded and refused in one line outside its range."""

from __future__ import annotations

import argparse

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from lab.cli.entry import build_parser
from lab.queue import experiments
from lab.queue.dispatch import queue_order
from lab.specs.schema import load_preset


def test_a_higher_priority_experiment_is_taken_before_older_runs(engine: Engine) -> None:
    spec = load_preset("seed-exp1", quick=True)
    with Session(engine) as session:
        older = [run.id for run in experiments.enqueue_experiment(session=session, spec=spec).runs]
        urgent = [run.id for run in experiments.enqueue_experiment(session=session, spec=spec, priority=5).runs]
        order, total = queue_order(session=session, limit=len(older) + len(urgent))
    assert total == len(older) + len(urgent)
    assert [queued.run_id for queued in order] == urgent + older
    assert {queued.priority for queued in order[: len(urgent)]} == {5}


def test_the_option_is_bounded(capsys: pytest.CaptureFixture[str]) -> None:
    parser: argparse.ArgumentParser = build_parser()
    assert parser.parse_args(["run", "--preset", "seed-exp1", "--priority", "20"]).priority == 20
    assert parser.parse_args(["run", "--preset", "seed-exp1"]).priority == 0
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--preset", "seed-exp1", "--priority", "5000"])
    assert "priority" in capsys.readouterr().err
