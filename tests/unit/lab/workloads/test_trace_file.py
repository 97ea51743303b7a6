"""A trace read line by line: each bad line refused in one line naming its number and rule."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lab.settings import get_settings
from lab.workloads.input_files import InputFileError
from lab.workloads.trace_file import TraceError, parse_trace, read_trace

FIXTURE = Path(__file__).resolve().parents[3] / "fixtures" / "traces" / "mooncake_sample.jsonl"


def line(**fields: object) -> str:
    base: dict[str, object] = {"timestamp": 0, "input_length": 600, "output_length": 10, "hash_ids": [1, 2]}
    return json.dumps({key: value for key, value in {**base, **fields}.items() if value is not None})


def test_the_sample_trace_reads_with_its_sessions_and_sha256() -> None:
    trace = read_trace(FIXTURE, block_tokens=32)
    assert len(trace.requests) == 24
    assert trace.requests[0].hash_ids == (1000, 1001, 1_000_000) and trace.requests[0].session_id == "s1"
    assert len(trace.sha256) == 64
    assert [request.line for request in trace.requests] == list(range(1, 25))


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (["{not json"], r"^line 1: not JSON \("),
        (["[1, 2]"], r"^line 1: not a JSON object$"),
        ([line(), line(hash_ids=None)], r"^line 2: missing field 'hash_ids' \("),
        ([line(timestamp=None)], r"^line 1: missing field 'timestamp'"),
        (
            [line(timestamp=500), line(timestamp=100)],
            r"^line 2: timestamp 100 is earlier than line 1's 500 \(.*backwards",
        ),
        ([line(output_length=0)], r"^line 1: output_length is 0 \(lengths must be at least 1\)$"),
        ([line(input_length=0, hash_ids=[])], r"^line 1: input_length is 0 \(lengths must be at least 1\)$"),
        ([line(hash_ids=[1, 2, 3])], r"^line 1: 3 hash ids, but input_length 600 needs at most 2 \(blocks of 512"),
        ([line(input_length=1.5)], r"^line 1: input_length must be a whole number"),
        ([line(timestamp=-1)], r"^line 1: timestamp must be a number of ms"),
        (["", "  "], r"^the trace has no requests"),
    ],
)
def test_each_bad_line_is_refused_in_one_line_with_its_number_and_rule(lines: list[str], message: str) -> None:
    with pytest.raises(TraceError, match=message) as caught:
        parse_trace(lines)
    assert "\n" not in str(caught.value)


def test_a_line_with_its_own_text_needs_no_hash_ids_and_keeps_its_messages() -> None:
    messages = [{"role": "user", "content": "hello"}]
    trace = parse_trace(
        [
            json.dumps({"timestamp": 0, "output_length": 4, "input_text": "hi there"}),
            json.dumps({"timestamp": 5, "output_length": 4, "messages": messages}),
        ]
    )
    assert trace[0].messages == [{"role": "user", "content": "hi there"}] and trace[0].hash_ids == ()
    assert trace[1].messages == messages


def test_a_file_refusal_names_the_file_and_the_line(tmp_path: Path) -> None:
    path = tmp_path / "prod.jsonl"
    path.write_text(line() + "\n" + line(timestamp=-5) + "\n")
    with pytest.raises(TraceError, match=r"^trace prod.jsonl: line 2: timestamp must be"):
        read_trace(path)


def test_not_a_regular_file_and_over_the_size_limit_are_refused_by_the_file_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    with pytest.raises(InputFileError, match=r"is a FIFO \(named pipe\), not a regular file"):
        read_trace(fifo)
    big = tmp_path / "big.jsonl"
    big.write_text("\n".join(line(timestamp=i) for i in range(20)))
    monkeypatch.setenv("LAB_INPUT_FILE_MAX_BYTES", "200")
    get_settings.cache_clear()
    try:
        with pytest.raises(InputFileError, match=r"is larger than 200 bytes, the limit .*LAB_INPUT_FILE_MAX_BYTES"):
            read_trace(big)
    finally:
        monkeypatch.delenv("LAB_INPUT_FILE_MAX_BYTES")
        get_settings.cache_clear()


def test_a_changed_file_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(line() + "\n")
    first = read_trace(path)
    path.write_text(line() + "\n" + line(timestamp=3) + "\n")
    second = read_trace(path)
    assert len(second.requests) == 2 and second.sha256 != first.sha256
