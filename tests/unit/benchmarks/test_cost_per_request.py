"""benchmarks/cost_per_request.py: the committed data file is what the published reproduction's runs
give, cell by cell (two workloads never one row), and a price turns into a cost the right way up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import cost_per_request

ROOT = Path(__file__).resolve().parents[3]


def test_the_committed_data_file_is_the_reproductions_runs_costed(tmp_path: Path) -> None:
    out = tmp_path / "cost.json"
    assert cost_per_request.main(["--json", str(out)]) == 0
    assert json.loads(out.read_text()) == json.loads((ROOT / cost_per_request.DEFAULT_OUTPUT).read_text())


def test_a_cell_is_one_workload_and_one_load_and_a_faster_rate_costs_less() -> None:
    runs, left_out = cost_per_request.read_quiet_runs(ROOT / cost_per_request.DEFAULT_RUNS)
    rows = cost_per_request.cost_rows(runs, price_per_hour=2.0)
    cells = [tuple(sorted(row["cell"].items())) for row in rows]
    assert len(cells) == len(set(cells)) and {"backend", "workload", "vus"} <= set(rows[0]["cell"])
    assert left_out > 0 and all(not run["measurement_warnings"] for run in runs)
    for row in rows:
        low, high = row["cost_per_1000_requests_ci95"]
        assert low <= row["cost_per_1000_requests"] <= high
        assert row["cost_per_1000_requests"] == pytest.approx(2.0 / (row["req_per_s"] * 3.6))
    assert cost_per_request.cost_per_thousand_requests(0.0, 1.0) is None
