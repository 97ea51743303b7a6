"""`python -m lab capacity` for real: k6 against the stub OpenAI server (an external target),
every probe a stored run of one experiment, the stored per-request figures evaluated again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from db import store
from db.engine import make_engine
from tests.conftest import PROJECT_ROOT
from tests.stub_openai import StubServer

pytestmark = pytest.mark.integration


def lab_cli(data_dir: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "LAB_DATA_DIR": str(data_dir)}
    env.pop("LAB_DATABASE_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "lab", *argv], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def test_capacity_search_against_a_stub_target(tmp_path: Path) -> None:
    from services.processes import find_free_port

    with StubServer(port=find_free_port(), delay_s=0.05) as target:
        common = [
            "--backend",
            "external",
            "--target-url",
            target.url,
            "--probe-s",
            "3",
            "--min",
            "1",
            "--set",
            "warmup_requests=0",
            "--set",
            "load.graceful_stop_s=2",
            "--json",
        ]
        met = lab_cli(tmp_path, "capacity", *common, "--slo", "latency_p95_s=1", "--max", "2", "--max-probes", "3")
        broken = lab_cli(tmp_path, "capacity", *common, "--slo", "latency_p50_s=0.01", "--max", "4")
    assert met.returncode == 0, met.stderr[-2000:]
    result = json.loads(met.stdout)
    external = result["backends"]["external"]
    assert external["capacity_load"] == 2 and external["stop_reason"] == "the maximum load 2 met the SLO"
    assert external["goodput_req_per_s"] > 0
    run_ids = [run_id for probe in external["probes"] for run_id in probe["run_ids"]]
    assert len(run_ids) == 2
    engine = make_engine(f"sqlite:///{tmp_path / 'lab.db'}")
    with Session(engine) as session:
        runs = store.list_runs(session=session, run_ids=run_ids)
        assert {run.experiment_id for run in runs} == {result["experiment_id"]}
        assert all(
            run.slo_attainment == 1.0
            and (requests := store.get_run_requests(session=session, run_id=run.id)) is not None
            and requests.requests == run.requests_ok
            for run in runs
        )
    # 50 ms per answer never meets a 10 ms median: no capacity, after one probe.
    assert broken.returncode == 0, broken.stderr[-2000:]
    assert json.loads(broken.stdout)["backends"]["external"]["capacity_load"] is None
    again = lab_cli(tmp_path, "runs", "slo", str(run_ids[0]), "--slo", "latency_p50_s=0.01", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["slo_attainment"] == 0.0
