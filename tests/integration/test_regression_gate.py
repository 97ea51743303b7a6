"""The regression gate for real: ``python -m lab run --spec`` runs k6 against an OpenAI stub
(an external target), first a fast one, then one slowed by a known factor on the same URL, so
both are one configuration; the exported spec reruns the same run spec; the notebook API's
figures equal the CSV export's, on SQLite and on PostgreSQL.

Each run is 3 s of load with 2 VUs; the whole file takes about three minutes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy.orm import Session

from db import store
from db.engine import get_engine, make_engine
from db.models import Run, RunStatus
from lab import api
from lab.analysis.regression import EXIT_PASSED, EXIT_REGRESSION, EXIT_UNDECIDED
from services.processes import find_free_port
from tests.conftest import PROJECT_ROOT
from tests.stub_openai import StubServer

pytestmark = pytest.mark.integration

FAST_DELAY_S = 0.1
SLOWDOWN = 3.0  # the slow stub answers this many times later: about a third of the throughput
GATE = ["--baseline", "auto", "--fail-on-regression", "output_tok_per_s=5"]


def lab_cli(data_dir: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "LAB_DATA_DIR": str(data_dir)}
    env.pop("LAB_DATABASE_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "lab", *argv], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def write_spec(path: Path, port: int, repeats: int) -> Path:
    path.write_text(
        json.dumps(
            {
                "name": "gate",
                "repeats": repeats,
                "base": {
                    "backend": "external",
                    "target_url": f"http://127.0.0.1:{port}",
                    "model": "stub",
                    "max_tokens": 8,
                    "warmup_requests": 0,
                    "workload": {"prompts": 10_000},
                    "load": {"vus": 2, "duration_s": 3, "graceful_stop_s": 2},
                },
            }
        )
    )
    return path


def test_the_gate_passes_fails_and_cannot_decide_against_a_slowed_stub(tmp_path: Path) -> None:
    data, port = tmp_path / "lab", find_free_port()
    spec, single = write_spec(tmp_path / "gate.json", port, 3), write_spec(tmp_path / "one.json", port, 1)
    with StubServer(port=port, delay_s=FAST_DELAY_S):
        baseline = lab_cli(data, "run", "--spec", str(spec), "--json")
        assert baseline.returncode == 0, baseline.stderr[-2000:]
        records = json.loads(baseline.stdout)
        marked = lab_cli(data, "runs", "baseline", f"experiment:{records[0]['experiment_id']}")
        assert marked.returncode == 0, marked.stderr
        fast = lab_cli(data, "run", "--spec", str(spec), *GATE)
    assert fast.returncode == EXIT_PASSED, fast.stdout[-2000:] + fast.stderr[-2000:]
    assert "ok output_tok_per_s: " in fast.stdout and "gate passed" in fast.stdout
    with StubServer(port=port, delay_s=FAST_DELAY_S * SLOWDOWN):
        slow = lab_cli(data, "run", "--spec", str(spec), *GATE)
        one_a_side = lab_cli(
            data,
            "run",
            "--spec",
            str(single),
            "--baseline",
            f"run:{records[0]['run_id']}",
            "--fail-on-regression",
            "output_tok_per_s=5",
            "--json",
        )
    assert slow.returncode == EXIT_REGRESSION, slow.stdout[-2000:] + slow.stderr[-2000:]
    [line] = [line for line in slow.stdout.splitlines() if "REGRESSION" in line]
    assert line.strip().startswith("REGRESSION output_tok_per_s: -") and "significant (3 new vs 3" in line
    assert "gate FAILED: regression" in slow.stdout
    assert one_a_side.returncode == EXIT_UNDECIDED, one_a_side.stdout[-2000:] + one_a_side.stderr[-2000:]
    gate = json.loads(one_a_side.stdout)["gate"]
    assert gate["exit_code"] == EXIT_UNDECIDED and gate["verdicts"][0]["outcome"] == "undecided"
    assert "too few runs to tell (n=1 vs 1" in gate["verdicts"][0]["message"]
    with Session(make_engine(f"sqlite:///{data / 'lab.db'}")) as session:
        assert all(run.status == RunStatus.DONE for run in store.list_runs(session=session))


def test_an_exported_run_spec_reruns_the_same_spec_and_the_api_matches_the_csv(tmp_path: Path) -> None:
    data, port = tmp_path / "lab", find_free_port()
    with StubServer(port=port, delay_s=FAST_DELAY_S):
        first = lab_cli(data, "run", "--spec", str(write_spec(tmp_path / "gate.json", port, 1)), "--json")
        assert first.returncode == 0, first.stderr[-2000:]
        run_id = json.loads(first.stdout)[0]["run_id"]
        exported = tmp_path / "exported.json"
        assert lab_cli(data, "runs", "spec", str(run_id), "--output", str(exported)).returncode == 0
        again = lab_cli(data, "run", "--spec", str(exported), "--json")
    assert again.returncode == 0, again.stderr[-2000:]
    rerun_id = json.loads(again.stdout)[0]["run_id"]
    url = f"sqlite:///{data / 'lab.db'}"
    with Session(make_engine(url)) as session:
        original_run, rerun_run = session.get(Run, run_id), session.get(Run, rerun_id)
        assert original_run is not None and rerun_run is not None
        original, rerun = original_run.spec, rerun_run.spec
    assert set(rerun) == set(original)
    for field in original:
        assert rerun[field] == original[field], field
    csv_path = tmp_path / "runs.csv"
    assert lab_cli(data, "runs", "export", "--csv", str(csv_path)).returncode == 0
    assert_api_matches_csv(url, pd.read_csv(csv_path))


def assert_api_matches_csv(url: str, exported: pd.DataFrame) -> None:
    """api.runs() has the CSV's columns and figures; api.requests(id) its request counts."""
    from tests.support.api_runs import NUMERIC_FIGURES

    exported = exported.sort_values("run_id").reset_index(drop=True)
    frame = api.runs(database_url=url)
    assert list(frame.columns) == list(exported.columns) and frame.run_id.tolist() == exported.run_id.tolist()
    for figure in NUMERIC_FIGURES:
        pd.testing.assert_series_equal(frame[figure].astype(float), exported[figure].astype(float), obj=figure)
    for row in exported.itertuples():
        run_id, requests_ok = int(row.run_id), int(row.requests_ok)  # type: ignore[arg-type]  # a row's cells are typed as any cell
        requests = api.requests(run_id, database_url=url)
        assert requests.ok.sum() == requests_ok and len(requests) >= requests_ok > 0
        assert requests[requests.ok].latency_s.max() == pytest.approx(row.latency_max_s, rel=1e-5)


def test_the_api_and_baselines_on_postgresql(
    postgres_database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lab import baselines, cli
    from lab.baselines import Subject
    from lab.settings import get_settings
    from tests.support.api_runs import seed

    engine = get_engine(postgres_database_url)
    run_ids = seed(engine)
    with Session(engine) as session:
        [row] = baselines.mark_baseline(session=session, subject=Subject("experiment", 1))
        assert row.run_ids == run_ids
    monkeypatch.setenv("LAB_DATABASE_URL", postgres_database_url)
    get_settings.cache_clear()
    try:
        csv_path = tmp_path / "runs.csv"
        assert cli.main(["runs", "export", "--csv", str(csv_path)]) == 0
        frame = api.runs(database_url=postgres_database_url)
        exported = pd.read_csv(csv_path).sort_values("run_id").reset_index(drop=True)
        assert list(frame.columns) == list(exported.columns)
        pd.testing.assert_series_equal(frame.output_tok_per_s, exported.output_tok_per_s, check_names=False)
        assert len(api.requests(run_ids[0], database_url=postgres_database_url)) == 4
        assert (
            api.runs(status="done", launched_after="2000-01-01", database_url=postgres_database_url).run_id.tolist()
            == run_ids
        )
    finally:
        get_settings.cache_clear()
