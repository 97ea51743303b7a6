"""``python -m lab start|worker|reproduce``: the web lab, a queue worker, the seed's reproduction."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from lab.cli.run_commands import split_labels
from lab.context import LabContext
from lab.queue.worker import stop_own_services
from services.processes import PROJECT_ROOT


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


def _stop_children(children: list[subprocess.Popen[bytes] | None]) -> None:
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
    streamlit: subprocess.Popen[bytes] | None = None
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
    """The seed's reproduction as a long experiment the worker drives: create it and follow it
    (``--detach``: return at once), or ``--status``, ``--stop``, ``--resume`` one; ``--plan`` and
    ``--report-only`` as before."""
    from lab.cli.scale_options import scale_and_rounds
    from lab.specs.schema import SpecError

    if args.status is not None or args.stop is not None or args.resume is not None:
        return _long_experiment_action(args, context)
    try:
        scale, until_decided = scale_and_rounds(args)
    except SpecError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.plan:
        from lab.queue.reproduction_plan import plan_lines, plan_reproduction

        plan = plan_reproduction(
            settings=context.settings, scale=scale, repeats=args.repeats, max_cell_s=args.max_cell_s
        )
        print("\n".join(plan_lines(plan)))
        return 0
    output = _report_folder(args, scale)
    if output is None:
        return 1
    if args.report_only:
        return _report_only(context, scale=scale, output=output)
    return _create_and_follow(args, context, scale=scale, until_decided=until_decided, output=output)


def _report_only(context: LabContext, *, scale: str, output: Path) -> int:
    """The newest long reproduction of ``scale``'s report as it stands (interim until it ends), else
    the report of the newest stored experiments of that scale."""
    from sqlalchemy.orm import Session

    from lab.queue.long_status import newest_reproduction, write_report
    from lab.report import report_only

    with Session(context.engine) as session:
        newest = newest_reproduction(session, scale)
    if newest is None:
        return report_only(settings=context.settings, scale=scale, output_dir=output)
    written = write_report(settings=context.settings, long_id=newest, output_dir=output)
    print(f"report of long experiment #{newest} written: {written}", file=sys.stderr)
    return 0


def _report_folder(args: argparse.Namespace, scale: str) -> Path | None:
    """The report folder, checked writable before any run (one found unwritable after an hour of runs
    loses the report); None after printing why not."""
    from lab.report import QUICK_REPORT_DIR, REPORT_DIR

    output = Path(args.output) if args.output else (QUICK_REPORT_DIR if scale == "quick" else REPORT_DIR)
    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        print(f"error: cannot use {output} for the report: {error.strerror or error}", file=sys.stderr)
        return None
    if not os.access(output, os.W_OK):
        print(f"error: cannot use {output} for the report: it is not writable", file=sys.stderr)
        return None
    return output.resolve()


def _create_and_follow(
    args: argparse.Namespace, context: LabContext, *, scale: str, until_decided: Any, output: Path
) -> int:
    from lab.queue import long_experiments
    from lab.queue.reproduction_plan import plan_reproduction

    if until_decided is not None:
        plan = plan_reproduction(
            settings=context.settings, scale=scale, repeats=args.repeats, max_cell_s=args.max_cell_s
        )
        one_round_s = plan.predicted_wall_s / max(1, plan.repeats)
        if until_decided.budget_s < one_round_s:
            print(
                f"error: a budget of {until_decided.budget_s:,.0f} s is under one round's predicted "
                f"{one_round_s:,.0f} s: give at least --budget {one_round_s / 3600:.1f}h",
                file=sys.stderr,
            )
            return 2
    try:
        long_id = long_experiments.create_reproduction(
            engine=context.engine,
            scale=scale,
            repeats=args.repeats,
            until=until_decided,
            report_dir=output,
            max_cell_s=args.max_cell_s,
            allow_dirty=args.allow_dirty,
            allow_commit_change=args.allow_commit_change,
        )
    except long_experiments.DirtyTreeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"long experiment #{long_id} created: lab reproduce --status {long_id} shows it", file=sys.stderr)
    return _follow(context, long_id, detach=args.detach, quiet=args.quiet)


def _follow(context: LabContext, long_id: int, *, detach: bool, quiet: bool = False) -> int:
    """Follow until it ends (its report written), or return at once with ``detach``; ``quiet``: no
    table while it runs, only the end."""
    import io

    from db.models import LongExperimentState
    from lab.queue.follow import follow, runs_here
    from lab.queue.long_status import write_report as write_long_experiment_report

    here = runs_here(context)
    if detach:
        where = (
            "nothing runs it until a worker starts on this machine (lab start or lab worker)"
            if here
            else "the lab's worker runs it"
        )
        print(f"detached: {where}", file=sys.stderr)
        return 0
    try:
        state = follow(context, long_id, out=io.StringIO() if quiet else None)
    except KeyboardInterrupt:
        if here:
            print(
                f"\nstopped: the run in progress ends interrupted and is replaced when long experiment #{long_id} "
                "goes on; it waits for a worker on this machine (lab start or lab worker)",
                file=sys.stderr,
            )
        else:
            print(f"\nstopped following; long experiment #{long_id} goes on in the lab's worker", file=sys.stderr)
        return 130
    if state in LongExperimentState.FINAL:
        written = write_long_experiment_report(settings=context.settings, long_id=long_id)
        if written is not None:
            print(f"report written: {written}", file=sys.stderr)
    return 0 if state == LongExperimentState.FINISHED else 1


def _long_experiment_action(args: argparse.Namespace, context: LabContext) -> int:
    """``--status [ID]``, ``--stop ID``, ``--resume ID``: one line and exit 2 for one that does not
    exist or already ended."""
    from sqlalchemy.orm import Session

    from db.models import LongExperimentState
    from lab.members import os_user
    from lab.queue import long_experiments, long_status
    from lab.queue.long_status import write_report as write_long_experiment_report

    try:
        if args.stop is not None:
            long_experiments.stop(context.engine, args.stop, by=os_user())
            written = write_long_experiment_report(settings=context.settings, long_id=args.stop)
            print(f"long experiment #{args.stop} stopped" + (f"; report written: {written}" if written else ""))
            return 0
        if args.resume is not None:
            long_experiments.resume(context.engine, args.resume, allow_commit_change=args.allow_commit_change)
            print(f"long experiment #{args.resume} goes on", file=sys.stderr)
            return _follow(context, args.resume, detach=args.detach, quiet=args.quiet)
        with Session(context.engine) as session:
            ids = [args.status] if args.status else long_status.all_ids(session, unfinished_only=True)
            if not ids:
                print("no long experiment is running or paused (lab reproduce starts one)")
                return 0
            for long_id in ids:
                found = long_status.status(session, long_id)
                if args.status and found.state in LongExperimentState.FINAL:
                    raise long_experiments.LongExperimentError(
                        f"long experiment #{long_id} already ended ({found.state}: {found.state_reason}); "
                        "lab reproduce --report-only writes its report"
                    )
                print("\n".join(long_status.table_lines(found)))
        return 0
    except long_experiments.LongExperimentError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
