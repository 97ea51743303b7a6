"""k6's samples read as they arrive: pieces of any size, bounded memory per second, the pipe
reader (a slow one loses nothing, a full disk under the raw copy ends the load) and the
``keep_raw`` setting. No process is started: the pipe is an ``os.pipe``."""

from __future__ import annotations

import errno
import gzip
import os
import random
import re
import threading
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from lab.measurement.k6_ndjson import LATE_SAMPLE_WINDOW_S, SampleStream
from lab.measurement.k6_ndjson_files import stream_file
from lab.measurement.k6_results import percentile
from lab.measurement.live import StreamTail
from lab.run import k6_driver
from lab.run.k6_driver import K6Process, raw_output_path, script_path
from lab.settings import Settings, settings_error_line

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "k6"
FIXTURE = FIXTURES / "number_story.ndjson"
STREAMED = FIXTURES / "stream.ndjson"


def _fed_in_pieces(data: bytes, seed: int) -> SampleStream:
    stream = SampleStream()
    rng = random.Random(seed)
    position = 0
    while position < len(data):
        size = rng.randint(1, 3000)
        stream.feed(data[position : position + size])
        position += size
    return stream


@pytest.mark.parametrize("fixture", [FIXTURE, STREAMED])
def test_pieces_cut_anywhere_give_what_the_whole_file_gives(fixture: Path) -> None:
    whole_series, whole_requests = stream_file(fixture)
    series, requests = _fed_in_pieces(fixture.read_bytes(), seed=7).finish()
    assert series.rows() == whole_series.rows() and series.latency == whole_series.latency
    assert list(requests.latency_s) == list(whole_requests.latency_s) and requests.ok == whole_requests.ok
    assert list(requests.ttft_s) == list(whole_requests.ttft_s) and list(requests.tpot_s) == list(whole_requests.tpot_s)
    assert len(requests) == series.requests_ok_total + series.requests_failed_total > 0


def test_finish_twice_gives_the_same_figures() -> None:
    stream = _fed_in_pieces(FIXTURE.read_bytes(), seed=1)
    first, _ = stream.finish()
    again, _ = stream.finish()
    assert first.rows() == again.rows() and first.latency == again.latency


def _success_line(template: str, epoch_s: float, latency_ms: float) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(epoch_s))) + f".{int(epoch_s % 1 * 1e6):06d}Z"
    line = re.sub(r'"time":"[^"]+"', f'"time":"{stamp}"', template)
    return re.sub(r'"value":[^,]+,', f'"value":{latency_ms},', line)


def _template(metric: str) -> str:
    for line in FIXTURE.read_text().splitlines():
        if (
            f'"metric":"{metric}","type":"Point"' in line
            and '"expected_response":"true"' in line
            and '"lab_request":"chat"' in line
        ):
            return line
    raise AssertionError(metric)


def test_memory_per_second_is_bounded_and_each_second_exact() -> None:
    template = _template("http_req_duration")
    stream = SampleStream()
    rng = random.Random(3)
    expected: dict[int, list[float]] = {}
    open_seconds = []
    for second in range(300):
        lines = []
        for _ in range(50):
            latency_ms = round(rng.uniform(1, 100), 3)
            expected.setdefault(second, []).append(latency_ms)
            lines.append(_success_line(template, 1_800_000_000 + second + rng.random() * 0.9, latency_ms))
        stream.feed(("\n".join(lines) + "\n").encode())
        open_seconds.append(len(stream._buckets.latencies_ms))
    assert max(open_seconds) <= LATE_SAMPLE_WINDOW_S + 2  # raw values kept for the window only
    series, requests = stream.finish()
    assert len(series) == 300 and len(requests) == 300 * 50
    for index, second in enumerate(sorted(expected)):
        values = sorted(expected[second])
        assert series.requests_ok[index] == 50
        p95_ms = percentile(values, 0.95)
        assert p95_ms is not None and series.latency_p95_s[index] == pytest.approx(p95_ms / 1000, rel=1e-12)
    every = sorted(value for values in expected.values() for value in values)
    p99_ms = percentile(every, 0.99)
    assert p99_ms is not None and series.latency.p99_s == pytest.approx(p99_ms / 1000, rel=1e-12)


def test_a_sample_later_than_the_window_still_counts() -> None:
    template = _template("http_req_duration")
    stream = SampleStream()
    stream.feed((_success_line(template, 1_800_000_000.1, 10.0) + "\n").encode())
    stream.feed((_success_line(template, 1_800_000_000 + LATE_SAMPLE_WINDOW_S + 5, 20.0) + "\n").encode())
    stream.feed((_success_line(template, 1_800_000_000.5, 30.0) + "\n").encode())  # late: its second was closed
    series, _ = stream.finish()
    assert series.requests_ok[0] == 2 and series.latency_avg_s[0] == pytest.approx(0.020)
    assert series.requests_ok_total == 3


def test_a_gzip_copy_reads_like_the_plain_file(tmp_path: Path) -> None:
    copy = tmp_path / "k6.ndjson.gz"
    copy.write_bytes(gzip.compress(FIXTURE.read_bytes()))
    assert stream_file(copy)[0].rows() == stream_file(FIXTURE)[0].rows()


@pytest.fixture(autouse=True)
def _no_port_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """K6Process asks for a free port for k6's API; k6 never starts here, so no socket is opened."""
    monkeypatch.setattr(k6_driver, "find_free_port", lambda: 6565)


def _process(tmp_path: Path, keep_raw: str = "none") -> K6Process:
    return K6Process(
        script=script_path("number-story"),
        env={},
        summary_path=tmp_path / "summary.json",
        ndjson_path=tmp_path / "k6.ndjson",
        log_path=tmp_path / "k6.log",
        keep_raw=keep_raw,
    )


def _write_in_pieces(write_fd: int, data: bytes, piece_bytes: int = 4096) -> threading.Thread:
    def write() -> None:
        with os.fdopen(write_fd, "wb", buffering=0) as pipe:
            for start in range(0, len(data), piece_bytes):
                pipe.write(data[start : start + piece_bytes])

    writer = threading.Thread(target=write)
    writer.start()
    return writer


@pytest.mark.parametrize("keep_raw", ["none", "compressed", "all"])
def test_the_pipe_reader_keeps_what_keep_raw_asks(tmp_path: Path, keep_raw: str) -> None:
    data = FIXTURE.read_bytes() * 3
    process = _process(tmp_path, keep_raw)
    read_fd, write_fd = os.pipe()
    writer = _write_in_pieces(write_fd, data)
    process.drain(read_fd)
    writer.join()
    os.close(read_fd)
    with process.samples_lock:
        series, _ = process.samples.finish()
    assert series.requests_ok_total == 3 * stream_file(FIXTURE)[0].requests_ok_total
    kept = sorted(path.name for path in tmp_path.iterdir())
    assert kept == {"none": [], "compressed": ["k6.ndjson.gz"], "all": ["k6.ndjson"]}[keep_raw]
    if keep_raw == "compressed":
        assert gzip.decompress((tmp_path / "k6.ndjson.gz").read_bytes()) == data
    if keep_raw == "all":
        assert (tmp_path / "k6.ndjson").read_bytes() == data


def test_a_slow_reader_loses_no_sample_and_the_live_view_still_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original_feed = SampleStream.feed

    def slow_feed(self: SampleStream, data: bytes) -> int:
        time.sleep(0.002)  # far slower than the writer: the pipe stays full
        return original_feed(self, data)

    monkeypatch.setattr(SampleStream, "feed", slow_feed)
    data = FIXTURE.read_bytes() * 20
    process = _process(tmp_path)
    read_fd, write_fd = os.pipe()
    writer = _write_in_pieces(write_fd, data, piece_bytes=512)
    reader = threading.Thread(target=process.drain, args=(read_fd,))
    reader.start()
    tail = process.live_tail()
    counts = []
    while reader.is_alive():
        counts.append(tail.requests_ok_total)  # the lock is held per piece only
        time.sleep(0.01)
    writer.join()
    os.close(read_fd)
    assert counts == sorted(counts) and isinstance(tail, StreamTail)
    with process.samples_lock:
        series, requests = process.samples.finish()
    assert series.requests_ok_total == 20 * stream_file(FIXTURE)[0].requests_ok_total
    assert len(requests) == 20 * len(stream_file(FIXTURE)[1])


class _FullDisk:
    def write(self, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device", "/data/runs/3/k6.ndjson")

    def close(self) -> None:
        pass


def test_a_full_disk_under_the_raw_copy_keeps_every_figure_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    process = _process(tmp_path, "all")
    monkeypatch.setattr(process, "_open_raw_copy", lambda: _FullDisk())
    read_fd, write_fd = os.pipe()
    writer = _write_in_pieces(write_fd, FIXTURE.read_bytes())
    process.drain(read_fd)
    writer.join()
    os.close(read_fd)
    assert process.output_error is not None and process.output_error.errno == errno.ENOSPC
    with process.samples_lock:
        assert process.samples.finish()[0].requests_ok_total == stream_file(FIXTURE)[0].requests_ok_total


def test_keep_raw_refuses_an_unknown_value_in_one_line() -> None:
    with pytest.raises(ValidationError) as caught:
        Settings(keep_raw="zip")
    line = settings_error_line(caught.value)
    assert line == "LAB_KEEP_RAW: keep_raw must be one of none, compressed, all, not 'zip'"
    assert Settings().keep_raw == "none"
    with pytest.raises(ValueError, match="keep_raw"):
        raw_output_path(Path("k6.ndjson"), "zip")
    assert raw_output_path(Path("/r/k6.ndjson"), "compressed") == Path("/r/k6.ndjson.gz")


def test_the_collector_reads_a_raw_copy_only_when_no_k6_process_is_at_hand(tmp_path: Path, engine) -> None:
    from lab.run.collect import RunCollector

    def collector(k6_process=None) -> RunCollector:
        return RunCollector(
            engine=engine,
            services=None,  # type: ignore[arg-type]  # the collector reads no service here
            run_id=1,
            run_dir=tmp_path,
            contention_threshold_percent=25.0,
            k6_process=k6_process,
        )

    assert collector().stream_results() is None  # keep_raw none and no process: nothing to read
    (tmp_path / "k6.ndjson.gz").write_bytes(gzip.compress(FIXTURE.read_bytes()))
    from_copy = collector().stream_results()
    assert from_copy is not None and from_copy[0].rows() == stream_file(FIXTURE)[0].rows()
    process = _process(tmp_path / "k6")
    read_fd, write_fd = os.pipe()
    writer = _write_in_pieces(write_fd, FIXTURE.read_bytes() * 2)
    process._reader = threading.Thread(target=process.drain, args=(read_fd,))
    process._reader.start()
    writer.join()
    from_pipe = collector(lambda: process).stream_results()  # the pipe's figures win over a copy
    os.close(read_fd)
    assert from_pipe is not None and from_pipe[0].requests_ok_total == 2 * from_copy[0].requests_ok_total


def test_the_stream_counts_error_answers_as_they_come():
    from lab.measurement.k6_ndjson import SampleStream

    line = (
        '{"metric":"lab_request_failures","type":"Point","data":{"time":"2026-12-01T10:00:00Z","value":1,'
        '"tags":{"lab_request":"chat","lab_error":"400: the prompt is longer than the context"}}}\n'
    )
    stream = SampleStream()
    data = (line * 3).encode()
    stream.feed(data[:50])
    stream.feed(data[50:])
    assert dict(stream.error_answers) == {"400: the prompt is longer than the context": 3}
