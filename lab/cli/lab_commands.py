"""``python -m lab start|worker|reproduce``: the web lab, a queue worker, the seed's reproduction."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path

from lab.cli.run_commands import split_labels
from lab.context import LabContext
from lab.queue.worker import stop_own_services
from lab.settings import PROJECT_ROOT


def cmd_worker(args: argparse.Namespace, context: LabContext) -> int:
    from lab.cli.start_guard import PARENT_PID_ENV, watch_parent
    from lab.queue.worker import DatabaseReplacedError, Worker
    from lab.queue.worker_lock import WorkerBusyError
    from lab.specs.schema import check_worker_label

    try:
        name = check_worker_label(args.name) if args.name else None
        labels = [check_worker_label(label) for label in split_labels(args.labels)] if args.labels is not None else None
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    worker = Worker(context=context, name=name, labels=labels)

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


def _streamlit_argv(*, host: str, port: int) -> list[str]:
    """The Streamlit server the lab serves its pages with (web_app.py: streamlit_app.py's pages,
    no 404 for a page opened directly), headless and without usage statistics."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(PROJECT_ROOT / "web_app.py"),
        "--server.address",
        host,
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
    ]


def _stop_children(children: list[subprocess.Popen | None]) -> None:
    """Terminate every child still running, then wait up to 60 s for each before killing it."""
    for child in children:
        if child is not None and child.poll() is None:
            child.terminate()
    for child in children:
        if child is None:
            continue
        try:
            child.wait(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()


def cmd_start(args: argparse.Namespace, context: LabContext) -> int:
    """The worker in a child process and Streamlit in the foreground; Ctrl-C stops both.

    Neither child outlives this process, even when it is killed (see lab/cli/start_guard.py).
    """
    from lab.cli.start_guard import PARENT_PID_ENV, LabPidFile, die_with_parent
    from lab.members import check_settings_at_start

    if (problem := check_settings_at_start(PROJECT_ROOT)) is not None:  # e.g. an unknown role name
        print(problem, file=sys.stderr)
        return 2
    settings = context.settings
    pid_file = LabPidFile(settings.data_dir)
    if (other := pid_file.running_owner()) is not None:
        print(f"error: the lab already runs (pid {other}); stop it first", file=sys.stderr)
        return 1
    if stale := pid_file.clear_stale():
        print(f"stopped what a killed lab left running (pids {', '.join(map(str, stale))})", file=sys.stderr)
    _ = context.engine  # create or upgrade the database before anything reads it
    me = os.getpid()
    worker = subprocess.Popen(
        [sys.executable, "-m", "lab", "worker"],
        cwd=PROJECT_ROOT,
        env={**os.environ, PARENT_PID_ENV: str(me)},
        preexec_fn=die_with_parent(me),
    )
    streamlit_argv = _streamlit_argv(host=settings.host, port=args.port)
    streamlit: subprocess.Popen | None = None
    try:
        streamlit = subprocess.Popen(streamlit_argv, cwd=PROJECT_ROOT, preexec_fn=die_with_parent(me))
        pid_file.write([worker.pid, streamlit.pid])
        print(f"Serving Lab on http://{settings.host}:{args.port}", file=sys.stderr)
        return streamlit.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        _stop_children([streamlit, worker])
        pid_file.remove()


def cmd_reproduce(args: argparse.Namespace, context: LabContext) -> int:
    from lab.cli.scale_options import scale_and_rounds
    from lab.report import QUICK_REPORT_DIR, REPORT_DIR, report_only, reproduce
    from lab.specs.schema import SpecError

    try:
        scale, until_decided = scale_and_rounds(args)
    except SpecError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.plan:
        from lab.report.reproduction_plan import plan_lines, plan_reproduction

        plan = plan_reproduction(
            settings=context.settings, scale=scale, repeats=args.repeats, max_cell_s=args.max_cell_s
        )
        print("\n".join(plan_lines(plan)))
        return 0
    # Checked before any run: an unwritable report folder found after an hour of runs loses the report.
    output = Path(args.output) if args.output else (QUICK_REPORT_DIR if scale == "quick" else REPORT_DIR)
    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        print(f"error: cannot use {output} for the report: {error.strerror or error}", file=sys.stderr)
        return 1
    if not os.access(output, os.W_OK):
        print(f"error: cannot use {output} for the report: it is not writable", file=sys.stderr)
        return 1
    if args.report_only:
        return report_only(settings=context.settings, scale=scale, output_dir=output)
    return reproduce(
        settings=context.settings,
        scale=scale,
        repeats=args.repeats,
        output_dir=output,
        allow_dirty=args.allow_dirty,
        until_decided=until_decided,
        max_cell_s=args.max_cell_s,
    )
