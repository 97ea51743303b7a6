"""The headless CLI: ``python -m lab ...`` runs the same experiments as the web lab.

    python -m lab start                       the web lab and its worker (make run)
    python -m lab services up [NAME ...]      a backend (naive, vllm, llamacpp...), redis, cache-proxy
    python -m lab services status [--json]
    python -m lab services down [NAME ...]
    python -m lab run --preset NAME [--quick] [--set key=value ...] [--json]
    python -m lab runs list [--json] [--limit N]
    python -m lab runs export [ID ...] --csv FILE
    python -m lab runs slo ID --slo latency_p95_s=10 [--json]   evaluate a stored run against an SLO
    python -m lab capacity --backend naive --backend vllm --slo latency_p95_s=10 [--by vus|rate] [--quick] [--json]
    python -m lab reproduce [--quick] [--repeats N] [--report-only]
    python -m lab worker [--name N] [--labels gpu,h100]   a queue worker alone
    python -m lab run ... [--requires gpu] [--worker N]   place the runs on a shared queue
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from collections.abc import Callable
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from db import store
from db.engine import get_engine
from db.models import RunStatus
from lab.execution import experiments
from lab.analysis.compare import run_record
from lab.context import LabContext, StorageError
from lab.execution.run_waiter import RunWaiter, WorkerUnusableError, wait_for_runs
from lab.execution.worker import stop_own_services
from lab.settings import PROJECT_ROOT, Settings, get_settings
from lab.specs.schema import SpecError, list_presets, load_preset, parse_set_option
from lab.specs.validation import ModelNameError, check_model_on_machine

# The services `services up` starts: every backend the lab manages, then the cache's two.
CACHE_SERVICE_NAMES = ("redis", "cache-proxy")


def service_names() -> list[str]:
    from lab.backends import managed_backend_names

    return [*managed_backend_names(), *CACHE_SERVICE_NAMES]


def _engine(settings: Settings):  # noqa: ANN202
    try:
        return get_engine(settings.resolved_database_url)
    except OSError as error:  # the data folder is a file, read-only, or cannot be created
        raise StorageError(str(error)) from error


# services -----------------------------------------------------------------------------

def services_up(names: list[str], settings: Settings) -> dict[str, str]:
    """Start the named services with the default model and each backend's default options.

    Without names: every backend the lab manages. The cache proxy goes in front of the
    backend named before it (the spec's default backend if none)."""
    from lab.backends import default_service_config, managed_backend_names
    from lab.specs.schema import RunSpec
    from services.catalog import cache_proxy_config, redis_config
    from services.manager import ServiceManager

    manager = ServiceManager(engine=_engine(settings), logs_dir=settings.logs_dir, worker=settings.worker_name)
    urls: dict[str, str] = {}

    def backend_up(name: str) -> str:
        return manager.ensure(name, default_service_config(name, model=settings.default_model, settings=settings))

    upstream: str | None = None
    for name in names or managed_backend_names():
        if name == "redis":
            urls[name] = manager.ensure("redis", redis_config())
        elif name == "cache-proxy":
            upstream = upstream or backend_up(RunSpec.model_fields["backend"].default)
            redis_url = urls.get("redis") or manager.ensure("redis", redis_config())
            urls[name] = manager.ensure("cache-proxy", cache_proxy_config(upstream_url=upstream, redis_url=redis_url))
        elif name in managed_backend_names():
            urls[name] = upstream = backend_up(name)
        else:
            raise SystemExit(f"unknown service {name!r}; services: {', '.join(service_names())}")
    return urls


def cmd_services(args: argparse.Namespace, settings: Settings) -> int:
    from services.manager import ServiceManager
    from services.supervisor import ServiceStartError

    unknown = [name for name in getattr(args, "names", []) if name not in service_names()]
    if unknown:
        print(f"error: unknown service {', '.join(unknown)}; services: {', '.join(service_names())}", file=sys.stderr)
        return 2
    manager = ServiceManager(engine=_engine(settings), logs_dir=settings.logs_dir, worker=settings.worker_name)
    if args.action == "up":
        try:
            urls = services_up(args.names, settings)
        except ServiceStartError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        except ValueError as error:  # a rejected or missing model
            print(f"error: {error}", file=sys.stderr)
            return 2
        for name, url in urls.items():
            print(f"{name}: {url}")
        return 0
    if args.action == "down":
        stopped = manager.stop_all(args.names or None)
        print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
        return 0
    statuses = [status.to_dict() for status in manager.status()]
    if args.json:
        print(json.dumps(statuses, indent=2))
    else:
        for status in statuses:
            print(f"{status['name']:<12} {status['state']:<10} {status['url'] or '-':<28} pid={status['pid'] or '-'}")
        if not statuses:
            print("no services recorded: python -m lab services up naive vllm")
    return 0


# runs ---------------------------------------------------------------------------------

def cmd_run(args: argparse.Namespace, settings: Settings) -> int:

    try:
        overrides = [parse_set_option(option) for option in args.set or []]
        if args.repeats:
            overrides.append(("repeats", args.repeats))
        if args.requires:
            overrides.append(("requires", split_labels(args.requires)))
        if args.worker:
            overrides.append(("worker", args.worker))
        spec = load_preset(args.preset, quick=args.quick, overrides=overrides)
        for model in {run_spec.model for _, _, run_spec in spec.expand() if run_spec.backend_kind.managed}:
            check_model_on_machine(model)  # refused now, not a minute into the run
    except (SpecError, ModelNameError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    engine = _engine(settings)
    with Session(engine) as session:
        experiment = experiments.enqueue_experiment(session=session, spec=spec, tags=args.tag or "")
        run_ids = [run.id for run in experiment.runs]
        experiment_id = experiment.id
    if not args.json:
        note = f" ({spec.scale_note})" if spec.scale_note else ""
        print(f"experiment #{experiment_id}: {spec.name}: {len(run_ids)} runs queued{note}", file=sys.stderr)
    try:
        wait_for_runs(settings=settings, run_ids=run_ids)
    except WorkerUnusableError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    with Session(engine) as session:
        runs = store.list_runs(session=session, run_ids=run_ids, newest_first=False)
        records = [run_record(run) for run in runs]
        run_specs = [run.spec for run in runs]
    print_records(records, as_json=args.json)
    if not args.json:
        print_grid_ratios(records, run_specs, list(spec.grid))
    return 0 if all(r["status"] == RunStatus.DONE for r in records) else 1


def print_grid_ratios(records: list[dict[str, Any]], run_specs: list[dict[str, Any]], axes: list[str]) -> None:
    """Cells that differ in one grid setting, as ratios of their mean req/s and output tok/s."""
    from lab.analysis.compare import grid_comparisons

    lines = []
    for figure, label in (("req_per_s", "req/s"), ("output_tok_per_s", "output tok/s")):
        for row in grid_comparisons(records, run_specs, axes, figure):
            if row["ratio"] is not None:
                lines.append(f"  {label}: {row['cell']}: {row['ratio']:,.2f}x ({row['significance']})")
    if lines:
        print("ratios of means over repeats, cells differing in one setting:")
        print("\n".join(lines))


def print_records(records: list[dict[str, Any]], *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(records, indent=2, default=str))
        return
    header = f"{'id':>4} {'backend':<15} {'cell':<28} {'status':<11} {'req/s':>8} {'out tok/s':>9} {'avg s':>7} {'p95 s':>7} {'fail':>5}"
    print(header)
    for r in records:
        def fmt(value: Any, spec: str) -> str:
            return format(value, spec) if isinstance(value, (int, float)) else "-"

        print(
            f"{r['run_id']:>4} {r['backend']:<15} {r['cell_label'][:28]:<28} {r['status']:<11} "
            f"{fmt(r['req_per_s'], '8.2f')} {fmt(r['output_tok_per_s'], '9.1f')} {fmt(r['latency_avg_s'], '7.2f')} "
            f"{fmt(r['latency_p95_s'], '7.2f')} {fmt(r['requests_failed'], '5d')}"
        )


def cmd_runs(args: argparse.Namespace, settings: Settings) -> int:
    from lab.analysis.compare import records_to_csv

    if args.action == "slo":
        return cmd_runs_slo(args, settings)
    engine = _engine(settings)
    with Session(engine) as session:
        runs = store.list_runs(session=session, run_ids=args.ids or None, limit=getattr(args, "limit", None))
        records = [run_record(run) for run in runs]
    if args.action == "list":
        print_records(records, as_json=args.json)
        return 0
    if args.ids and len(records) != len(set(args.ids)):
        missing = sorted(set(args.ids) - {r["run_id"] for r in records})
        print(f"error: no run with id {', '.join(map(str, missing))}", file=sys.stderr)
        return 2
    try:
        Path(args.csv).write_text(records_to_csv(records), encoding="utf-8")
    except OSError as error:  # a folder, a missing or read-only folder, a full disk
        print(f"error: cannot write {args.csv}: {error.strerror or error}", file=sys.stderr)
        return 1
    print(f"{len(records)} runs written to {args.csv}", file=sys.stderr)
    return 0


def cmd_runs_slo(args: argparse.Namespace, settings: Settings) -> int:
    """Evaluate one stored run against an SLO from its per-request figures."""
    from lab.measurement import request_figures
    from lab.analysis.slo import SloError, parse_slo

    try:
        slo = parse_slo(args.slo)
    except SloError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    engine = _engine(settings)
    with Session(engine) as session:
        try:
            evaluation = request_figures.evaluate_run(session=session, run_id=args.id, slo=slo)
        except (LookupError, request_figures.RequestFiguresMissing) as error:
            print(f"error: {str(error).strip(chr(39))}", file=sys.stderr)
            return 2
    if args.save:
        request_figures.save_evaluation(engine=engine, run_id=args.id, evaluation=evaluation)
    result = {
        "run_id": args.id, "slo": str(slo), "passed": evaluation.passed, "reason": evaluation.reason,
        "requests_total": evaluation.requests_total, "requests_good": evaluation.requests_good,
        "goodput_req_per_s": evaluation.goodput_req_per_s, "slo_attainment": evaluation.attainment,
        "failure_rate": evaluation.failure_rate,
        "limits": {o.limit.name: o.value_s for o in evaluation.limits},
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    goodput = "-" if evaluation.goodput_req_per_s is None else f"{evaluation.goodput_req_per_s:.3f}"
    attainment = "-" if evaluation.attainment is None else f"{evaluation.attainment:.1%}"
    print(f"run #{args.id} against {slo}: {'PASS' if evaluation.passed else 'FAIL'} ({evaluation.reason}); "
          f"goodput {goodput} req/s, attainment {attainment} ({evaluation.requests_good}/{evaluation.requests_total})")
    return 0


# Capacity search defaults: (full, quick). The quick scale fits a 2-core box in minutes.
CAPACITY_DEFAULTS = {
    "full": {"max_probes": 8, "probe_s": 60.0, "max_vus": 64, "max_rate": 32.0},
    "quick": {"max_probes": 6, "probe_s": 20.0, "max_vus": 16, "max_rate": 8.0},
}


def capacity_plan(args: argparse.Namespace) -> Any:
    """The CapacityPlan of ``python -m lab capacity`` arguments (validated by ``check_plan``)."""
    from lab.execution.capacity_plan import CapacityPlan
    from lab.specs.schema import RunSpec, set_dotted_lenient

    scale = "quick" if args.quick else "full"
    defaults = CAPACITY_DEFAULTS[scale]
    base: dict[str, Any] = {"workload": {"kind": "number-story", "prompts": 50}, "max_tokens": 128}
    if args.quick:
        base["load"] = {"graceful_stop_s": 15}
    if args.target_url:
        base["target_url"] = args.target_url
    for option in args.set or []:
        key, value = parse_set_option(option)
        set_dotted_lenient(base, key, value)
    if not args.target_url and any(not _is_managed(name) for name in args.backend):
        raise SpecError("external backends need --target-url (the server's base URL)")
    return CapacityPlan(
        name=args.name or f"Capacity: {', '.join(args.backend)} under {', '.join(args.slo)}",
        backends=args.backend, base=RunSpec.model_validate({**base, "backend": args.backend[0]}), slo=args.slo,
        by=args.by, min_load=args.min, max_load=args.max if args.max is not None else (
            defaults["max_vus"] if args.by == "vus" else defaults["max_rate"]),
        max_probes=args.max_probes if args.max_probes is not None else defaults["max_probes"],
        probe_s=args.probe_s or defaults["probe_s"], repeats=args.repeats, scale=scale, preset=args.preset_name,
    )


def _is_managed(name: str) -> bool:
    from lab.backends import get_backend

    try:
        return get_backend(name).managed
    except (KeyError, ValueError):
        return True  # unknown: check_plan names it


def cmd_capacity(args: argparse.Namespace, settings: Settings) -> int:
    """Search each backend's capacity under an SLO; every probe is a run of one experiment."""
    from pydantic import ValidationError

    from lab.analysis.capacity_search import CapacityError
    from lab.execution.capacity_plan import check_plan, create_experiment, run_search
    from lab.analysis.slo import SloError
    from lab.specs.schema import format_validation_error

    from lab.execution.capacity_plan import load_capacity_preset, stored_plan

    experiment_id: int | None = args.experiment
    try:
        if experiment_id is not None:
            with Session(_engine(settings)) as session:
                plan = stored_plan(session=session, experiment_id=experiment_id)
        elif args.preset_name:
            plan = load_capacity_preset(args.preset_name, quick=args.quick)
            given = {"min_load": args.min, "max_load": args.max, "max_probes": args.max_probes,
                     "probe_s": args.probe_s, "repeats": args.repeats if args.repeats != 1 else None}
            plan = plan.model_validate({**plan.model_dump(), **{k: v for k, v in given.items() if v is not None}})
        elif not args.backend or not args.slo:
            raise SpecError("give --backend and --slo (or --preset NAME)")
        else:
            plan = capacity_plan(args)
        check_plan(plan)
    except LookupError as error:
        print(f"error: {str(error).strip(chr(39))}", file=sys.stderr)
        return 2
    except (SpecError, CapacityError, SloError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except ValidationError as error:
        print(f"error: {format_validation_error(error)}", file=sys.stderr)
        return 2
    engine = _engine(settings)
    if experiment_id is None:
        with Session(engine) as session:
            experiment_id = create_experiment(session=session, plan=plan, tags=args.tag or "")
    print(f"experiment #{experiment_id}: {plan.name}: capacity search, probes of {plan.probe_s:g} s, "
          f"at most {plan.max_probes} per backend", file=sys.stderr)

    def on_probe(backend: str, probe: Any) -> None:
        print(f"{backend} at {plan.dimension.label(probe.load)}: {'pass' if probe.passed else 'FAIL'} "
              f"({probe.note}) runs {', '.join(f'#{i}' for i in probe.run_ids)}", file=sys.stderr)

    with RunWaiter(settings=settings) as waiter:
        state = run_search(engine=engine, experiment_id=experiment_id, plan=plan, wait=waiter.wait,
                           tags=args.tag or "", on_probe=on_probe)
    result = capacity_result(experiment_id, plan, state)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_capacity(result)
    return 0 if all(entry["state"] == "done" for entry in state["backends"].values()) else 1


def capacity_result(experiment_id: int, plan: Any, state: dict[str, Any]) -> dict[str, Any]:
    """The machine-readable answer: per backend its capacity, goodput and probe runs."""
    backends_out = {}
    for name, entry in state["backends"].items():
        backends_out[name] = {
            "capacity_load": entry.get("capacity_load"),
            "goodput_req_per_s": entry.get("goodput_req_per_s"),
            "stop_reason": entry.get("stop_reason"),
            "saturated": entry.get("saturated", False),
            "lowest_failing_load": entry.get("lowest_failing_load"),
            "bounding_run_ids": entry.get("bounding_run_ids", []),
            "probes": [
                {key: probe[key] for key in ("load", "passed", "throughput", "slo_figure_s", "goodput_req_per_s",
                                             "run_ids", "note")}
                for probe in entry.get("probes", [])
            ],
        }
    return {"experiment_id": experiment_id, "slo": str(plan.parsed_slo()), "by": plan.by, "unit": plan.dimension.unit,
            "backends": backends_out}


def print_capacity(result: dict[str, Any]) -> None:
    print(f"capacity under {result['slo']} (load in {result['unit']}), experiment #{result['experiment_id']}")
    print(f"{'backend':<15} {'capacity':>9} {'goodput req/s':>13} {'probes':>6}  bounding runs / why it stopped")
    for name, entry in result["backends"].items():
        capacity = "-" if entry["capacity_load"] is None else f"{entry['capacity_load']:g}"
        goodput = "-" if entry["goodput_req_per_s"] is None else f"{entry['goodput_req_per_s']:.3f}"
        runs = ", ".join(f"#{i}" for i in entry["bounding_run_ids"]) or "-"
        print(f"{name:<15} {capacity:>9} {goodput:>13} {len(entry['probes']):>6}  {runs}; {entry['stop_reason']}")


# the lab ------------------------------------------------------------------------------

def split_labels(text: str) -> list[str]:
    """``gpu, h100`` -> ``["gpu", "h100"]``."""
    return [part.strip() for part in text.split(",") if part.strip()]


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    from lab.cli.start_guard import PARENT_PID_ENV, watch_parent
    from lab.execution.worker import DatabaseReplacedError, Worker
    from lab.execution.worker_lock import WorkerBusyError
    from lab.specs.schema import check_worker_label

    try:
        name = check_worker_label(args.name) if args.name else None
        labels = [check_worker_label(label) for label in split_labels(args.labels)] if args.labels is not None else None
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    worker = Worker(context=LabContext(settings=settings), name=name, labels=labels)

    def stop_now(*_: object) -> None:
        # Like Ctrl-C: the active run ends as interrupted, its k6 is stopped, and the
        # services this worker started are stopped below.
        worker.stop()
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop_now)
    if parent := os.environ.get(PARENT_PID_ENV, "").strip():
        watch_parent(int(parent))  # started by `lab start`: never outlive it
    print(f"worker {worker.name!r} labels [{', '.join(worker.labels)}]", file=sys.stderr)
    try:
        worker.run_forever()
    except (WorkerBusyError, DatabaseReplacedError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    finally:
        stop_own_services(worker.services)
    return 0


def cmd_start(args: argparse.Namespace, settings: Settings) -> int:
    """The worker in a child process and Streamlit in the foreground; Ctrl-C stops both.

    Neither child outlives this process, even when it is killed (see lab/cli/start_guard.py).
    """
    from lab.cli.start_guard import PARENT_PID_ENV, LabPidFile, die_with_parent

    pid_file = LabPidFile(settings.data_dir)
    if (other := pid_file.running_owner()) is not None:
        print(f"error: the lab already runs (pid {other}); stop it first", file=sys.stderr)
        return 1
    if stale := pid_file.clear_stale():
        print(f"stopped what a killed lab left running (pids {', '.join(map(str, stale))})", file=sys.stderr)
    _engine(settings)  # create or upgrade the database before anything reads it
    me = os.getpid()
    worker = subprocess.Popen(
        [sys.executable, "-m", "lab", "worker"], cwd=PROJECT_ROOT,
        env={**os.environ, PARENT_PID_ENV: str(me)}, preexec_fn=die_with_parent(me),
    )
    streamlit_argv = [
        sys.executable, "-m", "streamlit", "run", str(PROJECT_ROOT / "streamlit_app.py"),
        "--server.address", settings.host, "--server.port", str(args.port), "--server.headless", "true",
        "--browser.gatherUsageStats", "false",
    ]
    streamlit: subprocess.Popen | None = None
    try:
        streamlit = subprocess.Popen(streamlit_argv, cwd=PROJECT_ROOT, preexec_fn=die_with_parent(me))
        pid_file.write([worker.pid, streamlit.pid])
        print(f"Serving Lab on http://{settings.host}:{args.port}", file=sys.stderr)
        return streamlit.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        for child in (streamlit, worker):
            if child is not None and child.poll() is None:
                child.terminate()
        for child in (streamlit, worker):
            if child is None:
                continue
            try:
                child.wait(timeout=60)
            except subprocess.TimeoutExpired:
                child.kill()
        pid_file.remove()


def cmd_reproduce(args: argparse.Namespace, settings: Settings) -> int:
    from lab.report import QUICK_REPORT_DIR, REPORT_DIR, report_only, reproduce

    # Checked before any run: an unwritable report folder found after an hour of runs loses the report.
    output = Path(args.output) if args.output else (QUICK_REPORT_DIR if args.quick else REPORT_DIR)
    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        print(f"error: cannot use {output} for the report: {error.strerror or error}", file=sys.stderr)
        return 1
    if not os.access(output, os.W_OK):
        print(f"error: cannot use {output} for the report: it is not writable", file=sys.stderr)
        return 1
    if args.report_only:
        return report_only(settings=settings, quick=args.quick, output_dir=output)
    return reproduce(settings=settings, quick=args.quick, repeats=args.repeats, output_dir=output)


# The largest id SQLite (and PostgreSQL's bigint) can hold.
MAX_ID = 2**63 - 1


def bounded_int(low: int, high: int, what: str) -> Callable[[str], int]:
    """An argparse type: a plain integer in [low, high]; anything else is a one-line usage error."""

    def parse(text: str) -> int:
        stripped = text.strip()
        digits = stripped.removeprefix("-")
        if not (digits.isascii() and digits.isdigit()):  # ASCII only: int() also reads "٣" and "1_000"
            raise argparse.ArgumentTypeError(f"{what} must be a whole number, not {text[:40]!r}")
        # Past 25 digits it is out of range anyway; int() of a huge string costs time.
        if len(digits) > 25 or not low <= int(stripped) <= high:
            raise argparse.ArgumentTypeError(f"{what} must be between {low} and {high}, not {stripped[:25]}")
        return int(stripped)

    parse.__name__ = what  # argparse names the type in its messages
    return parse


run_id_arg = bounded_int(1, MAX_ID, "a run id")


def _raise_keyboard_interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lab", description="Serving Lab: measure LLM serving stacks")
    commands = parser.add_subparsers(dest="command", required=True)

    start = commands.add_parser("start", help="start the web lab and its worker")
    start.add_argument("--port", type=bounded_int(1, 65535, "a port"), default=os.environ.get("LAB_PORT", "8501"))
    worker = commands.add_parser("worker", help="run a queue worker (many may share one PostgreSQL queue)")
    worker.add_argument("--name", help="this worker's name on the queue (LAB_WORKER_NAME; the host's by default)")
    worker.add_argument(
        "--labels", help="what it offers runs, comma-separated, e.g. gpu,h100 (or LAB_WORKER_LABELS='[\"gpu\"]')"
    )

    services = commands.add_parser("services", help="start, check and stop managed services")
    services_actions = services.add_subparsers(dest="action", required=True)
    for action in ("up", "down"):
        sub = services_actions.add_parser(action)
        sub.add_argument("names", nargs="*", metavar="NAME", help=f"any of: {', '.join(service_names())}")
    status = services_actions.add_parser("status")
    status.add_argument("--json", action="store_true")

    run = commands.add_parser("run", help="run an experiment preset and print its figures")
    run.add_argument("--preset", required=True, help=f"one of: {', '.join(list_presets())}")
    run.add_argument("--quick", action="store_true", help="the preset's quick scale for a small CPU box")
    run.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a setting, e.g. load.duration_s=20")
    run.add_argument("--repeats", type=bounded_int(1, 1000, "repeats"))
    run.add_argument("--tag")
    run.add_argument("--requires", metavar="LABELS", help="only workers with these labels take the runs, e.g. gpu")
    run.add_argument("--worker", metavar="NAME", help="only the worker with this name takes the runs")
    run.add_argument("--json", action="store_true")

    runs = commands.add_parser("runs", help="list and export stored runs")
    runs_actions = runs.add_subparsers(dest="action", required=True)
    listing = runs_actions.add_parser("list")
    listing.add_argument("--json", action="store_true")
    listing.add_argument("--limit", type=bounded_int(1, 1_000_000, "a limit"), default=50)
    listing.set_defaults(ids=None)
    export = runs_actions.add_parser("export")
    export.add_argument("ids", nargs="*", type=run_id_arg)
    export.add_argument("--csv", required=True)
    slo_eval = runs_actions.add_parser("slo", help="evaluate a stored run against an SLO")
    slo_eval.add_argument("id", type=run_id_arg)
    slo_eval.add_argument("--slo", action="append", required=True, metavar="LIMIT",
                          help="e.g. latency_p95_s=10, ttft_p99_s=1, failure_rate=0.01 (repeatable)")
    slo_eval.add_argument("--save", action="store_true", help="store goodput and attainment on the run")
    slo_eval.add_argument("--json", action="store_true")

    capacity = commands.add_parser("capacity", help="find each backend's capacity under an SLO")
    capacity.add_argument("--backend", action="append", help="a backend (repeatable)")
    capacity.add_argument("--slo", action="append", metavar="LIMIT", help="e.g. latency_p95_s=10 (repeatable)")
    capacity.add_argument("--preset", dest="preset_name", help="a capacity preset, e.g. capacity-seed")
    capacity.add_argument("--experiment", type=bounded_int(1, MAX_ID, "an experiment id"),
                          help="run a search stored by the web lab")
    capacity.add_argument("--by", choices=("vus", "rate"), default="vus", help="constant VUs or arrival rate")
    capacity.add_argument("--min", type=float, help="the smallest load probed")
    capacity.add_argument("--max", type=float, help="the largest load probed")
    capacity.add_argument("--max-probes", type=int, help="probe budget per backend")
    capacity.add_argument("--probe-s", type=float, help="seconds of load per probe")
    capacity.add_argument("--repeats", type=bounded_int(1, 20, "repeats"), default=1)
    capacity.add_argument("--target-url", help="external backends: the server's base URL")
    capacity.add_argument("--set", action="append", metavar="KEY=VALUE", help="a run setting, e.g. max_tokens=64")
    capacity.add_argument("--name")
    capacity.add_argument("--tag")
    capacity.add_argument("--quick", action="store_true", help="short probes and bounds for a small CPU box")
    capacity.add_argument("--json", action="store_true")

    reproduce = commands.add_parser("reproduce", help="reproduce the seed's experiments and write the report")
    reproduce.add_argument("--quick", action="store_true")
    reproduce.add_argument("--repeats", type=bounded_int(1, 1000, "repeats"), default=3)
    reproduce.add_argument("--output", default=None,
                           help="report folder (default docs/reproduction, docs/reproduction/quick with --quick)")
    reproduce.add_argument("--report-only", action="store_true",
                           help="write the report again from the newest stored reproduction of that scale")
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    settings = get_settings()
    handlers = {
        "services": cmd_services, "run": cmd_run, "runs": cmd_runs, "worker": cmd_worker,
        "start": cmd_start, "reproduce": cmd_reproduce,
        "capacity": cmd_capacity,
    }
    # A stop signal (kill, timeout, a CI cancel) ends like Ctrl-C: the active run is left
    # interrupted, its k6 stopped and the services this process started are stopped.
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        return handlers[args.command](args, settings)
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
        return 130
    except WorkerUnusableError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except (StorageError, SQLAlchemyError) as error:
        # A data folder that is a file or read-only, a locked or read-only database: one
        # line the user can act on, not a traceback.
        detail = str(getattr(error, "orig", None) or error).splitlines()[0]
        print(
            f"error: cannot use the lab's storage ({detail}); check that the data directory {settings.data_dir} "
            f"is a writable folder (LAB_DATA_DIR) and that the database is writable and not locked",
            file=sys.stderr,
        )
        return 1
    except OSError as error:  # a path given on the command line: a folder, missing, read-only, a full disk
        where = f": {error.filename}" if error.filename else ""
        print(f"error: {error.strerror or error}{where}", file=sys.stderr)
        return 1
