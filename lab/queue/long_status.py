"""Where a long experiment stands, as the terminal and the web page show it while it runs: each
figure's current ratio, interval and verdict so far, rounds done and owed, budget spent and left, the
wall time on the union of its runs (pauses apart), the machine it runs on or waits for, and an end
time estimated from the stored runs (:func:`lab.history.estimate_runs`).

The sequential intervals are valid at every look, which is what makes an interim table honest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from db import worker_store
from db.documents import JsonObject
from db.models import Experiment, LongExperiment, LongExperimentState, Run, RunStatus, utc_now
from lab.analysis.wall_time import WallTime, run_intervals, wall_time
from lab.queue import long_experiments as plans
from lab.specs.schema import ExperimentSpec, UntilDecided

# How a person reads the figures a grid experiment decides.
FIGURE_WORDS = {"req_per_s": "req/s", "output_tok_per_s": "output tok/s"}


@dataclass(frozen=True)
class FigureSoFar:
    """One claim's (or compared ratio's) state: its ratio and interval now, and its verdict so far."""

    key: str
    words: str
    ratio: float | None
    low: float | None
    high: float | None
    verdict: str
    progress: str  # "decided at round 4", "undecided after 6 rounds"


@dataclass(frozen=True)
class LongExperimentStatus:
    """A long experiment as it stands (see the module's docstring)."""

    id: int
    name: str
    kind: str
    state: str
    state_reason: str | None
    lab_commit: str | None
    commits: tuple[tuple[str, tuple[int, ...]], ...]  # (commit, rounds it ran)
    rounds_done: int
    rounds_planned: int
    runs_done: int
    runs_left: int
    running_run: str | None
    budget_s: float | None
    spent_s: float
    wall: WallTime
    machine: str
    waiting_for: str | None
    estimated_end: datetime | None
    latest_end: datetime | None
    figures: tuple[FigureSoFar, ...]

    @property
    def interim(self) -> bool:
        return self.state not in LongExperimentState.FINAL


def _rounds(runs: Sequence[Run]) -> tuple[int, int]:
    """(rounds every run of which is final, runs done)."""
    by_round: dict[int, list[Run]] = {}
    for run in runs:
        by_round.setdefault(run.repeat_index, []).append(run)
    finished = sum(1 for round_runs in by_round.values() if all(run.status in RunStatus.FINAL for run in round_runs))
    return finished, sum(1 for run in runs if run.status == RunStatus.DONE)


def _commits(runs: Sequence[Run]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    found: dict[str, set[int]] = {}
    for run in runs:
        commit = (run.environment or {}).get("lab_git_commit")
        if commit and run.started_at is not None:
            found.setdefault(str(commit), set()).add(run.repeat_index + 1)
    return tuple((commit, tuple(sorted(rounds))) for commit, rounds in found.items())


def _reproduction_figures(session: Session, experiments: Sequence[Experiment]) -> list[FigureSoFar]:
    from lab.analysis.interval_verdicts import Verdict
    from lab.report.claim_rounds import judge_claims, rounds_of
    from lab.report.trust_section import assess
    from lab.report.verdicts import UNDECIDED

    records, meta, _ = plans.reproduction_records(session, experiments)
    if not any(records.values()):
        return []
    figures = []
    judging = rounds_of(meta)
    for item in judge_claims(records, drift=assess(records).drift, rounds=judging):
        verdict = item.verdict
        rounds = int(verdict.get("rounds", item.rounds) or 0)
        state = "undecided" if verdict["verdict"] in UNDECIDED else "decided"
        progress = (
            "no round done yet"
            if rounds == 0
            # Before the planned rounds are in, a verdict is a reading, not the first decided look.
            else f"so far, after {rounds} of {judging.planned} planned rounds"
            if rounds < judging.planned
            else f"decided at round {rounds}"
            if state == "decided"
            else f"undecided after {rounds} round{'s' if rounds != 1 else ''}"
        )
        figures.append(
            FigureSoFar(
                str(verdict["key"]),
                str(verdict.get("claim") or verdict["key"]),
                verdict.get("ours"),
                verdict.get("ours_low"),
                verdict.get("ours_high"),
                Verdict(verdict["verdict"]).text,
                progress,
            )
        )
    return figures


def _grid_figures(experiment: Experiment) -> list[FigureSoFar]:
    from lab.analysis.compare import RunRecord, grid_comparisons
    from lab.analysis.sequential import widen_interval, widening

    spec = ExperimentSpec.model_validate(experiment.spec)
    until = spec.until_decided or UntilDecided(budget_s=1.0)
    runs = list(experiment.runs)
    records, specs = [RunRecord.of(run) for run in runs], [run.spec for run in runs]
    figures = []
    for figure in plans.DECIDED_FIGURES:
        for row in grid_comparisons(records, specs, list(spec.grid), figure):
            ratio, low, high = row.get("interval_ratio"), row.get("ratio_ci95_low"), row.get("ratio_ci95_high")
            rounds = int(row.get("rounds") or 0)
            if ratio is None:
                continue
            verdict = "inconclusive"
            if low is not None and high is not None and rounds >= 2:
                low, high = widen_interval(
                    ratio, low, high, widening(rounds, first_look=spec.repeats, max_rounds=until.max_rounds)
                )
                if low > 1 or high < 1:
                    verdict = "differs"
                elif (high - low) / 2 < until.precision * ratio:
                    verdict = f"within +-{until.precision:.0%}"
            progress = (
                f"decided at round {rounds}"
                if verdict != "inconclusive"
                else f"undecided after {rounds} round{'s' if rounds != 1 else ''}"
            )
            figures.append(
                FigureSoFar(
                    f"{figure}: {row['cell']}",
                    f"{FIGURE_WORDS.get(figure, figure)}: {row['cell']}",
                    ratio,
                    low,
                    high,
                    verdict,
                    progress,
                )
            )
    return figures


def _waiting_for(session: Session, long_experiment: LongExperiment, queued: Sequence[Run]) -> str | None:
    """Which machine its queued runs wait for, when no live worker of that machine is up."""
    if not queued or long_experiment.state != LongExperimentState.RUNNING:
        return None
    refused = long_experiment.refused_workers or {}
    wanted = plans.machine_line(long_experiment).removeprefix("machine: ")
    live = []
    for record in worker_store.list_workers(session=session):
        age_s = worker_store.heartbeat_age_s(session=session, record=record)
        if record.state == "running" and age_s is not None and age_s < 60 and record.name not in refused:
            live.append(record.name)
    if long_experiment.machine_worker and long_experiment.machine_worker in live:
        return None
    if long_experiment.machine is None and live:
        return None
    return f"waits for a worker on {wanted}" + (
        f" (worker{'s' if len(refused) != 1 else ''} {', '.join(sorted(refused))} refused: its settings differ)"
        if refused
        else ""
    )


def _estimated_end(
    session: Session,
    long_experiment: LongExperiment,
    experiments: Sequence[Experiment],
    runs: Sequence[Run],
    now: datetime,
) -> datetime | None:
    """Now plus the stored runs' estimate of the queued runs and the planned rounds still owed."""
    from lab.history import estimate_runs

    owed_specs: list[JsonObject] = [run.spec for run in runs if run.status == RunStatus.QUEUED]
    last_round = max((run.repeat_index for run in runs), default=-1)
    for round_index in range(last_round + 1, int(long_experiment.plan.get("repeats") or 1)):
        step = plans.planned_round(experiments, round_index)
        owed_specs += [columns["spec"] for _, columns in step.runs]
    running = [run for run in runs if run.status in RunStatus.ACTIVE]
    seconds = estimate_runs(session=session, specs=owed_specs).seconds if owed_specs else 0.0
    for run in running:
        started = run.started_at
        if started is not None:
            elapsed = (now.replace(tzinfo=None) if started.tzinfo is None else now) - started
            seconds += max(0.0, (run.duration_s or 0) + 30 - elapsed.total_seconds())
    if not seconds and long_experiment.state in LongExperimentState.FINAL:
        return None
    return now + timedelta(seconds=seconds)


def status(session: Session, long_id: int, *, now: datetime | None = None) -> LongExperimentStatus:
    """The long experiment ``long_id`` as it stands; LongExperimentError when it does not exist."""
    now = now or utc_now()
    long_experiment = plans.get(session, long_id)
    experiments = plans.experiments_of(session, long_id)
    runs = [run for experiment in experiments for run in experiment.runs]
    until = long_experiment.plan.get("until_decided")
    budget_s = float(until["budget_s"]) if until else None
    spent = plans.spent_s(runs, now=now)
    rounds_done, runs_done = _rounds(runs)
    queued = [run for run in runs if run.status == RunStatus.QUEUED]
    active = next((run for run in runs if run.status in RunStatus.ACTIVE), None)
    figures = (
        _reproduction_figures(session, experiments)
        if long_experiment.kind == plans.REPRODUCTION
        else (_grid_figures(experiments[0]) if experiments else [])
    )
    estimated = _estimated_end(session, long_experiment, experiments, runs, now)
    latest = (
        now + timedelta(seconds=max(0.0, budget_s - spent))
        if budget_s and long_experiment.state not in LongExperimentState.FINAL
        else None
    )
    return LongExperimentStatus(
        id=long_experiment.id,
        name=long_experiment.name,
        kind=long_experiment.kind,
        state=long_experiment.state,
        state_reason=long_experiment.state_reason,
        lab_commit=long_experiment.lab_commit,
        commits=_commits(runs),
        rounds_done=rounds_done,
        rounds_planned=int(long_experiment.plan.get("repeats") or 1),
        runs_done=runs_done,
        runs_left=len(queued) + (1 if active else 0),
        running_run=_run_line(active) if active else None,
        budget_s=budget_s,
        spent_s=spent,
        wall=wall_time(run_intervals(runs, now=now)),
        machine=plans.machine_line(long_experiment),
        waiting_for=_waiting_for(session, long_experiment, queued),
        estimated_end=estimated,
        latest_end=latest,
        figures=tuple(figures),
    )


def all_ids(session: Session, *, unfinished_only: bool = False) -> list[int]:
    query = select(LongExperiment.id).order_by(LongExperiment.id.desc())
    if unfinished_only:
        query = query.where(LongExperiment.state.not_in(LongExperimentState.FINAL))
    return list(session.scalars(query))


def newest_reproduction(session: Session, scale: str) -> int | None:
    """The newest long reproduction of ``scale``, or None."""
    query = select(LongExperiment).where(LongExperiment.kind == plans.REPRODUCTION).order_by(LongExperiment.id.desc())
    return next((found.id for found in session.scalars(query) if found.plan.get("scale") == scale), None)


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M")


def _run_line(run: Run) -> str:
    return f"#{run.id} {run.cell_label} (round {run.repeat_index + 1}, {run.status} on {run.worker_name})"


def _clock(moment: datetime | None) -> str:
    return moment.astimezone().strftime("%H:%M") if moment is not None else "-"


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


def _ratio(value: float | None) -> str:
    return f"{value:,.2f}x" if value is not None else "-"


def summary_lines(found: LongExperimentStatus) -> list[str]:
    """The head of the table: state, rounds, budget, wall time, machine, end."""
    head = f"long experiment #{found.id}: {found.name}: {found.state}"
    if found.state_reason:
        head += f" ({found.state_reason})"
    lines = [head]
    extra = found.rounds_done - found.rounds_planned
    rounds = (
        f"rounds {found.rounds_done} done of {found.rounds_planned} planned"
        if extra <= 0
        else f"rounds {found.rounds_done} done: {found.rounds_planned} planned, {extra} until decided"
    ) + f"; runs {found.runs_done} done, {found.runs_left} left"
    if found.running_run:
        rounds += f"; running {found.running_run}"
    lines.append(rounds)
    if found.budget_s is not None:
        left = max(0.0, found.budget_s - found.spent_s)
        lines.append(
            f"budget {_duration(found.budget_s)}: {_duration(found.spent_s)} spent running, {_duration(left)} left"
        )
    else:
        lines.append(f"{_duration(found.spent_s)} spent running")
    wall = found.wall
    if wall.first_start is not None:
        pauses = (
            f", {len(wall.pauses)} pause{'s' if len(wall.pauses) != 1 else ''} ({_duration(wall.paused_s)})"
            if wall.pauses
            else ""
        )
        lines.append(
            f"wall time {_duration(wall.span_s)} from first start to last end, "
            f"runs running {_duration(wall.running_s)}{pauses}"
        )
    lines.append(found.machine)
    if found.waiting_for:
        lines.append(found.waiting_for)
    if len(found.commits) > 1:
        lines.append(
            "commits: "
            + "; ".join(f"{commit} (rounds {', '.join(map(str, rounds))})" for commit, rounds in found.commits)
        )
    if found.interim and found.estimated_end is not None:
        end = f"planned rounds end about {_clock(found.estimated_end)}"
        if found.latest_end is not None:
            end += f"; until-decided rounds end by {_clock(found.latest_end)} at the latest (the budget)"
        lines.append(end)
    return lines


def table_lines(found: LongExperimentStatus) -> list[str]:
    """The summary, then one line a figure: ratio [interval], verdict so far, and its rounds."""
    lines = summary_lines(found)
    if not found.figures:
        lines.append("no figure yet: the first round is running")
        return lines
    width = max(len(figure.key) for figure in found.figures)
    for figure in found.figures:
        interval = f"[{_ratio(figure.low)}, {_ratio(figure.high)}]" if figure.low is not None else ""
        lines.append(
            f"  {figure.key:<{width}}  {_ratio(figure.ratio):>8} {interval:<20} {figure.verdict}: {figure.progress}"
        )
    return lines


def report_lines(found: LongExperimentStatus) -> list[str]:
    """How the long experiment ran, for its report: interim or ended, wall time on the union of its
    runs with the pauses named apart, budget and time spent, the machine and the commits."""
    if found.interim and found.rounds_done > found.rounds_planned:
        extra = found.rounds_done - found.rounds_planned
        state = (
            f"Interim, after {found.rounds_done} rounds: the {found.rounds_planned} planned and {extra} until "
            f"decided ({found.state})."
        )
    elif found.interim:
        state = f"Interim, after {found.rounds_done} of {found.rounds_planned} planned rounds ({found.state})."
    else:
        state = f"Ended ({found.state}: {found.state_reason or 'no reason recorded'}) after {found.rounds_done} rounds."
    lines = [f"Long experiment #{found.id}. {state}"]
    wall = found.wall
    if wall.first_start is not None and wall.last_end is not None:
        pause_text = "; ".join(
            f"{_stamp(pause.start)} to {pause.end.strftime('%H:%M')} UTC ({_duration(pause.seconds)})"
            for pause in wall.pauses
        )
        lines.append(
            f"Wall-clock span {_stamp(wall.first_start)} to {_stamp(wall.last_end)} "
            f"UTC ({wall.span_s:,.0f} s); runs ran {wall.running_s:,.0f} s of it (the union of their intervals)"
            + (
                f"; {len(wall.pauses)} pause{'s' if len(wall.pauses) != 1 else ''}: {pause_text}."
                if wall.pauses
                else "; no pause."
            )
        )
    if found.budget_s is not None:
        lines.append(
            f"Budget {found.budget_s:,.0f} s of running time ({_duration(found.budget_s)}); "
            f"spent {found.spent_s:,.0f} s "
            f"({found.spent_s / found.budget_s:.0%})."
        )
    lines.append(found.machine[:1].upper() + found.machine[1:] + ".")
    if found.commits:
        lines.append(
            "Commits: "
            + "; ".join(f"{commit} (rounds {', '.join(map(str, rounds))})" for commit, rounds in found.commits)
            + "."
        )
    return lines


def write_report(*, settings: Any, long_id: int, output_dir: Path | None = None) -> Path | None:
    """Write a reproduction's report as it stands (its plan's report folder unless ``output_dir``):
    "interim, after N of M rounds" until its plan ends, and how it ran (wall time on the union of its
    runs, pauses, budget, machine, commits). The README's path; None for a plan with no report folder."""
    from db.engine import get_engine
    from lab.report.reproduction import experiment_meta, report_from_experiments

    engine = get_engine(settings.resolved_database_url)
    with Session(engine) as session:
        long_experiment = plans.get(session, long_id)
        folder = output_dir or (
            Path(long_experiment.plan["report_dir"]) if long_experiment.plan.get("report_dir") else None
        )
        if folder is None:
            return None
        found = status(session, long_id)
        meta = {
            experiment.preset or experiment.name: experiment_meta(
                ExperimentSpec.model_validate(experiment.spec), experiment.id, experiment.frozen_rules
            )
            for experiment in plans.experiments_of(session, long_id)
        }
        command = str(long_experiment.plan.get("command") or "")
    written, _ = report_from_experiments(
        settings=settings,
        experiments_meta=meta,
        output_dir=folder,
        command=command or None,
        plan_lines=report_lines(found),
    )
    return written["README.md"]
