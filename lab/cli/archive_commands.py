"""``python -m lab archive-reproductions``: the archive of earlier reproduction reports brought up to
date: its index (one line per report) and the one generated line atop each archived report that
needs it (:mod:`lab.report.archive`). A lab member runs it after moving a report into the archive
or regenerating a comparison there; ``--check`` changes nothing and exits 1 when a file is stale.
It also seals every published report and comparison that has no seal yet (:mod:`lab.report.seal`),
and names each that differs from its seal; ``--reseal FILE`` seals a comparison made again.

A ``lab`` command rather than a script: it is part of publishing a reproduction, beside
``lab reproduce`` and ``lab compare-reproductions``, and like them it writes documents from data.
``lab.cli.entry`` registers the parser and the handler. The report code is imported only when the
command runs, so the CLI starts without it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from lab.context import LabContext
from services.processes import PROJECT_ROOT

COMMAND = "archive-reproductions"
DEFAULT_ARCHIVE = PROJECT_ROOT / "docs" / "reproduction" / "archive"


def add_archive_command(commands: Any) -> None:
    """archive-reproductions [--archive FOLDER] [--check]."""
    parser = commands.add_parser(COMMAND, help="write the index of archived reproduction reports and their top lines")
    parser.add_argument("--archive", type=Path, default=DEFAULT_ARCHIVE, help="the archive folder")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when a file is not up to date")
    parser.add_argument(
        "--reseal",
        type=Path,
        nargs="+",
        default=[],
        help="seal these files again as they are now (a comparison made again); never needed for a report",
    )


def cmd_archive_reproductions(args: argparse.Namespace, context: LabContext | None = None) -> int:
    """Write (or with --check, list) the stale files; 2 (one line) when the folder does not exist."""
    if not args.archive.is_dir():
        print(f"error: {args.archive} is not a folder", file=sys.stderr)
        return 2
    from lab.report.archive import archive_texts, stale_files, write_archive
    from lab.report.seal import all_problems, seal_unsealed, write_seal

    # The published reports and comparisons: the archive's folder and the one holding it.
    reproductions = args.archive.parent
    if args.check:
        stale = stale_files(archive_texts(args.archive))
        for path in stale:
            print(f"not up to date: {path}")
        problems = all_problems(reproductions)
        for path, why in problems:
            print(f"{path}: {why}")
        return 1 if stale or problems else 0
    for path in args.reseal:
        if not path.is_file():
            print(f"error: {path} is not a file", file=sys.stderr)
            return 2
        write_seal(path.parent, [path])
        print(f"sealed again: {path}")
    for path in write_archive(args.archive):
        print(f"wrote {path}")
    for path in seal_unsealed(reproductions):
        print(f"sealed {path}")
    for path, why in all_problems(reproductions):
        print(f"{path}: {why}", file=sys.stderr)
    return 0
