"""``python -m lab run`` and ``python -m lab runs list|export|slo|recover``: queue a preset or spec file,
read stored runs, write the final states runs kept in their folders during a database outage
(``runs spec|baseline|baselines`` and the gate: ``baseline_commands``)."""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from db import store
from db.models import RunStatus
from lab.analysis.compare import LAB_SOURCE, RunRecord
from lab.cli.baseline_commands import GATE_INPUT_ERRORS, load_experiment, prepare_gate, report_gate
from lab.cli.baseline_commands import HANDLERS as SPEC_AND_BASELINE_HANDLERS
from lab.cli.scale_options import scale_and_rounds
from lab.context import LabContext
from lab.measurement.results import RunResults
from lab.queue import experiments
from lab.queue.rounds import adapted_spec
from lab.queue.run_waiter import WorkerUnusableError
from lab.queue.submit import open_waiter
from lab.run.final_state import PendingFinalStates
from lab.specs.schema import SpecError, UntilDecided, parse_set_option
from lab.user_input.validation import ModelNameError, check_model_on_machine


def split_labels(text: str) -> list[str]:
    """``gpu, h100`` -> ``["gpu", "h100"]``."""
    return [part.strip() for part in text.split(",") if part.strip()]


def cmd_run(args: argparse.Namespace, context: LabContext) -> int:
    """Queue a preset's or spec file's runs, wait for them and print their figures (and the grid's ratios;
    with ``--baseline``, the gate's verdicts and exit code instead; with ``--until-decided``, rounds
    of the undecided comparisons' cells after the planned ones, within ``--budget``)."""
    try:
        scale, until_decided = scale_and_rounds(args)
        overrides = [parse_set_option(option) for option in args.set or []]
        if args.repeats:
            overrides.append(("repeats", args.repeats))
        if args.requires:
            overrides.append(("requires", split_labels(args.requires)))
        if args.worker:
            overrides.append(("worker", args.worker))
        spec = load_experiment(args, overrides)
        for model in {run_spec.model for _, _, run_spec in spec.expand() if run_spec.backend_kind.managed}:
            check_model_on_machine(model)  # refused now, not a minute into the run
        gate = prepare_gate(args, spec, context)  # a baseline to compare with, checked before queueing
    except (SpecError, ModelNameError, *GATE_INPUT_ERRORS) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    engine = context.engine
    with Session(engine) as session:
        if scale == "adapted":
            spec = adapted_spec(session, spec, max_cell_s=args.max_cell_s)
    try:
        if until_decided is not None:
            run_ids = _run_until_decided(context, spec, until_decided, tag=args.tag or "", quiet=args.json)
        else:
            with Session(engine) as session:
                experiment = experiments.enqueue_experiment(
                    session=session, spec=spec, tags=args.tag or "", priority=getattr(args, "priority", 0)
                )
                run_ids = [run.id for run in experiment.runs]
                experiment_id = experiment.id
            if not args.json:
                note = f" ({spec.scale_note})" if spec.scale_note else ""
                print(f"experiment #{experiment_id}: {spec.name}: {len(run_ids)} runs queued{note}", file=sys.stderr)
            wait_for_submitted_runs(
                context, run_ids, local=getattr(args, "local", False), quiet=getattr(args, "quiet", False)
            )
    except WorkerUnusableError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    with Session(engine) as session:
        runs = store.list_runs(session=session, run_ids=run_ids, newest_first=False)
        records = [RunRecord.of(run) for run in runs]
        run_specs = [run.spec for run in runs]
        if gate is not None:
            if not args.json:
                print_records(records, as_json=False)
            return report_gate(gate, runs, records, as_json=args.json, session=session)
    print_records(records, as_json=args.json)
    if not args.json:
        print_grid_ratios(records, run_specs, list(spec.grid))
    return 0 if all(r["status"] == RunStatus.DONE for r in records) else 1


def _run_until_decided(context: LabContext, spec: Any, until: UntilDecided, *, tag: str, quiet: bool) -> list[int]:
    """A long experiment of one grid (lab.queue.long_experiments): planned rounds, then rounds of
    the cells whose compared ratios are undecided within the budget, driven by the worker so a stop
    of the lab loses nothing; followed here until it ends. Its runs' ids."""
    from lab.queue import long_experiments
    from lab.queue.follow import follow

    long_id = long_experiments.create(
        engine=context.engine,
        kind=long_experiments.GRID,
        name=spec.name,
        specs={spec.name: spec},
        until=until,
        allow_dirty=True,
        tags=tag,
    )
    if not quiet:
        note = f" ({spec.scale_note})" if spec.scale_note else ""
        print(f"long experiment #{long_id}: {spec.name}, until decided{note}", file=sys.stderr)
    try:
        follow(context, long_id, out=io.StringIO() if quiet else sys.stderr)
    except KeyboardInterrupt:
        print(f"\nstopped following long experiment #{long_id} (lab reproduce --status {long_id})", file=sys.stderr)
        raise
    with Session(context.engine) as session:
        return [run.id for experiment in long_experiments.experiments_of(session, long_id) for run in experiment.runs]


def wait_for_submitted_runs(context: LabContext, run_ids: list[int], *, local: bool, quiet: bool = False) -> None:
    """Wait for the queued runs: on the shared queue when live workers share the database
    (printing which worker took each), else executing them here (``local`` forces that). On a
    terminal a live progress line replaces the per-run lines; ``quiet``: neither."""
    from lab.cli.progress import RunsProgress

    progress = RunsProgress(context.engine, run_ids)
    shown = progress.shown and not quiet
    with open_waiter(context, local=local, quiet=quiet or shown) as waiter:
        if shown:
            with progress:
                waiter.wait(run_ids)
        else:
            waiter.wait(run_ids)


def print_grid_ratios(records: Sequence[Mapping[str, Any]], run_specs: list[dict[str, Any]], axes: list[str]) -> None:
    """Cells that differ in one grid setting, as ratios of their req/s and output tok/s (the
    reports' estimator), each with its 95% interval (from two repeats a side) and Welch's test."""
    from lab.analysis.compare import grid_comparisons

    lines = []
    for figure, label in (("req_per_s", "req/s"), ("output_tok_per_s", "output tok/s")):
        for row in grid_comparisons(records, run_specs, axes, figure):
            if row["ratio"] is not None:
                interval = (
                    ""
                    if row["ratio_ci95_low"] is None
                    else f" [95% CI {row['ratio_ci95_low']:,.2f}x, {row['ratio_ci95_high']:,.2f}x]"
                )
                lines.append(f"  {label}: {row['cell']}: {row['ratio']:,.2f}x{interval} ({row['significance']})")
    if lines:
        print(
            "ratios over repeats, cells differing in one setting: the geometric mean of per-round ratios "
            "when the cells ran in the same rounds, else the ratio of means, each the centre of its "
            "interval (on a log scale):"
        )
        print("\n".join(lines))


def print_records(records: Sequence[Mapping[str, Any]], *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(records, indent=2, default=str))
        return
    header = (
        f"{'id':>4} {'backend':<15} {'cell':<28} {'status':<11} "
        f"{'req/s':>8} {'out tok/s':>9} {'avg s':>7} {'p95 s':>7} {'fail':>5}"
    )
    print(header)
    for r in records:

        def fmt(value: Any, spec: str) -> str:
            return format(value, spec) if isinstance(value, (int, float)) else "-"

        # An imported run is marked where its state is read: "imported", its tool in --json's source.
        status = "imported" if r.get("source") not in (None, LAB_SOURCE) and r["status"] == "done" else r["status"]
        results = RunResults.of_record(r)
        print(
            f"{r['run_id']:>4} {r['backend']:<15} {r['cell_label'][:28]:<28} {status:<11} "
            f"{fmt(results.req_per_s, '8.2f')} {fmt(results.output_tok_per_s, '9.1f')} "
            f"{fmt(results.latency_avg_s, '7.2f')} {fmt(results.latency_p95_s, '7.2f')} "
            f"{fmt(results.requests_failed, '5d')}"
        )


def cmd_runs(args: argparse.Namespace, context: LabContext) -> int:
    from lab.analysis.safe_csv import records_to_csv

    if args.action == "slo":
        return cmd_runs_slo(args, context)
    if args.action in SPEC_AND_BASELINE_HANDLERS:
        return SPEC_AND_BASELINE_HANDLERS[args.action](args, context)
    if args.action == "recover":
        return cmd_runs_recover(context)
    with Session(context.engine) as session:
        runs = store.list_runs(session=session, run_ids=args.ids or None, limit=getattr(args, "limit", None))
        records = [RunRecord.of(run) for run in runs]
    if args.action == "list":
        print_records(records, as_json=args.json)
        return 0
    if args.ids and len(records) != len(set(args.ids)):
        missing = sorted(set(args.ids) - {r["run_id"] for r in records})
        print(f"error: no run with id {', '.join(map(str, missing))}", file=sys.stderr)
        return 2
    if args.csv == "-":
        sys.stdout.write(records_to_csv(records))
        return 0
    try:
        Path(args.csv).write_text(records_to_csv(records), encoding="utf-8")
    except OSError as error:  # a folder, a missing or read-only folder, a full disk
        print(f"error: cannot write {args.csv}: {error.strerror or error}", file=sys.stderr)
        return 1
    print(f"{len(records)} runs written to {args.csv}", file=sys.stderr)
    return 0


def cmd_runs_recover(context: LabContext) -> int:
    """Write the final states (with their figures) that runs kept in their folders because the
    database could not be reached when they ended; a worker does the same when it can."""
    pending = PendingFinalStates()
    found = pending.load(context.settings.runs_dir)
    written = pending.save(context.engine)
    for run_id in written:
        print(f"run {run_id}: final state written")
    left = sorted(set(found) - set(written) - set(pending.remaining()))
    if left:
        print(f"runs {', '.join(map(str, left))}: already final, their kept states were set aside")
    if len(pending):
        print(
            f"error: the database did not take the final states of runs "
            f"{', '.join(map(str, pending.remaining()))}; try again when it answers",
            file=sys.stderr,
        )
        return 1
    if not found:
        print("no final state waits in the run folders")
    return 0


def cmd_runs_slo(args: argparse.Namespace, context: LabContext) -> int:
    """Evaluate one stored run against an SLO from its per-request figures."""
    from lab.analysis import run_slo
    from lab.analysis.slo import SloError, parse_slo
    from lab.measurement import request_figures

    try:
        slo = parse_slo(args.slo)
    except SloError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    engine = context.engine
    with Session(engine) as session:
        try:
            evaluation = run_slo.evaluate_run(session=session, run_id=args.id, slo=slo)
        except (LookupError, request_figures.RequestFiguresMissing) as error:
            print(f"error: {str(error).strip(chr(39))}", file=sys.stderr)
            return 2
    if args.save:
        run_slo.save_evaluation(engine=engine, run_id=args.id, evaluation=evaluation)
    result = {
        "run_id": args.id,
        "slo": str(slo),
        "passed": evaluation.passed,
        "reason": evaluation.reason,
        "requests_total": evaluation.requests_total,
        "requests_good": evaluation.requests_good,
        "goodput_req_per_s": evaluation.goodput_req_per_s,
        "slo_attainment": evaluation.attainment,
        "failure_rate": evaluation.failure_rate,
        "limits": {o.limit.name: o.value_s for o in evaluation.limits},
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    goodput = "-" if evaluation.goodput_req_per_s is None else f"{evaluation.goodput_req_per_s:.3f}"
    attainment = "-" if evaluation.attainment is None else f"{evaluation.attainment:.1%}"
    print(
        f"run #{args.id} against {slo}: {'PASS' if evaluation.passed else 'FAIL'} ({evaluation.reason}); "
        f"goodput {goodput} req/s, attainment {attainment} ({evaluation.requests_good}/{evaluation.requests_total})"
    )
    return 0
