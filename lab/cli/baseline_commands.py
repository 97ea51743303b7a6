"""Experiments as files, baselines and the regression gate on the command line:

    python -m lab run --spec FILE [--baseline ID|auto --fail-on-regression FIGURE=PERCENT ...]
    python -m lab runs spec ID [--output FILE]      a run's (ID, run:ID) or experiment's (experiment:ID) spec file
    python -m lab runs baseline ID [--clear]        mark (or unmark) a run or experiment as its configuration's baseline
    python -m lab runs baselines [--json]           the marked baselines

The gate's exit codes are :mod:`lab.analysis.regression`'s: 3 a regression, 4 too few runs to
decide (never a pass), 1 runs that did not finish, 2 bad input (nothing queued).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from db import baselines as baseline_store
from db import store
from db.documents import JsonObject
from db.models import Run, RunStatus
from lab import baselines
from lab.analysis.regression import GateInputError, Threshold, gate_exit_code, gate_summary, parse_thresholds
from lab.baselines import BaselineError, GateBaseline, Subject
from lab.context import LabContext
from lab.specs.configuration import configuration_label
from lab.specs.schema import ExperimentSpec, SpecError, load_preset
from lab.specs.spec_files import experiment_spec_document, load_spec_file, run_spec_document, spec_file_text


def add_gate_arguments(run: argparse.ArgumentParser) -> None:
    """``--baseline`` and ``--fail-on-regression`` on ``run``."""
    run.add_argument(
        "--baseline",
        metavar="ID|auto",
        help="compare with this baseline: a run (12, run:12), experiment:ID, or auto (the baseline "
        "marked for each cell's configuration)",
    )
    run.add_argument(
        "--fail-on-regression",
        action="append",
        metavar="FIGURE=PERCENT",
        help="with --baseline: exit 3 when FIGURE is worse than the baseline by more than PERCENT and "
        "significantly so, e.g. output_tok_per_s=5 or latency_p95_s=10 (repeatable); exit 4 "
        "when there are too few runs to decide",
    )


def add_spec_and_baseline_commands(runs_actions: Any, id_help: str) -> None:
    """``runs spec``, ``runs baseline`` and ``runs baselines``."""
    spec = runs_actions.add_parser("spec", help="write a run's or experiment's spec file (JSON), to rerun with --spec")
    spec.add_argument("id", metavar="ID", help=id_help)
    spec.add_argument("--output", metavar="FILE", help="write it here (.json) instead of printing it")
    mark = runs_actions.add_parser("baseline", help="mark a run or experiment as the baseline of its configuration")
    mark.add_argument("id", metavar="ID", help=id_help)
    mark.add_argument("--clear", action="store_true", help="remove the baselines of its configurations instead")
    listing = runs_actions.add_parser("baselines", help="list the marked baselines")
    listing.add_argument("--json", action="store_true")


def load_experiment(args: argparse.Namespace, overrides: list[tuple[str, Any]]) -> ExperimentSpec:
    """The experiment ``run`` was given: a preset, or a spec file (at the quick scale with
    ``--quick`` or ``--scale quick``)."""
    quick = bool(args.quick) or getattr(args, "scale", None) == "quick"
    if getattr(args, "spec", None):
        return load_spec_file(Path(args.spec), quick=quick, overrides=overrides)
    return load_preset(args.preset, quick=quick, overrides=overrides)


@dataclass
class Gate:
    """What ``run`` compares its runs with, resolved before anything is queued."""

    baseline: GateBaseline
    thresholds: list[Threshold]


def prepare_gate(args: argparse.Namespace, spec: ExperimentSpec, context: LabContext) -> Gate | None:
    """The gate ``--baseline`` and ``--fail-on-regression`` ask for (None without them);
    GateInputError or BaselineError, before anything is queued, when they cannot be used."""
    limits = getattr(args, "fail_on_regression", None) or []
    choice = getattr(args, "baseline", None)
    if not limits and choice is None:
        return None
    if choice is None:
        raise GateInputError("--fail-on-regression needs --baseline ID|auto (what to compare with)")
    if not limits:
        raise GateInputError(
            "--baseline needs at least one --fail-on-regression FIGURE=PERCENT (e.g. output_tok_per_s=5)"
        )
    thresholds = parse_thresholds(limits)
    with Session(context.engine) as session:
        resolved = baselines.resolve_gate_baseline(session=session, spec=spec, choice=choice)
    return Gate(baseline=resolved, thresholds=thresholds)


def report_gate(
    gate: Gate, runs: list[Run], records: Sequence[Mapping[str, Any]], *, as_json: bool, session: Session | None = None
) -> int:
    """Judge the finished runs against the baseline, print one line per watched figure (or the
    JSON document) and return the exit code (``session``: to read per-request samples, which
    an imported baseline is compared on)."""
    samples = baselines.stored_samples(session) if session is not None else None
    verdicts = baselines.gate_verdicts(baseline=gate.baseline, thresholds=gate.thresholds, runs=runs, samples=samples)
    exit_code = gate_exit_code(verdicts, runs_all_done=all(run.status == RunStatus.DONE for run in runs))
    if as_json:
        print(
            json.dumps(
                {
                    "runs": records,
                    "gate": {
                        "baseline": gate.baseline.description,
                        "exit_code": exit_code,
                        "summary": gate_summary(exit_code),
                        "verdicts": [verdict.as_dict() for verdict in verdicts],
                    },
                },
                indent=2,
                default=str,
            )
        )
        return exit_code
    with_cell = len(gate.baseline.cells) > 1
    print(f"against {gate.baseline.description}:")
    for verdict in verdicts:
        print("  " + verdict.line(with_cell=with_cell))
    print(gate_summary(exit_code))
    return exit_code


def cmd_runs_spec(args: argparse.Namespace, context: LabContext) -> int:
    """Print or write the spec file of a run or an experiment."""
    try:
        subject = baselines.parse_subject(args.id)
        with Session(context.engine) as session:
            document = spec_document(session=session, subject=subject)
    except BaselineError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    text = spec_file_text(document)
    if not args.output:
        sys.stdout.write(text)
        return 0
    if not args.output.lower().endswith(".json"):
        print("error: spec files are exported as JSON (TOML has no null): name the file .json", file=sys.stderr)
        return 2
    try:
        Path(args.output).write_text(text, encoding="utf-8")
    except OSError as error:
        print(f"error: cannot write {args.output}: {error.strerror or error}", file=sys.stderr)
        return 1
    print(
        f"{subject}'s spec written to {args.output}; rerun it with python -m lab run --spec {args.output}",
        file=sys.stderr,
    )
    return 0


def spec_document(*, session: Session, subject: Subject) -> JsonObject:
    """The spec file of ``subject`` (BaselineError when it does not exist)."""
    if subject.kind == "experiment":
        experiment = store.get_experiment(session=session, experiment_id=subject.id)
        if experiment is None:
            raise BaselineError(f"no experiment with id {subject.id}")
        return experiment_spec_document(stored_spec=experiment.spec)
    run = baselines.subject_runs(session=session, subject=subject)[0]
    return run_spec_document(
        run_id=run.id,
        stored_spec=run.spec,
        cell_label=run.cell_label,
        experiment_name=run.experiment.name if run.experiment else None,
    )


def cmd_runs_baseline(args: argparse.Namespace, context: LabContext) -> int:
    """Mark (or, with ``--clear``, unmark) a run or experiment as its configuration's baseline."""
    try:
        subject = baselines.parse_subject(args.id)
        with Session(context.engine) as session:
            if args.clear:
                removed = baselines.clear_baselines(session=session, subject=subject)
                print(f"{removed} baseline(s) removed ({subject}'s configurations)")
                return 0
            marked = baselines.mark_baseline(session=session, subject=subject)
            lines = [
                f"  {configuration_label(row.configuration)}: {len(row.run_ids)} run(s) "
                f"(#{', #'.join(map(str, row.run_ids))})"
                for row in marked
            ]
    except BaselineError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"{subject} is now the baseline of {len(lines)} configuration(s):")
    print("\n".join(lines))
    return 0


def cmd_runs_baselines(args: argparse.Namespace, context: LabContext) -> int:
    """List the marked baselines."""
    with Session(context.engine) as session:
        rows = [
            {
                "configuration_key": row.configuration_key,
                "configuration": configuration_label(row.configuration),
                "marked": baselines.baseline_label(row),
                "run_ids": row.run_ids,
                "marked_at": row.marked_at.isoformat(),
            }
            for row in baseline_store.list_baselines(session=session)
        ]
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print("no baseline marked yet: python -m lab runs baseline ID")
    for row in [] if args.json else rows:
        print(f"{row['configuration_key'][:12]}  {row['marked']:<28} {row['configuration']}")
    return 0


HANDLERS = {"spec": cmd_runs_spec, "baseline": cmd_runs_baseline, "baselines": cmd_runs_baselines}
GATE_INPUT_ERRORS = (GateInputError, BaselineError, SpecError)
