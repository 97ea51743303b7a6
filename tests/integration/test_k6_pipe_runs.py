"""Real runs (k6, the OpenAI stub, the lab's worker in this process) whose samples come
through k6's stdout pipe: no raw output left on disk unless ``keep_raw`` asks, the same
figures as k6's summary, and a reader far slower than k6 that loses no sample. A few
seconds each."""

from __future__ import annotations

import time

import pytest
from sqlalchemy.orm import Session

from db import store
from db.models import RunStatus
from lab.measurement import request_figures
from lab.measurement.k6_ndjson import SampleStream
from lab.measurement.k6_ndjson_files import stream_file
from lab.run import k6_driver
from tests.support.integration_lab import Lab, stub_spec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _requests_stored(lab: Lab, run_id: int) -> int:
    with Session(lab.engine) as session:
        row = store.get_run_requests(session=session, run_id=run_id)
        assert row is not None
        return len(request_figures.decode(latency_s=row.latency_s, ok=row.ok, ttft_s=row.ttft_s, tpot_s=row.tpot_s))


def test_a_run_leaves_no_raw_output_and_its_figures_match_k6s_summary(lab: Lab, stub) -> None:
    [run_id] = lab.enqueue(stub_spec(stub.url, duration_s=3, vus=4))
    lab.run_queue()
    run = lab.run(run_id)
    assert run.status == RunStatus.DONE, run.status_reason
    run_dir = lab.settings.runs_dir / str(run_id)
    assert not [path.name for path in run_dir.iterdir() if path.name.startswith("k6.ndjson")]
    series = lab.series(run_id)
    assert run.requests_ok is not None and run.requests_failed is not None
    assert sum(series["requests_ok"]) == run.requests_ok > 20  # the pipe's count is the summary's
    assert _requests_stored(lab, run_id) == run.requests_ok + run.requests_failed


def test_keep_raw_compressed_keeps_a_gzip_copy_with_the_same_samples(lab: Lab, stub) -> None:
    lab.settings.keep_raw = "compressed"
    [run_id] = lab.enqueue(stub_spec(stub.url, duration_s=3, vus=4))
    lab.run_queue()
    run = lab.run(run_id)
    assert run.status == RunStatus.DONE, run.status_reason
    copy = lab.settings.runs_dir / str(run_id) / "k6.ndjson.gz"
    series, per_request = stream_file(copy)
    assert series.requests_ok_total == run.requests_ok and len(per_request) == _requests_stored(lab, run_id)
    assert not (lab.settings.runs_dir / str(run_id) / "k6.ndjson").exists()


def test_a_slow_sample_reader_loses_nothing(lab: Lab, stub, monkeypatch: pytest.MonkeyPatch) -> None:
    original_feed = SampleStream.feed

    def slow_feed(self: SampleStream, data: bytes) -> int:
        time.sleep(0.05)  # 4 KiB per 50 ms: slower than k6 writes, the pipe fills and k6 keeps the rest
        return original_feed(self, data)

    monkeypatch.setattr(SampleStream, "feed", slow_feed)
    monkeypatch.setattr(k6_driver, "PIPE_READ_BYTES", 4096)
    monkeypatch.setattr(k6_driver, "PIPE_BUFFER_BYTES", 64 * 1024)
    monkeypatch.setattr(k6_driver, "PIPE_BATCH_BYTES", 0)
    [run_id] = lab.enqueue(stub_spec(stub.url, duration_s=4, vus=8))
    lab.run_queue()
    run = lab.run(run_id)
    assert run.status == RunStatus.DONE, run.status_reason
    assert run.requests_ok is not None and run.requests_failed is not None
    assert sum(lab.series(run_id)["requests_ok"]) == run.requests_ok > 50
    assert _requests_stored(lab, run_id) == run.requests_ok + run.requests_failed
