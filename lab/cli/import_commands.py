"""``python -m lab import FILE...``: other tools' result files stored as runs.

Each file is imported on its own, in one transaction: a refused file (another version, a
truncated or empty one, another tool's, one over the size limit, a FIFO) is one line on
stderr and adds nothing, and the others are imported all the same. The exit status is 0 when
every file was imported (or already was), 2 when any was refused.
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from lab.context import LabContext
from lab.imports import expected_files
from lab.imports.saving import ImportRefused, import_files
from lab.members import member_without_sign_in, os_user


def add_import_command(commands: Any) -> None:
    command = commands.add_parser("import", help="import GuideLLM, vllm bench serve or AIPerf result files as runs")
    command.add_argument("files", nargs="+", metavar="FILE", help=f"result files: {expected_files()}")
    command.add_argument("--json", action="store_true", help="print the outcome of each file as JSON")


def _reading(paths: list[Path], *, shown: bool) -> AbstractContextManager[object]:
    """On a terminal, a spinner while the files are read (a large result file takes seconds)."""
    if not shown:
        return nullcontext()
    from rich.console import Console

    what = paths[0].name if len(paths) == 1 else f"{len(paths)} files"
    return Console(file=sys.stderr).status(f"reading {what}")


def cmd_import(args: argparse.Namespace, context: LabContext) -> int:
    """Import each file; one line a file (its runs, or why it was refused)."""
    member = member_without_sign_in(os_user())  # the CLI acts as its operating-system user
    paths = [Path(name) for name in args.files]
    try:
        with _reading(paths, shown=sys.stderr.isatty() and not args.json):
            outcomes, refusals = import_files(
                session_factory=lambda: Session(context.engine), paths=paths, member=member
            )
    except ImportRefused as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for refusal in refusals:
        print(f"error: {refusal}", file=sys.stderr)
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "file": o.file_name,
                        "source": o.source,
                        "run_ids": o.run_ids,
                        "already": o.already,
                        "notes": o.notes,
                    }
                    for o in outcomes
                ],
                indent=2,
            )
        )
    else:
        for outcome in outcomes:
            print(outcome.line())
            for note in outcome.notes:
                print(f"  note: {note}")
    return 2 if refusals else 0
