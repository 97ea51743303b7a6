"""``python -m lab compare-reproductions A B [C ...]``: reproduction reports compared, pair by pair.

Every verdict that differs (not only "held" against "did not hold"), with both intervals and
whether they overlap, whether the machines differ in their CPU features and resolved settings,
and the difference attributed to them where they do (:mod:`lab.report.comparison`). Prints
Markdown; with more than two reports, every pair is compared (the first against each later one,
and so on). A lab member runs it after a new reproduction.

``lab.cli.entry`` registers the parser and the handler. The report code is imported only when the
command runs, so the CLI starts without the analysis libraries.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path
from typing import Any

from lab.context import LabContext

COMMAND = "compare-reproductions"
DEFAULT_TITLE = "Reproductions compared, claim by claim"


def add_compare_command(commands: Any) -> None:
    """compare-reproductions REPORT REPORT [...] [--names ...] [--title ...] [--note ...]."""
    parser = commands.add_parser(COMMAND, help="compare reproduction reports, every verdict that differs")
    parser.add_argument("reports", type=Path, nargs="+", help="report folders (or their README.md), two or more")
    parser.add_argument("--names", nargs="+", help="one name a report (default: the folder names)")
    parser.add_argument("--title", default=DEFAULT_TITLE, help="the comparison's heading")
    parser.add_argument("--note", default="", help="where a report not in the checkout came from")


def comparison_document(
    folders: list[Path], names: list[str], *, title: str, command: str, code: str, note: str = ""
) -> str:
    """Every pair of ``folders`` compared, under ``title``, saying which command and code made it."""
    from lab.report.comparison import compare, comparison_markdown, read_reproduction

    reproductions = [read_reproduction(folder, name) for folder, name in zip(folders, names, strict=True)]
    parts = [
        f"<!-- generated: python -m lab {COMMAND} (figures copied from the reports compared) -->",
        f"# {title}",
        "",
        f"Made by `{command}` with the code of lab commit {code} (lab/report/comparison.py): each report itself "
        "was written by the commit that took its runs. A verdict differs when the two reports judge a claim "
        'differently in any way, not only "held" against "did not hold".' + (f" {note}" if note else ""),
    ]
    for first, second in itertools.combinations(reproductions, 2):
        parts += ["", f"## {first.name} against {second.name}", "", comparison_markdown(compare(first, second))]
    return "\n".join(parts) + "\n"


def report_names(reports: list[Path], names: list[str] | None) -> list[str]:
    """One name a report: the ones given, else each report's folder name."""
    return names or [path.name if path.is_dir() else path.parent.name for path in reports]


def cmd_compare_reproductions(args: argparse.Namespace, context: LabContext | None = None) -> int:
    """Print the comparison; 2 (one line) for fewer than two reports or a name count that differs."""
    if len(args.reports) < 2:
        print("error: give two reports or more", file=sys.stderr)
        return 2
    names = report_names(args.reports, args.names)
    if len(names) != len(args.reports):
        print("error: give one name a report", file=sys.stderr)
        return 2
    from lab.measurement.environment import provenance

    code_of = provenance()
    code = (code_of.commit or "unknown")[:12] + (" with uncommitted changes" if code_of.dirty else "")
    command = f"python -m lab {COMMAND} " + " ".join(str(path) for path in args.reports)
    print(
        comparison_document(args.reports, names, title=args.title, command=command, code=code, note=args.note), end=""
    )
    return 0
