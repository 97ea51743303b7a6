"""The command line's parser and ``main``: each command's work lives in its own module
(``services_commands``, ``run_commands``, ``capacity_commands``, ``lab_commands``)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError

from lab.cli.archive_commands import add_archive_command, cmd_archive_reproductions
from lab.cli.baseline_commands import add_gate_arguments, add_spec_and_baseline_commands
from lab.cli.capacity_commands import cmd_capacity
from lab.cli.compare_commands import add_compare_command, cmd_compare_reproductions
from lab.cli.import_commands import add_import_command, cmd_import
from lab.cli.lab_commands import cmd_reproduce, cmd_start, cmd_worker
from lab.cli.run_commands import cmd_run, cmd_runs
from lab.cli.scale_options import add_scale_and_rounds
from lab.cli.semantic_commands import add_semantic_report_command, cmd_semantic_report
from lab.cli.services_commands import cmd_services, service_names
from lab.cli.trace_commands import add_trace_commands, cmd_traces
from lab.context import LabContext, StorageError
from lab.queue.run_waiter import WorkerUnusableError
from lab.settings import get_settings, settings_error_line
from lab.specs.options import settable_options
from lab.specs.schema import list_presets


def set_help(example: str) -> str:
    """The ``--set`` help: an example, then every option the registered kinds declare (read
    when the parser is built, so a kind registered later is named too)."""
    return f"{example}; options the workloads and backends declare: {', '.join(settable_options())}"


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


def _add_lab_commands(commands: Any) -> None:
    """start, worker and services."""
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


def _add_run_commands(commands: Any) -> None:
    """run and runs."""
    run = commands.add_parser("run", help="run an experiment preset or spec file and print its figures")
    source = run.add_mutually_exclusive_group(required=True)
    source.add_argument("--preset", help=f"one of: {', '.join(list_presets())}")
    source.add_argument("--spec", metavar="FILE", help="a spec file (.json or .toml) of the presets' schema")
    add_scale_and_rounds(run, precision=True)
    run.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help=set_help("override a setting, e.g. load.duration_s=20")
    )
    run.add_argument("--repeats", type=bounded_int(1, 1000, "repeats"))
    run.add_argument("--tag")
    run.add_argument("--requires", metavar="LABELS", help="only workers with these labels take the runs, e.g. gpu")
    run.add_argument("--worker", metavar="NAME", help="only the worker with this name takes the runs")
    run.add_argument(
        "--priority",
        type=bounded_int(-1000, 1000, "a priority"),
        default=0,
        help="the runs' place in the shared queue: higher runs first (default 0; a long experiment's rounds "
        "have the long_experiment_priority setting, -10 unless set)",
    )
    run.add_argument("--json", action="store_true", help="print only JSON (the runs' records) on standard output")
    run.add_argument("--quiet", action="store_true", help="no progress and no line per run; the figures at the end")
    add_gate_arguments(run)
    run.add_argument("--local", action="store_true", help=LOCAL_HELP)

    runs = commands.add_parser("runs", help="list and export stored runs")
    runs_actions = runs.add_subparsers(dest="action", required=True)
    listing = runs_actions.add_parser("list")
    listing.add_argument("--json", action="store_true")
    listing.add_argument("--limit", type=bounded_int(1, 1_000_000, "a limit"), default=50)
    listing.set_defaults(ids=None)
    export = runs_actions.add_parser("export")
    export.add_argument("ids", nargs="*", type=run_id_arg)
    export.add_argument(
        "--csv",
        nargs="?",
        const="-",
        default="-",
        metavar="FILE",
        help="write the runs as CSV to FILE (standard output without FILE, or with -)",
    )
    slo_eval = runs_actions.add_parser("slo", help="evaluate a stored run against an SLO")
    slo_eval.add_argument("id", type=run_id_arg)
    slo_eval.add_argument(
        "--slo",
        action="append",
        required=True,
        metavar="LIMIT",
        help="e.g. latency_p95_s=10, ttft_p99_s=1, failure_rate=0.01 (repeatable)",
    )
    slo_eval.add_argument("--save", action="store_true", help="store goodput and attainment on the run")
    slo_eval.add_argument("--json", action="store_true")
    add_spec_and_baseline_commands(runs_actions, "a run (12 or run:12) or an experiment (experiment:3)")
    runs_actions.add_parser(
        "recover", help="write the final states runs kept in their folders while the database was unreachable"
    )


def _add_capacity_and_reproduce(commands: Any) -> None:
    """capacity."""
    capacity = commands.add_parser("capacity", help="find each backend's capacity under an SLO")
    capacity.add_argument("--backend", action="append", help="a backend (repeatable)")
    capacity.add_argument("--slo", action="append", metavar="LIMIT", help="e.g. latency_p95_s=10 (repeatable)")
    capacity.add_argument("--preset", dest="preset_name", help="a capacity preset, e.g. capacity-seed")
    capacity.add_argument(
        "--experiment", type=bounded_int(1, MAX_ID, "an experiment id"), help="run a search stored by the web lab"
    )
    capacity.add_argument("--by", choices=("vus", "rate"), default="vus", help="constant VUs or arrival rate")
    capacity.add_argument("--min", type=float, help="the smallest load probed")
    capacity.add_argument("--max", type=float, help="the largest load probed")
    capacity.add_argument("--max-probes", type=int, help="probe budget per backend")
    capacity.add_argument("--probe-s", type=float, help="seconds of load per probe")
    capacity.add_argument("--repeats", type=bounded_int(1, 20, "repeats"), default=1)
    capacity.add_argument("--target-url", help="external backends: the server's base URL")
    capacity.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help=set_help("a run setting, e.g. max_tokens=64")
    )
    capacity.add_argument("--name")
    capacity.add_argument("--tag")
    capacity.add_argument("--quick", action="store_true", help="short probes and bounds for a small CPU box")
    capacity.add_argument("--json", action="store_true")
    capacity.add_argument("--local", action="store_true", help=LOCAL_HELP)


def _add_reproduce(commands: Any) -> None:
    """reproduce: create, follow, --status, --stop and --resume a long reproduction."""
    reproduce = commands.add_parser("reproduce", help="reproduce the seed's experiments and write the report")
    add_scale_and_rounds(reproduce, precision=False)
    reproduce.add_argument("--repeats", type=bounded_int(1, 1000, "repeats"), default=3)
    reproduce.add_argument(
        "--output",
        default=None,
        help="report folder (default docs/reproduction, the front report; with --quick "
        "docs/reproduction/archive/quick-DATE)",
    )
    reproduce.add_argument(
        "--allow-dirty",
        action="store_true",
        help="run on a checkout with uncommitted changes (refused otherwise: a published result "
        "comes from one clean commit); the report says so at the top",
    )
    reproduce.add_argument(
        "--plan",
        action="store_true",
        help="print each cell's length at this scale and why, and the predicted wall time; queue nothing",
    )
    reproduce.add_argument(
        "--report-only",
        action="store_true",
        help="write the report again from the newest stored reproduction of that scale",
    )
    reproduce.add_argument(
        "--detach", action="store_true", help="create it and return at once (the lab's worker runs it)"
    )
    reproduce.add_argument("--quiet", action="store_true", help="no table while it runs; only how it ended")
    reproduce.add_argument(
        "--status",
        nargs="?",
        const=0,
        type=bounded_int(1, MAX_ID, "a long experiment id"),
        metavar="ID",
        help="print where a long experiment stands (every running or paused one without ID)",
    )
    reproduce.add_argument(
        "--stop", type=bounded_int(1, MAX_ID, "a long experiment id"), metavar="ID", help="end one and write its report"
    )
    reproduce.add_argument(
        "--resume", type=bounded_int(1, MAX_ID, "a long experiment id"), metavar="ID", help="go on with a paused one"
    )
    reproduce.add_argument(
        "--allow-commit-change",
        action="store_true",
        help="let it go on when the lab's commit changes between sittings (the report names both)",
    )


LOCAL_HELP = (
    "execute the runs in this process even when live workers share the database "
    "(by default they only queue there and this command waits)"
)


# Loggers of libraries the lab uses, quiet below WARNING unless --verbose.
QUIET_LOGGERS = ("httpx", "httpcore", "urllib3", "uvicorn.access", "asyncio")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lab", description="Serving Lab: measure LLM serving stacks")
    parser.add_argument(
        "--verbose", action="store_true", help="log every library's lines too (each HTTP request, for one)"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    _add_lab_commands(commands)
    _add_run_commands(commands)
    _add_capacity_and_reproduce(commands)
    _add_reproduce(commands)
    add_import_command(commands)
    add_trace_commands(commands)
    add_semantic_report_command(commands)
    add_compare_command(commands)
    add_archive_command(commands)
    return parser


HANDLERS: dict[str, Callable[[argparse.Namespace, LabContext], int]] = {
    "services": cmd_services,
    "run": cmd_run,
    "runs": cmd_runs,
    "worker": cmd_worker,
    "start": cmd_start,
    "reproduce": cmd_reproduce,
    "capacity": cmd_capacity,
    "import": cmd_import,
    "traces": cmd_traces,
    "semantic-report": cmd_semantic_report,
    "compare-reproductions": cmd_compare_reproductions,
    "archive-reproductions": cmd_archive_reproductions,
}


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns its exit status (2: bad input, 1: it failed, 130: stopped)."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.verbose:
        # Library loggers say every HTTP request at INFO (a metrics poll twice a second): quiet unless asked.
        for name in QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
    try:
        context = LabContext(settings=get_settings())
    except ValidationError as error:  # a LAB_ variable with a value the lab refuses: one line
        print(f"error: {settings_error_line(error)}", file=sys.stderr)
        return 2
    settings = context.settings
    # A stop signal (kill, timeout, a CI cancel) ends like Ctrl-C: the active run is left
    # interrupted, its k6 stopped and the services this process started are stopped.
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        return HANDLERS[args.command](args, context)
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
