"""The live per-second view: k6's NDJSON read incrementally, samples on the load's clock."""

from __future__ import annotations

from pathlib import Path

from lab.measurement.k6_ndjson_files import stream_series
from lab.measurement.live import NdjsonTail, live_progress, samples_series

FIXTURE = Path(__file__).resolve().parents[3] / "fixtures" / "k6" / "number_story.ndjson"


def test_tail_read_in_pieces_counts_what_the_whole_file_does(tmp_path: Path) -> None:
    data = FIXTURE.read_bytes()
    path = tmp_path / "k6.ndjson"
    path.write_bytes(b"")
    tail = NdjsonTail(path)
    offsets = []
    for start in range(0, len(data), 777):  # pieces that cut lines in the middle
        with open(path, "ab") as handle:
            handle.write(data[start : start + 777])
        tail.read_new()
        offsets.append(tail.offset_bytes)
    whole = stream_series(FIXTURE)
    assert tail.offset_bytes == len(data) and offsets == sorted(offsets)
    assert tail.requests_ok_total == whole.requests_ok_total
    assert tail.requests_failed_total == whole.requests_failed_total
    series, _ = tail.stream.finish()
    assert series.output_tokens_total == whole.output_tokens_total
    assert tail.read_new() == 0  # nothing new, nothing read again


def test_series_leaves_out_the_second_still_filling_and_counts_only_workload_requests(tmp_path: Path) -> None:
    tail = NdjsonTail(FIXTURE)
    tail.read_new()
    whole = stream_series(FIXTURE)
    assert whole.start_epoch_s is not None
    first = int(whole.start_epoch_s)
    last = first + len(whole) - 1
    series = tail.series(origin_epoch_s=first, until_epoch_s=last)
    assert series["time_s"] == list(range(last - first))
    assert series["requests_ok"] == whole.requests_ok[: last - first]
    assert all(value is None or value > 0 for value in series["latency_avg_s"])


def test_samples_series_keeps_the_named_keys_on_the_load_clock() -> None:
    samples = [
        {
            "t": 100.0 + i,
            "naive_cpu_percent": 90.123,
            "k6_cpu_percent": 3.0,
            "host_cpu_percent": 99.0,
            "other_cpu_percent": 5.5,
            "naive_rss_mb": 600.0,
        }
        for i in range(5)
    ]
    series = samples_series(
        samples,
        origin_epoch_s=101.0,
        keys=("other_cpu_percent",),
        suffixes=("_cpu_percent",),
        exclude=("host_cpu_percent",),
    )
    assert series["time_s"] == [0.0, 1.0, 2.0, 3.0]
    assert set(series) == {"time_s", "naive_cpu_percent", "k6_cpu_percent", "other_cpu_percent"}
    assert series["naive_cpu_percent"][0] == 90.12


def test_live_progress_without_samples_is_empty_not_an_error(tmp_path: Path) -> None:
    live = live_progress(
        NdjsonTail(tmp_path / "absent.ndjson"),
        origin_epoch_s=100.0,
        resource_samples=[],
        server_samples=[],
        now_epoch_s=103.5,
    )
    assert live["k6"]["time_s"] == [0, 1, 2]
    assert live["k6"]["requests_ok"] == [0, 0, 0]
    assert live["cpu"] == {} and live["server"] == {}
