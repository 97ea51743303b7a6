"""What a request and a million output tokens cost, per backend and cell, from stored runs.

Reads the runs of a published reproduction (its committed runs.csv: by default the decided seed
reproduction, docs/reproduction/runs.csv), keeps the done runs that carry no measurement warning
(a run beside other work is left out, as the report leaves its round out), groups them by the
lab's one cell key (``lab.analysis.aggregation.CELL_KEYS``: two workloads or two loads are never
one row) and states, at a machine price per hour, what 1,000 requests and a million output tokens
cost: the mean throughput of the cell's runs with its 95% interval, turned into a price by
``lab.analysis.cost``. The price is per hour of the whole machine, in any currency; the figures
scale with it.

    .venv/bin/python -m benchmarks.cost_per_request [--runs CSV] [--price-per-hour 1.0] [--json FILE]

Writes docs/benchmarks/cost_per_request.json by default (rendered by ``make results``).
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path
from typing import Any

from lab.analysis.aggregation import CELL_KEYS, aggregate
from lab.analysis.cost import cost_per_million_output_tokens

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RUNS = Path("docs/reproduction/runs.csv")
DEFAULT_OUTPUT = Path("docs/benchmarks/cost_per_request.json")
FIGURES = ("req_per_s", "output_tok_per_s")
# The machine record each run carries (the same for every run of one reproduction).
MACHINE_COLUMNS = ("hardware", "cpu_model_name", "cpu_avx2", "cpu_avx512", "cpu_avx512_bf16", "cpu_amx")
NUMERIC = {"vus", "arrival_rate_per_s", "prompts", "duration_s", "max_tokens", *FIGURES, "requests_failed"}


def read_quiet_runs(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The done runs without a measurement warning (numbers as numbers), and how many done runs were left out."""
    with path.open(encoding="utf-8") as handle:
        done = [row for row in csv.DictReader(handle) if row["status"] == "done"]
    quiet = [
        {key: (float(value) if key in NUMERIC and value != "" else value or None) for key, value in row.items()}
        for row in done
        if not row["measurement_warnings"]
    ]
    return quiet, len(done) - len(quiet)


def cost_per_thousand_requests(req_per_s: float | None, price_per_hour: float) -> float | None:
    """What 1,000 requests cost at ``price_per_hour`` for the machine, at this request rate."""
    if not req_per_s or req_per_s <= 0:
        return None
    return price_per_hour / (req_per_s * 3600) * 1_000


def machine_record(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The machine the runs were measured on, refused if they disagree (one table, one machine)."""
    records = {tuple(str(run.get(column)) for column in MACHINE_COLUMNS) for run in runs}
    if len(records) != 1:
        raise SystemExit(f"the runs come from {len(records)} machines; a cost table needs one")
    (values,) = records
    record = dict(zip(MACHINE_COLUMNS, values, strict=True))
    sets = [
        name
        for name, column in (
            ("AVX2", "cpu_avx2"),
            ("AVX-512", "cpu_avx512"),
            ("AVX-512 BF16", "cpu_avx512_bf16"),
            ("AMX", "cpu_amx"),
        )
        if record[column] == "True"
    ]
    return {"hardware": record["hardware"], "cpu_model": record["cpu_model_name"], "instruction_sets": sets}


def cost_rows(runs: list[dict[str, Any]], price_per_hour: float) -> list[dict[str, Any]]:
    """One row per cell: its settings that vary, its run count, throughput and costs (with intervals)."""
    rows = aggregate(runs, CELL_KEYS, FIGURES)
    varying = [key for key in CELL_KEYS if len({row[key] for row in rows}) > 1]
    result = []
    for row in sorted(rows, key=lambda r: tuple(str(r[key]) for key in varying)):
        per_request = [
            cost_per_thousand_requests(row[f"req_per_s{end}"], price_per_hour)
            for end in ("", "_ci95_high", "_ci95_low")
        ]
        per_token = [
            cost_per_million_output_tokens(row[f"output_tok_per_s{end}"], price_per_hour)
            for end in ("", "_ci95_high", "_ci95_low")
        ]
        result.append(
            {
                "cell": {key: row[key] for key in varying},
                "runs": row["n"],
                "req_per_s": row["req_per_s"],
                "output_tok_per_s": row["output_tok_per_s"],
                # A higher rate is a lower cost: the interval's ends swap.
                "cost_per_1000_requests": per_request[0],
                "cost_per_1000_requests_ci95": per_request[1:],
                "cost_per_million_output_tokens": per_token[0],
                "cost_per_million_output_tokens_ci95": per_token[1:],
            }
        )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=DEFAULT_RUNS, help="a reproduction's runs.csv")
    parser.add_argument("--price-per-hour", type=float, default=1.0, help="the machine's price per hour")
    parser.add_argument("--json", type=Path, default=DEFAULT_OUTPUT, help="where to write the data file")
    args = parser.parse_args(argv)
    runs, left_out = read_quiet_runs(ROOT / args.runs)
    commits = sorted({str(run["lab_git_commit"]) for run in runs})
    data = {
        "source": str(args.runs),
        "lab_commits": commits,
        "price_per_hour": args.price_per_hour,
        "machine": machine_record(runs),
        "runs_used": len(runs),
        "runs_left_out_busy": left_out,
        "rows": cost_rows(runs, args.price_per_hour),
    }
    (ROOT / args.json).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    for row in data["rows"]:
        print(row["cell"], f"{row['cost_per_1000_requests']:.4f} per 1,000 requests")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
