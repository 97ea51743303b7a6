"""A real run stores the measurement columns: host contention, steady throughput, warnings.

Against the OpenAI stub as an external target (it exports no /metrics, so the steady
figures come from the client's series), through the real runner and k6.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from db import store
from db.models import RunStatus
from lab.measurement.checks import STEADY_FROM_CLIENT
from lab.settings import Settings
from tests.support.integration_lab import Lab, stub_spec

pytestmark = pytest.mark.integration


def test_a_stub_run_stores_contention_steady_throughput_and_warnings(tmp_path: Path, stub) -> None:
    lab = Lab(tmp_path / "lab")
    # A threshold no machine reaches: this run must not carry the contention warning,
    # while its 6 s at 0.2 s per request is long enough for the latency check.
    lab.settings = Settings(data_dir=tmp_path / "lab", contention_warning_cpu_percent=10_000)
    lab.worker.settings = lab.settings
    [run_id] = lab.enqueue(stub_spec(stub.url, duration_s=6, vus=2))
    lab.run_queue()
    with Session(lab.engine) as session:
        run = store.get_run(session=session, run_id=run_id)
        assert run is not None
        assert run.status == RunStatus.DONE, run.status_reason
        assert run.other_cpu_percent_avg is not None and run.other_cpu_percent_avg >= 0
        assert run.steady_source == STEADY_FROM_CLIENT
        # 2 VUs at about 0.2 s per request of 128 tokens: ~10 req/s when the machine is quiet.
        assert run.steady_req_per_s and 0 < run.steady_req_per_s <= 12
        assert run.steady_output_tok_per_s == pytest.approx(run.steady_req_per_s * 128, rel=0.01)
        assert "other processes used" not in (run.measurement_warnings or "")
        stored = store.get_run_series(session=session, run_id=run_id)
        assert stored is not None
        series = stored.series
        assert "other_cpu_percent" in series["resources"] and "steal_cpu_percent" in series["resources"]


def test_a_zero_threshold_flags_the_run_as_contended(tmp_path: Path, stub) -> None:
    lab = Lab(tmp_path / "lab")
    lab.settings = Settings(data_dir=tmp_path / "lab", contention_warning_cpu_percent=0)
    lab.worker.settings = lab.settings
    [run_id] = lab.enqueue(stub_spec(stub.url, duration_s=4, vus=1))
    lab.run_queue()
    with Session(lab.engine) as session:
        run = store.get_run(session=session, run_id=run_id)
        assert run is not None
        assert run.status == RunStatus.DONE, run.status_reason
        if run.other_cpu_percent_avg:  # exactly 0 only on an idle machine
            assert "other processes used" in (run.measurement_warnings or "")
