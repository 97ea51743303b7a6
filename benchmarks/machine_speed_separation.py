"""Can the machine-speed index tell a run beside a CPU hog from a quiet one? A re-analysis of stored runs.

The contention reproduction (docs/reproduction/archive/contention/) ran two busy loops from 17:54:51
to 17:59:51 UTC. For each figure a run carries (the machine-speed index of the mean, of the
kernel before and of the kernel after the load, the slower of the two, and other processes'
CPU) this finds the threshold that best separates the runs whose load overlapped the hog from
the others, and counts the runs it still gets wrong. Then, over every stored reproduction's
runs, whether the index's flag (more than 10% off the median) agrees with the contention
warning (other processes over 25% of a core), and how the best one-sided cut found on the
contention runs does on the others.

    .venv/bin/python -m benchmarks.machine_speed_separation [--output FILE]

Reads only the committed runs.csv files; writes docs/benchmarks/machine_speed_separation.json.
"""

from __future__ import annotations

import argparse
import csv
import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from lab.measurement.checks import CONTENTION_WARNING_CPU_PERCENT
from lab.measurement.machine_speed import run_calibration_s, speed_indices

# The rule the report used until issue 37: a run more than 10% off the median was named.
OLD_TOLERANCE = 0.10


def off_median(index: float | None) -> bool:
    return index is not None and abs(index - 1.0) > OLD_TOLERANCE


ROOT = Path(__file__).resolve().parents[1]
REPRODUCTIONS = ROOT / "docs" / "reproduction"
OUTPUT = ROOT / "docs" / "benchmarks" / "machine_speed_separation.json"
# The cut that separates the contention reproduction's runs best (found by contention_separation).
ONE_SIDED_CUT = 0.903
HOG_START, HOG_END = datetime.fromisoformat("2026-12-01T17:54:51"), datetime.fromisoformat("2026-12-01T17:59:51")


def _number(text: str | None) -> float | None:
    return float(text) if text not in (None, "") else None


def read_runs(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [row for row in csv.DictReader(handle) if row["status"] == "done"]


def hog_overlap_s(row: dict[str, Any]) -> float:
    start, end = datetime.fromisoformat(row["started_at"]), datetime.fromisoformat(row["finished_at"])
    return max(0.0, (min(end, HOG_END) - max(start, HOG_START)).total_seconds())


def best_threshold(values: dict[int, float], hog: set[int]) -> dict[str, Any]:
    """The cut (flag at or beyond it, on the side the hog runs lie) with the fewest runs wrong."""
    best: dict[str, Any] = {"wrong": len(values) + 1}
    for cut in sorted(values.values()):
        for side, flagged in (("at or above", lambda v, c=cut: v >= c), ("at or below", lambda v, c=cut: v <= c)):
            missed = sorted(r for r in hog if not flagged(values[r]))
            false = sorted(r for r in values if r not in hog and flagged(values[r]))
            if len(missed) + len(false) < best["wrong"]:
                best = {
                    "cut": round(cut, 3),
                    "flag": side,
                    "wrong": len(missed) + len(false),
                    "missed_hog_runs": missed,
                    "flagged_quiet_runs": false,
                }
    return best


def contention_separation() -> dict[str, Any]:
    rows = read_runs(REPRODUCTIONS / "archive" / "contention" / "runs.csv")
    run_ids = [int(r["run_id"]) for r in rows]
    hog = {int(r["run_id"]) for r in rows if hog_overlap_s(r) > 0}
    before = {int(r["run_id"]): _number(r["machine_calibration_before_s"]) for r in rows}
    after = {int(r["run_id"]): _number(r["machine_calibration_after_s"]) for r in rows}
    figures: dict[str, Callable[[int], float | None]] = {}
    mean_index = speed_indices({r: run_calibration_s(before[r], after[r]) for r in run_ids})
    before_index, after_index = speed_indices(before), speed_indices(after)
    figures["index (mean of before and after)"] = lambda r: mean_index[r]
    figures["index of the kernel before the load"] = lambda r: before_index[r]
    figures["index of the kernel after the load"] = lambda r: after_index[r]
    figures["index of the slower kernel"] = lambda r: min(before_index[r] or 0, after_index[r] or 0)
    other = {int(r["run_id"]): _number(r["other_cpu_percent_avg"]) for r in rows}
    figures["other processes' CPU (% of a core)"] = lambda r: other[r]
    results = {}
    for name, figure in figures.items():
        values = {r: v for r in run_ids if (v := figure(r)) is not None}
        results[name] = best_threshold(values, hog)
    index_flags = sorted(r for r in run_ids if off_median(mean_index[r]))
    return {
        "hog_runs": sorted(hog),
        "hog_overlap_s": {r["run_id"]: round(hog_overlap_s(r)) for r in rows if hog_overlap_s(r) > 0},
        "runs": {
            r: {"index": round(mean_index[r] or 0, 2), "other_cpu_percent": round(other[r] or 0, 1)} for r in run_ids
        },
        "index_flag_today": {
            "flagged": index_flags,
            "missed_hog_runs": sorted(hog - set(index_flags)),
            "flagged_quiet_runs": sorted(set(index_flags) - hog),
        },
        "best_threshold_by_figure": results,
    }


def agreement_over_reproductions() -> list[dict[str, Any]]:
    """Per stored reproduction: runs the index flags, runs the contention warning flags, and both."""
    found = []
    for path in sorted(REPRODUCTIONS.glob("**/runs.csv")):
        rows = read_runs(path)
        index = speed_indices(
            {
                int(r["run_id"]): run_calibration_s(
                    _number(r["machine_calibration_before_s"]), _number(r["machine_calibration_after_s"])
                )
                for r in rows
            }
        )
        busy = {
            int(r["run_id"])
            for r in rows
            if (_number(r["other_cpu_percent_avg"]) or 0) > CONTENTION_WARNING_CPU_PERCENT
        }
        flagged = {r for r, value in index.items() if off_median(value)}
        # The best one-sided cut the contention runs allow, carried to every other reproduction.
        slow = {r for r, value in index.items() if value is not None and value <= ONE_SIDED_CUT}
        found.append(
            {
                "reproduction": str(path.parent.relative_to(ROOT)),
                "runs": len(rows),
                "contention_warned": len(busy),
                "index_flagged": len(flagged),
                "both": len(busy & flagged),
                f"quiet_runs_at_or_below_{ONE_SIDED_CUT}": len(slow - busy),
                f"warned_runs_at_or_below_{ONE_SIDED_CUT}": len(slow & busy),
            }
        )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    document = {"contention_reproduction": contention_separation(), "all_reproductions": agreement_over_reproductions()}
    print(json.dumps(document, indent=1))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
