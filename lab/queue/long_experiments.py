"""Long experiments: a stored plan that the worker drives, round by round, across any stop of the lab.

A long experiment (``db.models.LongExperiment``) holds its experiments (a reproduction's three seed
presets, or one grid) and the plan fixed at creation: planned rounds, cell lengths with their reasons,
rules version, order seeds, budget, precision and round limit. Nothing is queued ahead of time but the
current round. After every run the worker calls :func:`advance`, the one place that decides what comes
next, in this order:

1. a replacement, in the same round, of each run a stop cut (``interrupted``, row and data kept);
2. nothing while a run of the experiment is queued or running;
3. the next planned round;
4. with ``until_decided``: a round of only the cells whose figures are undecided (a round the
   contention warning spoiled leaves its claims undecided, so this replaces it), until every figure
   is decided, the budget is spent or the round limit is reached; the budget counts only the seconds
   runs ran, never a pause;
5. the end, with its reason.

Each change bumps ``step`` in the same transaction as the runs it queues, so two workers never queue
one round twice. Which worker may take its runs is :mod:`lab.queue.long_gate`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session

from db import store
from db.engine import rows_changed
from db.models import Experiment, LongExperiment, LongExperimentState, Run, RunStatus, utc_now
from lab.analysis.until_decided import Undecided, next_cells, undecided_comparisons
from lab.analysis.wall_time import run_intervals, wall_time
from lab.measurement.hardware import identity_summary
from lab.queue.experiments import queue_plan, run_columns, with_round_random_seed
from lab.queue.rounds import round_run_columns, round_seconds
from lab.settings import get_settings
from lab.specs.schema import ExperimentSpec, UntilDecided

if TYPE_CHECKING:  # the report package loads pandas: not at the worker's start
    from lab.report.experiment_meta import ExperimentMeta

log = logging.getLogger(__name__)

REPRODUCTION = "reproduction"
GRID = "grid"
REPRODUCE_TAG = "reproduce"
# A run of one cell and round cut this many times pauses the experiment: something cuts it every time.
MAX_CUTS_PER_SLOT = 3
# The figures whose ratios between cells a grid experiment run until decided decides.
DECIDED_FIGURES = ("req_per_s", "output_tok_per_s")
EVERY_PLANNED_ROUND = "every planned round ran"


class DirtyTreeError(RuntimeError):
    """The checkout has uncommitted changes and the experiment was not allowed to run on it."""


class LongExperimentError(ValueError):
    """A long experiment that does not exist, or cannot take the action asked (one line)."""


# -- creation --------------------------------------------------------------------------------


def _code_and_rules(*, allow_dirty: bool) -> tuple[Any, dict[str, Any]]:
    from lab.measurement.environment import provenance
    from lab.report.verdicts import frozen_rules

    code = provenance()
    if code.dirty and not allow_dirty:
        raise DirtyTreeError(
            f"the lab's checkout has uncommitted changes (commit {code.commit}): commit them, or "
            "pass --allow-dirty (the report will say so at the top)"
        )
    return code, {**frozen_rules(), "lab_git_commit": code.label, "allowed_dirty": code.dirty}


def _store_experiment(
    session: Session, spec: ExperimentSpec, *, tags: str, rules: dict[str, Any] | None, launched_by: str
) -> Experiment:
    """The experiment with its run order resolved (its order seed drawn and stored) and no run queued yet."""
    spec, _ = queue_plan(spec)
    return store.enqueue_experiment(
        session=session,
        name=spec.name,
        preset=spec.preset,
        scale=spec.scale,
        spec=spec.model_dump(mode="json"),
        runs=[],
        tags=tags,
        frozen_rules=rules,
        launched_by=launched_by,
    )


def _cells(preset: str, spec: ExperimentSpec) -> list[dict[str, Any]]:
    return [
        {
            "experiment": preset,
            "label": label,
            "duration_s": run_spec.load.planned_duration_s,
            "why": scaled.why if (scaled := spec.cell_scales.get(label)) else "",
        }
        for label, run_spec in spec.distinct_cells()
    ]


def create(
    *,
    engine: Engine,
    kind: str,
    name: str,
    specs: dict[str, ExperimentSpec],
    until: UntilDecided | None,
    allow_dirty: bool = False,
    allow_commit_change: bool = False,
    report_dir: Path | None = None,
    command: str = "",
    tags: str = "",
    launched_by: str | None = None,
) -> int:
    """Store a long experiment of ``specs`` (one experiment each, keyed by preset or name) and queue
    its first round; its id. DirtyTreeError on a checkout with uncommitted changes unless ``allow_dirty``."""
    from lab.members import os_user

    code, rules = _code_and_rules(allow_dirty=allow_dirty)
    who = launched_by or os_user()
    with Session(engine) as session:
        experiments: dict[str, int] = {}
        cells: list[dict[str, Any]] = []
        repeats = []
        for key, spec in specs.items():
            with_rounds = spec.model_copy(update={"until_decided": until}) if until is not None else spec
            stored = _store_experiment(
                session, with_rounds, tags=tags, rules=rules if kind == REPRODUCTION else None, launched_by=who
            )
            experiments[key] = stored.id
            cells += _cells(key, with_rounds)
            repeats.append(with_rounds.repeats)
        plan = {
            "scale": next(iter(specs.values())).scale,
            "repeats": min(repeats),
            "until_decided": until.model_dump() if until is not None else None,
            "rules_version": rules.get("version"),
            "experiments": experiments,
            "cells": cells,
            "report_dir": str(report_dir) if report_dir is not None else None,
            "command": command,
            # The checkout it was created from; the commit its runs must keep is its first worker's.
            "created_on_commit": code.label,
        }
        long_id = _store_long(
            session,
            LongExperiment(
                kind=kind,
                name=name,
                plan=plan,
                lab_commit=code.label,
                lab_dirty=code.dirty,
                allow_commit_change=allow_commit_change,
                launched_by=who,
            ),
            experiments.values(),
        )
    advance(engine, long_id)
    return long_id


def _store_long(session: Session, long_experiment: LongExperiment, experiment_ids: Collection[int]) -> int:
    """Store the long experiment and link its experiments to it. Commits; its id."""
    session.add(long_experiment)
    session.flush()
    session.execute(
        update(Experiment).where(Experiment.id.in_(experiment_ids)).values(long_experiment_id=long_experiment.id)
    )
    session.commit()
    return long_experiment.id


def create_reproduction(
    *,
    engine: Engine,
    scale: str,
    repeats: int | None,
    until: UntilDecided | None,
    report_dir: Path | None,
    presets: Sequence[str] | None = None,
    max_cell_s: float | None = None,
    allow_dirty: bool = False,
    allow_commit_change: bool = False,
) -> int:
    """The seed's reproduction as a long experiment (the presets at ``scale``, their verdict rules
    frozen now, before any data); its id. DirtyTreeError on a checkout with uncommitted changes
    unless ``allow_dirty``."""
    from lab.analysis.measurability import DEFAULT_MAX_CELL_S
    from lab.queue.reproduction_plan import scaled_preset
    from lab.report.build import PRESETS
    from lab.report.reproduction import reproduction_command

    with Session(engine) as session:
        specs = {
            preset: scaled_preset(
                session, preset, scale=scale, repeats=repeats, max_cell_s=max_cell_s or DEFAULT_MAX_CELL_S
            )
            for preset in presets or PRESETS
        }
    return create(
        engine=engine,
        kind=REPRODUCTION,
        name=f"seed reproduction, {scale} scale" + (", until decided" if until else ""),
        specs=specs,
        until=until,
        allow_dirty=allow_dirty,
        allow_commit_change=allow_commit_change,
        report_dir=report_dir,
        command=reproduction_command(scale=scale, repeats=repeats, until_decided=until),
        tags=REPRODUCE_TAG,
    )


# -- what comes next -------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """What :func:`advance` does: queue runs (``runs``: experiment id -> run columns), or end or
    pause the experiment (``state`` with ``reason``)."""

    what: str
    runs: tuple[tuple[int, dict[str, Any]], ...] = ()
    state: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Advanced:
    """What one call of :func:`advance` did: a line for the log, and whether the experiment ended."""

    line: str
    ended: bool


def experiments_of(session: Session, long_id: int) -> list[Experiment]:
    return list(
        session.scalars(select(Experiment).where(Experiment.long_experiment_id == long_id).order_by(Experiment.id))
    )


def spent_s(runs: Sequence[Run], *, now: datetime | None = None) -> float:
    """Seconds the experiment's runs ran (a running one up to now): its budget's count, pauses excluded."""
    return wall_time(run_intervals(runs, now=now or utc_now())).running_s


def _replacements(runs: Sequence[Run]) -> Step | None:
    """A run of every (experiment, cell, round) whose only runs a stop cut; a pause when one was cut too often."""
    slots: dict[tuple[int | None, str, int], list[Run]] = {}
    for run in runs:
        slots.setdefault((run.experiment_id, run.cell_label, run.repeat_index), []).append(run)
    replace: list[tuple[int, dict[str, Any]]] = []
    for (experiment_id, label, round_index), slot in slots.items():
        if experiment_id is None or any(run.status not in (RunStatus.INTERRUPTED, RunStatus.CANCELLED) for run in slot):
            continue
        cut = [run for run in slot if run.status == RunStatus.INTERRUPTED]
        if not cut:
            continue  # cancelled by a person: not run again
        if len(cut) >= MAX_CUTS_PER_SLOT:
            reason = (
                f"the run of {label} in round {round_index + 1} was cut {len(cut)} times (last: "
                f"{(cut[-1].status_reason or 'no reason').splitlines()[0]}); resume it with lab reproduce --resume ID"
            )
            return Step("paused", state=LongExperimentState.PAUSED, reason=reason)
        last = cut[-1]
        replace.append((experiment_id, {name: getattr(last, name) for name in Run.SPEC_COLUMNS}))
    if not replace:
        return None
    return Step(
        f"replaced {len(replace)} cut run{'s' if len(replace) != 1 else ''} in their rounds", runs=tuple(replace)
    )


def planned_round(experiments: Sequence[Experiment], round_index: int) -> Step:
    """Planned round ``round_index`` of ``experiments``: each cell once, seeded for that round."""
    queued = []
    for experiment in experiments:
        spec = ExperimentSpec.model_validate(experiment.spec)
        _, plan = queue_plan(spec)
        for item in plan:
            if item.round_index != round_index:
                continue
            label, run_spec = item.cell
            seeded = with_round_random_seed(run_spec, round_index)
            queued.append((experiment.id, {"cell_label": label, "repeat_index": round_index, **run_columns(seeded)}))
    return Step(f"queued planned round {round_index + 1}", runs=tuple(queued))


def _undecided(session: Session, long_experiment: LongExperiment, experiments: Sequence[Experiment]) -> list[Undecided]:
    """The figures more rounds may decide, each with its cells as (experiment id, cell label)."""
    if long_experiment.kind == REPRODUCTION:
        from lab.report.claim_rounds import judge_claims, rounds_of
        from lab.report.trust_section import assess

        records, meta, ids = reproduction_records(session, experiments)
        judged = judge_claims(records, drift=assess(records).drift, rounds=rounds_of(meta))
        return [
            Undecided(
                item.verdict["key"], frozenset((ids[item.verdict["preset"]], cell) for cell in item.cells), item.rounds
            )
            for item in judged
            if item.undecided
        ]
    from lab.analysis.compare import RunRecord, grid_comparisons

    experiment = experiments[0]
    spec = ExperimentSpec.model_validate(experiment.spec)
    until = spec.until_decided or UntilDecided(budget_s=1.0)
    runs = list(experiment.runs)
    grid_records, specs = [RunRecord.of(run) for run in runs], [run.spec for run in runs]
    rows = [row for figure in DECIDED_FIGURES for row in grid_comparisons(grid_records, specs, list(spec.grid), figure)]
    found = undecided_comparisons(rows, first_look=spec.repeats, precision=until.precision, max_rounds=until.max_rounds)
    return [Undecided(item.key, frozenset((experiment.id, cell) for cell in item.cells), item.rounds) for item in found]


def reproduction_records(
    session: Session, experiments: Sequence[Experiment]
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, ExperimentMeta], dict[str, int]]:
    """A reproduction's runs as the report reads them (by preset, oldest first), its experiments'
    meta and each preset's experiment id."""
    from lab.report.publish import published_record
    from lab.report.reproduction import experiment_meta

    records, meta, ids = {}, {}, {}
    for experiment in experiments:
        preset = experiment.preset or experiment.name
        runs = store.list_runs(session=session, experiment_ids=[experiment.id], newest_first=False)
        records[preset] = [published_record(run) for run in runs]
        meta[preset] = experiment_meta(
            ExperimentSpec.model_validate(experiment.spec), experiment.id, experiment.frozen_rules
        )
        ids[preset] = experiment.id
    return records, meta, ids


def _until_decided_round(
    session: Session, long_experiment: LongExperiment, experiments: Sequence[Experiment], runs: Sequence[Run]
) -> Step:
    until = UntilDecided.model_validate(long_experiment.plan["until_decided"])
    by_id = {experiment.id: experiment for experiment in experiments}

    def grouped(cells: Collection[Hashable]) -> dict[int, set[str]]:
        found: dict[int, set[str]] = {}
        for experiment_id, label in (cell for cell in cells if isinstance(cell, tuple)):
            found.setdefault(experiment_id, set()).add(label)
        return found

    def round_s(cells: frozenset[Hashable]) -> float:
        return sum(round_seconds(session, experiment_id, labels) for experiment_id, labels in grouped(cells).items())

    cells, stop = next_cells(
        _undecided(session, long_experiment, experiments),
        elapsed_s=spent_s(runs),
        budget_s=until.budget_s,
        round_s=round_s,
        max_rounds=until.max_rounds,
    )
    if stop is not None:
        return Step(stop, state=LongExperimentState.FINISHED, reason=stop)
    queued = []
    for experiment_id, labels in sorted(grouped(cells).items()):
        experiment = by_id[experiment_id]
        round_index = max((run.repeat_index for run in experiment.runs), default=-1) + 1
        spec = ExperimentSpec.model_validate(experiment.spec)
        queued += [(experiment_id, columns) for columns in round_run_columns(spec, round_index, labels)]
    return Step(f"queued a round of {len(queued)} undecided cells", runs=tuple(queued))


def decide(session: Session, long_experiment: LongExperiment) -> Step | None:
    """The next step of a running long experiment (see the module's docstring), or None: wait."""
    experiments = experiments_of(session, long_experiment.id)
    runs = [run for experiment in experiments for run in experiment.runs]
    if (replaced := _replacements(runs)) is not None:
        return replaced
    if any(run.status == RunStatus.QUEUED or run.status in RunStatus.ACTIVE for run in runs):
        return None
    last_round = max((run.repeat_index for run in runs), default=-1)
    if last_round + 1 < int(long_experiment.plan.get("repeats") or 1):
        return planned_round(experiments, last_round + 1)
    if not long_experiment.plan.get("until_decided"):
        return Step(EVERY_PLANNED_ROUND, state=LongExperimentState.FINISHED, reason=EVERY_PLANNED_ROUND)
    return _until_decided_round(session, long_experiment, experiments, runs)


def advance(engine: Engine, long_id: int, *, priority: int | None = None) -> Advanced | None:
    """Take the long experiment's next step, if it has one now; what was done, or None. The runs
    it queues have ``priority`` on the queue (default: the ``long_experiment_priority`` setting)."""
    if priority is None:
        priority = get_settings().long_experiment_priority
    with Session(engine) as session:
        long_experiment = session.get(LongExperiment, long_id)
        if long_experiment is None or long_experiment.state != LongExperimentState.RUNNING:
            return None
        step = decide(session, long_experiment)
        if step is None:
            return None
        # The bump first: on SQLite it takes the write lock, on PostgreSQL the row's; a second
        # worker deciding from the same step then changes nothing.
        bumped = rows_changed(
            session,
            update(LongExperiment)
            .where(LongExperiment.id == long_id, LongExperiment.step == long_experiment.step)
            .values(step=long_experiment.step + 1),
        )
        if not bumped:
            session.rollback()
            return None
        tags = next((run.tags for experiment in experiments_of(session, long_id) for run in experiment.runs), "")
        launched_by = long_experiment.launched_by
        for experiment_id, columns in step.runs:
            session.add(
                Run(experiment_id=experiment_id, tags=tags, launched_by=launched_by, priority=priority, **columns)
            )
        if step.state is not None:
            session.execute(
                update(LongExperiment)
                .where(LongExperiment.id == long_id)
                .values(
                    state=step.state,
                    state_reason=step.reason,
                    ended_at=utc_now() if step.state in LongExperimentState.FINAL else None,
                )
            )
        session.commit()
    line = f"long experiment #{long_id}: {step.what}"
    log.info(line)
    return Advanced(line, ended=step.state in LongExperimentState.FINAL)


def running_ids(engine: Engine) -> list[int]:
    with Session(engine) as session:
        return list(
            session.scalars(
                select(LongExperiment.id)
                .where(LongExperiment.state == LongExperimentState.RUNNING)
                .order_by(LongExperiment.id)
            )
        )


# -- actions a person takes ------------------------------------------------------------------


def get(session: Session, long_id: int) -> LongExperiment:
    """The long experiment, or LongExperimentError naming what exists."""
    found = session.get(LongExperiment, long_id)
    if found is None:
        raise LongExperimentError(f"no long experiment #{long_id} (lab reproduce --status lists them)")
    return found


def stop(engine: Engine, long_id: int, *, by: str) -> None:
    """End it now: its queued runs cancelled, a running one asked to stop; LongExperimentError when
    it does not exist or already ended."""
    with Session(engine) as session:
        long_experiment = get(session, long_id)
        if long_experiment.state in LongExperimentState.FINAL:
            raise LongExperimentError(f"long experiment #{long_id} already ended ({long_experiment.state})")
        long_experiment.state, long_experiment.state_reason = LongExperimentState.STOPPED, f"stopped by {by}"
        long_experiment.ended_at = utc_now()
        long_experiment.step += 1
        session.commit()
        active = [
            run.id
            for experiment in experiments_of(session, long_id)
            for run in experiment.runs
            if run.status == RunStatus.QUEUED or run.status in RunStatus.ACTIVE
        ]
        for run_id in active:
            store.request_cancel(session=session, run_id=run_id)


def resume(engine: Engine, long_id: int, *, allow_commit_change: bool) -> None:
    """Go on with a paused long experiment (``allow_commit_change``: across a change of the lab's commit)."""
    with Session(engine) as session:
        long_experiment = get(session, long_id)
        if long_experiment.state in LongExperimentState.FINAL:
            raise LongExperimentError(f"long experiment #{long_id} already ended ({long_experiment.state})")
        long_experiment.state, long_experiment.state_reason = LongExperimentState.RUNNING, None
        long_experiment.allow_commit_change = long_experiment.allow_commit_change or allow_commit_change
        long_experiment.step += 1
        session.commit()
    advance(engine, long_id)


def machine_line(long_experiment: LongExperiment) -> str:
    """Which machine it runs on, or waits for."""
    if long_experiment.machine is None:
        return "machine: the first worker to take one of its runs"
    return f"machine: {identity_summary(long_experiment.machine)} (worker {long_experiment.machine_worker})"
