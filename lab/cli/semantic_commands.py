"""``python -m lab semantic-report experiment:N|RUN... --out DIR``: the semantic cache's
hit-rate/false-hit-rate report of a threshold sweep (:mod:`lab.report.semantic_cache`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from lab.context import LabContext

COMMAND = "semantic-report"


def add_semantic_report_command(commands: Any) -> None:
    """semantic-report."""
    parser = commands.add_parser(COMMAND, help="the semantic cache's hit rate against false hits, per threshold")
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run ids, or experiment:N for an experiment's runs")
    parser.add_argument("--out", required=True, type=Path, metavar="DIR", help="the folder to write the report into")
    parser.add_argument("--title", default="Semantic cache: hit rate against false hits by threshold")
    parser.add_argument("--note", action="append", default=[], help="a paragraph to put under the title")


def cmd_semantic_report(args: argparse.Namespace, context: LabContext) -> int:
    """Write the report; one line and status 2 when no run has semantic figures."""
    from lab.report.semantic_cache import experiment_run_ids, sweep_points, write_semantic_report

    with Session(context.engine) as session:
        run_ids: list[int] = []
        for name in args.runs:
            kind, _, number = name.rpartition(":")
            if not number.isdigit() or kind not in ("", "experiment"):
                print(f"error: {name!r} is neither a run id nor experiment:N", file=sys.stderr)
                return 2
            run_ids += experiment_run_ids(session=session, experiment_id=int(number)) if kind else [int(number)]
        points = sweep_points(session=session, run_ids=run_ids)
    if not any(point.tier == "semantic" for point in points):
        print("error: none of these runs ran the semantic tier (cache.tier semantic) to the end", file=sys.stderr)
        return 2
    for path in write_semantic_report(points, args.out, heading=args.title, notes=args.note):
        print(f"wrote {path}")
    return 0
