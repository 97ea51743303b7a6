"""Baselines: mark a run or an experiment as the baseline of its configuration, find the
baseline a spec is gated against, and the later runs of a configuration.

A configuration is a run spec without its random seed (:mod:`lab.specs.configuration`); an
experiment with a grid has one per cell, so marking it marks each cell's configuration with
that cell's done runs. The pure comparison is :mod:`lab.analysis.regression`'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from sqlalchemy.orm import Session

from db import baselines as baseline_store
from db import store
from db.documents import JsonObject, section_of
from db.models import Baseline, Run, RunStatus
from lab import backends
from lab.analysis.compare import RunRecord
from lab.analysis.regression import GateVerdict, Threshold, change_rows, judge, verdict_of
from lab.analysis.sample_gate import SAMPLE_FIGURES, sample_change
from lab.analysis.trends import TrendPoint, trend_points
from lab.measurement.request_figures import RequestFiguresMissing, load_request_figures
from lab.specs.configuration import (
    configuration_differences,
    configuration_key,
    configuration_label,
    experiment_configurations,
    run_configuration,
)
from lab.specs.schema import ExperimentSpec

SUBJECT_PATTERN = re.compile(r"(?:(run|experiment):)?([0-9]{1,19})")
AUTO = "auto"


class BaselineError(ValueError):
    """A baseline that cannot be used or marked; the message names what is wrong."""


@dataclass(frozen=True)
class Subject:
    """A run (``run:12`` or ``12``) or an experiment (``experiment:3``) named on the command line."""

    kind: str
    id: int

    def __str__(self) -> str:
        return f"{self.kind} #{self.id}"


def parse_subject(text: str) -> Subject:
    """``12`` or ``run:12`` -> run 12; ``experiment:3`` -> experiment 3; BaselineError otherwise."""
    match = SUBJECT_PATTERN.fullmatch(text.strip())
    if match is None or int(match.group(2)) < 1:
        raise BaselineError(f"{text[:40]!r} names no run or experiment: use a run id (12 or run:12) or experiment:ID")
    return Subject(match.group(1) or "run", int(match.group(2)))


def subject_runs(*, session: Session, subject: Subject) -> list[Run]:
    """The runs of a run or an experiment (all states); BaselineError when it does not exist."""
    if subject.kind == "run":
        run = store.get_run(session=session, run_id=subject.id)
        if run is None:
            raise BaselineError(f"no run with id {subject.id}")
        return [run]
    experiment = store.get_experiment(session=session, experiment_id=subject.id)
    if experiment is None:
        raise BaselineError(f"no experiment with id {subject.id}")
    return list(experiment.runs)


def done_by_configuration(*, subject: Subject, runs: Sequence[Run]) -> dict[str, list[Run]]:
    """The done runs grouped by configuration key; BaselineError for a run that is not done,
    or an experiment none of whose runs is."""
    if subject.kind == "run" and runs[0].status != RunStatus.DONE:
        raise BaselineError(f"run #{subject.id} is {runs[0].status}, not done: only done runs can be a baseline")
    groups: dict[str, list[Run]] = {}
    for run in runs:
        if run.status == RunStatus.DONE:
            groups.setdefault(configuration_key(run.spec), []).append(run)
    if not groups:
        raise BaselineError(f"{subject} has no done run: only done runs can be a baseline")
    return groups


def mark_baseline(*, session: Session, subject: Subject) -> list[Baseline]:
    """Make the subject's done runs the baseline of each configuration they ran (one per grid
    cell of an experiment), replacing earlier ones. Commits."""
    groups = done_by_configuration(subject=subject, runs=subject_runs(session=session, subject=subject))
    marked = []
    for key, runs in groups.items():
        marked.append(
            baseline_store.set_baseline(
                session=session,
                configuration_key=key,
                configuration=run_configuration(runs[0].spec),
                run_ids=[run.id for run in runs],
                experiment_id=subject.id if subject.kind == "experiment" else None,
                run_id=subject.id if subject.kind == "run" else None,
            )
        )
    return marked


def clear_baselines(*, session: Session, subject: Subject) -> int:
    """Remove the baselines of the configurations the subject's runs ran; how many. Commits."""
    keys = {configuration_key(run.spec) for run in subject_runs(session=session, subject=subject)}
    return sum(baseline_store.clear_baseline(session=session, configuration_key=key) for key in keys)


def baseline_label(baseline: Baseline) -> str:
    """``experiment #3 (3 runs)`` or ``run #12``: what was marked."""
    if baseline.experiment_id is not None:
        runs = len(baseline.run_ids)
        return f"experiment #{baseline.experiment_id} ({runs} run{'' if runs == 1 else 's'})"
    return f"run #{baseline.run_id}"


def baseline_of_run(*, session: Session, run: Run) -> Baseline | None:
    """The baseline of the run's configuration, if one is marked."""
    return baseline_store.get_baseline(session=session, configuration_key=configuration_key(run.spec))


def baseline_records(*, session: Session, baseline: Baseline) -> list[RunRecord]:
    """The run records of the baseline's runs that still exist and are done."""
    runs = store.list_runs(session=session, run_ids=list(baseline.run_ids), newest_first=False)
    return [RunRecord.of(run) for run in runs if run.status == RunStatus.DONE]


def runs_of_configuration(*, session: Session, configuration: JsonObject) -> list[Run]:
    """Every done run of a configuration, oldest first."""
    key = configuration_key(configuration)
    candidates = baseline_store.done_runs_like(
        session=session,
        backend=str(configuration.get("backend")),
        model=str(configuration.get("model")),
        workload=str(section_of(configuration, "workload").get("kind")),
        max_tokens=int(max_tokens) if isinstance(max_tokens := configuration.get("max_tokens"), (int, float)) else 0,
    )
    return [run for run in candidates if configuration_key(run.spec) == key]


def later_groups(
    *, session: Session, baseline: Baseline, only_run_ids: Collection[int] | None = None
) -> list[tuple[str, list[RunRecord]]]:
    """The done runs of the baseline's configuration made after its runs (only those of
    ``only_run_ids`` when given), grouped by experiment (label, run records), oldest first."""
    newest = max(baseline.run_ids, default=0)
    groups: dict[str, list[RunRecord]] = {}
    for run in runs_of_configuration(session=session, configuration=baseline.configuration):
        if run.id > newest and (only_run_ids is None or run.id in only_run_ids):
            label = f"experiment #{run.experiment_id}" if run.experiment_id is not None else f"run #{run.id}"
            groups.setdefault(label, []).append(RunRecord.of(run))
    return list(groups.items())


@dataclass
class GateBaseline:
    """What a gated spec is compared against: per configuration key, its cell label and the
    baseline's run records; ``description`` says where they come from. ``imported_run_id``:
    the baseline is one run imported from another tool, compared on per-request samples."""

    description: str
    cells: dict[str, tuple[str, list[RunRecord]]] = field(default_factory=dict)
    imported_run_id: int | None = None


# Loads a run's per-request values of one series ("latency", "ttft", "tpot"), empty without any.
SampleLoader = Callable[[int, str], Sequence[float | None]]


def resolve_gate_baseline(*, session: Session, spec: ExperimentSpec, choice: str) -> GateBaseline:
    """The baseline ``--baseline`` names for every cell of ``spec``: ``auto`` (each cell's marked
    baseline) or a run or experiment of the same configurations; BaselineError otherwise."""
    cells = experiment_configurations(spec)
    if choice.strip() == AUTO:
        return _marked_baselines(session=session, spec=spec, cells=cells)
    subject = parse_subject(choice)
    runs = subject_runs(session=session, subject=subject)
    groups = done_by_configuration(subject=subject, runs=runs)
    if subject.kind == "run" and runs[0].source_tool:
        # Another tool's run has no lab configuration to match: every cell is compared with it.
        record = RunRecord.of(runs[0])
        return GateBaseline(
            description=f"{subject} (imported from {runs[0].source_tool})",
            cells={key: (label, [record]) for key, label in cells.items()},
            imported_run_id=subject.id,
        )
    resolved = GateBaseline(description=str(subject))
    for key, label in cells.items():
        if key not in groups and key in {configuration_key(run.spec) for run in runs}:
            raise BaselineError(f"{subject} has no done run of {_cell(spec, label)}'s configuration")
        if key not in groups:
            other = next(iter(groups.values()))[0]
            raise BaselineError(
                f"{subject} is a baseline of another configuration than {_cell(spec, label)} "
                f"(it differs in {differences_text(other.spec, spec, label)})"
            )
        resolved.cells[key] = (label, [RunRecord.of(run) for run in groups[key]])
    return resolved


def _marked_baselines(*, session: Session, spec: ExperimentSpec, cells: dict[str, str]) -> GateBaseline:
    described = set()
    resolved = GateBaseline(description="")
    for key, label in cells.items():
        baseline = baseline_store.get_baseline(session=session, configuration_key=key)
        if baseline is None:
            raise BaselineError(
                f"no baseline is marked for {_cell(spec, label)}'s configuration: mark one with "
                "`python -m lab runs baseline ID` (a run, or experiment:ID), or name one with "
                "--baseline ID"
            )
        records = baseline_records(session=session, baseline=baseline)
        if not records:
            raise BaselineError(
                f"the baseline of {_cell(spec, label)} ({baseline_label(baseline)}) has no done run left"
            )
        resolved.cells[key] = (label, records)
        described.add(baseline_label(baseline))
    resolved.description = "the marked baseline: " + ", ".join(sorted(described))
    return resolved


def _cell(spec: ExperimentSpec, label: str) -> str:
    return f"cell {label!r}" if spec.grid else "the spec"


def differences_text(stored_spec: JsonObject, spec: ExperimentSpec, label: str) -> str:
    """The settings where a stored run's configuration and a spec's cell differ, shortly."""
    cell_spec = next(run_spec for cell_label, run_spec in spec.distinct_cells() if cell_label == label)
    differences = configuration_differences(run_configuration(stored_spec), run_configuration(cell_spec))
    return "; ".join(differences[:3]) + (f" and {len(differences) - 3} more" if len(differences) > 3 else "")


def gate_verdicts(
    *, baseline: GateBaseline, thresholds: Sequence[Threshold], runs: Sequence[Run], samples: SampleLoader | None = None
) -> list[GateVerdict]:
    """Every watched figure of every cell: the new runs' done values against the baseline's
    (against an imported run, their requests against its requests, read with ``samples``)."""
    new_by_key: dict[str, list[RunRecord]] = {}
    for run in runs:
        if run.status == RunStatus.DONE:
            new_by_key.setdefault(configuration_key(run.spec), []).append(RunRecord.of(run))
    if baseline.imported_run_id is not None:
        return imported_verdicts(baseline=baseline, thresholds=thresholds, new_by_key=new_by_key, samples=samples)
    verdicts = []
    for key, (label, baseline_runs) in baseline.cells.items():
        new_runs = new_by_key.get(key, [])
        for threshold in thresholds:
            verdicts.append(
                judge(
                    label,
                    threshold,
                    [r.get(threshold.figure) for r in baseline_runs],
                    [r.get(threshold.figure) for r in new_runs],
                )
            )
    return verdicts


def stored_samples(session: Session) -> SampleLoader:
    """A :data:`SampleLoader` reading the runs' stored per-request figures (empty when a run kept none)."""

    def load(run_id: int, series: str) -> Sequence[float | None]:
        try:
            figures = load_request_figures(session=session, run_id=run_id)
        except RequestFiguresMissing:
            return []
        values = figures.values(series)
        # Latencies of failed requests are kept but never judged.
        return [v for v, ok in zip(values, figures.ok, strict=False) if ok] if series == "latency" else values

    return load


def imported_verdicts(
    *,
    baseline: GateBaseline,
    thresholds: Sequence[Threshold],
    new_by_key: dict[str, list[RunRecord]],
    samples: SampleLoader | None,
) -> list[GateVerdict]:
    """The gate against one imported run: each cell's new runs' requests against its requests."""
    imported = baseline.imported_run_id
    assert imported is not None  # only called for an imported baseline
    name = f"run #{imported} ({baseline.description.split('(', 1)[-1].rstrip(')')})"
    verdicts = []
    for key, (label, _) in baseline.cells.items():
        new_ids = [record["run_id"] for record in new_by_key.get(key, [])]
        for threshold in thresholds:
            series = SAMPLE_FIGURES.get(threshold.figure, ("", ""))[0]
            if samples is None or not series:
                change = sample_change(threshold.figure, [], [], baseline_name=name)
            else:
                later = [value for run_id in new_ids for value in samples(run_id, series)]
                change = sample_change(threshold.figure, samples(imported, series), later, baseline_name=name)
            verdicts.append(verdict_of(label, threshold, change))
    return verdicts


class KnownConfiguration(TypedDict):
    """A configuration the store has done runs of: its key, label, the configuration, how many
    runs and whether a baseline is marked for it."""

    key: str
    label: str
    configuration: JsonObject
    runs: int
    has_baseline: bool


def known_configurations(*, session: Session, limit: int = 2000) -> list[KnownConfiguration]:
    """The configurations of the newest done runs, baselines first then by run count: key,
    label, configuration, runs and whether it has a baseline."""
    marked = {row.configuration_key for row in baseline_store.list_baselines(session=session)}
    found: dict[str, KnownConfiguration] = {}
    for run in store.list_runs(session=session, statuses=[RunStatus.DONE], limit=limit):
        key = configuration_key(run.spec)
        if key not in found:
            configuration = run_configuration(run.spec)
            found[key] = {
                "key": key,
                "label": configuration_label(configuration),
                "configuration": configuration,
                "runs": 0,
                "has_baseline": key in marked,
            }
        found[key]["runs"] += 1
    return sorted(found.values(), key=lambda item: (not item["has_baseline"], -item["runs"]))


@dataclass(frozen=True)
class BaselineComparison:
    """A configuration's baseline and every later group of its runs against it (rows of
    :func:`~lab.analysis.regression.change_rows`)."""

    configuration_key: str
    configuration_label: str
    baseline_label: str
    baseline_run_ids: list[int]
    rows: list[dict[str, Any]]


def comparison_of(
    *, session: Session, baseline: Baseline, only_run_ids: Collection[int] | None = None
) -> BaselineComparison:
    """The baseline's later runs (only those of ``only_run_ids`` when given) against it, each
    headline figure's change with its interval."""
    rows = change_rows(
        baseline_records(session=session, baseline=baseline),
        later_groups(session=session, baseline=baseline, only_run_ids=only_run_ids),
    )
    return BaselineComparison(
        baseline.configuration_key,
        configuration_label(baseline.configuration),
        baseline_label(baseline),
        list(baseline.run_ids),
        rows,
    )


def comparisons_for_runs(*, session: Session, run_ids: Sequence[int], limit: int = 10) -> list[BaselineComparison]:
    """The baseline comparisons of the configurations these runs ran (those with a baseline):
    only these runs against it (Compare shows what was chosen, not every later experiment)."""
    keys = dict.fromkeys(
        configuration_key(run.spec)
        for run in store.list_runs(session=session, run_ids=list(run_ids), newest_first=False)
    )
    found = []
    for key in keys:
        baseline = baseline_store.get_baseline(session=session, configuration_key=key)
        if baseline is not None:
            found.append(comparison_of(session=session, baseline=baseline, only_run_ids=set(run_ids)))
        if len(found) >= limit:
            break
    return found


def configuration_trend(*, session: Session, configuration: JsonObject, figure: str) -> list[TrendPoint]:
    """``figure`` of every done run of the configuration, oldest first, with what each ran with."""
    runs = runs_of_configuration(session=session, configuration=configuration)
    baseline = baseline_store.get_baseline(session=session, configuration_key=configuration_key(configuration))
    try:
        packages = backends.get_backend(str(configuration.get("backend"))).packages
    except ValueError:  # a kind no longer registered: its versions cannot be named
        packages = ()
    return trend_points(
        [RunRecord.of(run) for run in runs],
        [run.environment for run in runs],
        figure=figure,
        packages=packages,
        baseline_run_ids=baseline.run_ids if baseline else (),
    )
