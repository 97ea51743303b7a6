"""The trace recorder (services/traces/): lines in arrival order, rotation by size, a failed
write that stops the recording in one log line, no text unless asked, and the refusals."""

from __future__ import annotations

import errno
import io
import json
import logging
from pathlib import Path
from typing import BinaryIO

import pytest

from lab.workloads.trace_file import parse_trace
from services.cache_proxy.cli import checked_settings, parse_args
from services.traces.answers import answer_tokens
from services.traces.blocks import ByteTokens, HashIds, chained_block_digests
from services.traces.lines import TraceLines
from services.traces.recorder import RecordingError, TraceRecorder, check_recording, rotated_path

CHAT_PATH = "/v1/chat/completions"
SECRET = "the quick brown fox keeps its secret"


def chat_body(content: str, *, max_tokens: int = 8) -> bytes:
    return json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens}
    ).encode()


def usage_answer(completion_tokens: int) -> bytes:
    return json.dumps(
        {"choices": [{"message": {"content": "x"}}], "usage": {"completion_tokens": completion_tokens}}
    ).encode()


def recorder(tmp_path: Path, *, record_text: bool = False, block_tokens: int = 4, **options: object) -> TraceRecorder:
    lines = TraceLines(ByteTokens(), block_tokens=block_tokens, record_text=record_text)
    return TraceRecorder(tmp_path / "day.jsonl", lines, **options)  # type: ignore[arg-type]  # options are the recorder's keywords


def observe(recorder: TraceRecorder, at_s: float, body: bytes, answer: bytes | None = None, **headers: str) -> None:
    ticket = recorder.arrive(at_s)
    pairs = [(name.replace("_", "-").encode(), value.encode()) for name, value in headers.items()]
    recorder.observe(ticket, CHAT_PATH, body, pairs, answer)


def written(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_lines_follow_the_arrival_order_and_read_back_as_a_trace(tmp_path: Path) -> None:
    rec = recorder(tmp_path)
    rec._open_next()
    first, second = rec.arrive(10.0), rec.arrive(10.25)
    # The second request finishes first (a hit overtaking a long miss): its line waits.
    rec.observe(second, CHAT_PATH, chat_body("prefix shared, then B"), [], usage_answer(3))
    rec.write_pending()
    assert (tmp_path / "day.jsonl").read_text() == ""
    rec.observe(first, CHAT_PATH, chat_body("prefix shared, then A"), [(b"x-session-id", b"s-7")], usage_answer(5))
    rec.close()
    lines = written(tmp_path / "day.jsonl")
    assert [line["timestamp"] for line in lines] == [0.0, 250.0]
    assert [line["output_length"] for line in lines] == [5, 3]
    assert lines[0]["session_id"] == "s-7" and "session_id" not in lines[1]
    # Equal leading blocks, equal leading ids; ids numbered from 0 as first seen.
    assert lines[0]["hash_ids"][0] == 0 and lines[0]["hash_ids"][:2] == lines[1]["hash_ids"][:2]
    assert lines[0]["hash_ids"][-1] != lines[1]["hash_ids"][-1]
    requests = parse_trace((tmp_path / "day.jsonl").read_text().splitlines(), block_tokens=4)
    assert len(requests) == 2 and rec.recorded == 2


def test_hash_ids_are_chained_block_digests_numbered_as_first_seen() -> None:
    ids = HashIds()
    assert ids.ids_of([1, 2, 3, 4, 5], 2) == [0, 1, 2]
    assert ids.ids_of([1, 2, 3, 4, 6], 2) == [0, 1, 3]  # the last block differs
    assert ids.ids_of([9, 9, 3, 4], 2) == [4, 5]  # same block [3, 4] after another start: another id
    assert ids.ids_of([1, 2, 3, 4], 2) == [0, 1]
    assert len(chained_block_digests(list(range(10)), 4)) == 3


def test_files_rotate_by_size_each_a_trace_of_its_own(tmp_path: Path) -> None:
    rec = recorder(tmp_path, rotate_bytes=300)
    rec._open_next()
    for index in range(12):
        observe(rec, 100.0 + index, chat_body(f"request {index} " * 3), usage_answer(4))
    rec.close()
    assert len(rec.files) >= 3 and rec.files[1] == rotated_path(tmp_path / "day.jsonl", 1) == tmp_path / "day.1.jsonl"
    total = 0
    for path in rec.files:
        assert path.stat().st_size <= 300
        lines = written(path)
        assert lines[0]["timestamp"] == 0.0 and min(min(line["hash_ids"]) for line in lines) == 0
        total += len(parse_trace(path.read_text().splitlines(), block_tokens=4))
    assert total == 12 == rec.recorded


class FullDisk(io.BytesIO):
    """A file whose writes fail as on a full disk."""

    def write(self, data: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_stops_the_recording_with_one_log_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    def opener(path: Path) -> BinaryIO:
        return FullDisk()

    rec = recorder(tmp_path, opener=opener)
    rec._open_next()
    with caplog.at_level(logging.ERROR, logger="services.traces.recorder"):
        for index in range(3):
            observe(rec, float(index), chat_body(f"prompt {index}"), usage_answer(2))
            rec.write_pending()
        observe(rec, 5.0, chat_body("after the stop"))
        rec.close()
    assert rec.stopped and rec.recorded == 0
    records = [record for record in caplog.records if record.name == "services.traces.recorder"]
    assert len(records) == 1
    assert "trace recording stopped" in records[0].getMessage() and "No space left" in records[0].getMessage()


def test_no_text_is_written_unless_asked(tmp_path: Path) -> None:
    rec = recorder(tmp_path)
    rec._open_next()
    observe(rec, 1.0, chat_body(SECRET), usage_answer(2))
    rec.close()
    raw = (tmp_path / "day.jsonl").read_text()
    assert "quick brown" not in raw and set(json.loads(raw)) == {
        "timestamp",
        "input_length",
        "output_length",
        "hash_ids",
    }

    (tmp_path / "text").mkdir()
    rec = recorder(tmp_path / "text", record_text=True)
    rec._open_next()
    observe(rec, 1.0, chat_body(SECRET), usage_answer(2))
    rec.close()
    [request] = parse_trace((tmp_path / "text" / "day.jsonl").read_text().splitlines(), block_tokens=4)
    assert request.messages == [{"role": "user", "content": SECRET}]


def test_a_body_without_a_prompt_is_not_recorded(tmp_path: Path) -> None:
    rec = recorder(tmp_path)
    rec._open_next()
    observe(rec, 1.0, b"not json")
    observe(rec, 2.0, chat_body("kept"))
    rec.close()
    [line] = written(tmp_path / "day.jsonl")
    assert line["timestamp"] == 0.0 and line["output_length"] == 8  # no answer: the length asked for
    assert rec.unrecordable == 1


def test_output_lengths_come_from_usage_or_are_counted_in_a_stream() -> None:
    assert answer_tokens(usage_answer(17)).output == 17
    chunk = b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
    assert answer_tokens(chunk * 5 + b"data: [DONE]\n\n").output == 5
    with_usage = chunk + b'data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":12}}\n\ndata: [DONE]\n\n'
    assert answer_tokens(with_usage) == type(answer_tokens(None))(9, 12)
    assert answer_tokens(b'{"error": "overloaded"}').output is None


def test_a_recording_that_cannot_be_made_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(RecordingError, match="more than 0") as caught:
        check_recording(str(tmp_path / "a.jsonl"), rotate_mb=0, block_tokens=512, tokenizer=None)
    assert "\n" not in str(caught.value)
    with pytest.raises(RecordingError, match=r"cannot record the trace to .*No such file or directory"):
        check_recording(str(tmp_path / "missing" / "a.jsonl"), rotate_mb=None, block_tokens=512, tokenizer=None)
    (tmp_path / "old.jsonl").write_text('{"timestamp": 0}\n')
    with pytest.raises(RecordingError, match="already holds one"):
        check_recording(str(tmp_path / "old.jsonl"), rotate_mb=None, block_tokens=512, tokenizer=None)
    with pytest.raises(RecordingError, match="not a tokenizer folder"):
        check_recording(str(tmp_path / "b.jsonl"), rotate_mb=None, block_tokens=512, tokenizer=str(tmp_path))


def test_the_proxy_command_line_refuses_bad_recordings_before_starting(tmp_path: Path) -> None:
    base = ["--upstream", "http://127.0.0.1:1", "--port", "1"]
    unwritable = str(tmp_path / "missing" / "t.jsonl")
    assert "cannot record the trace" in (
        checked_settings(parse_args([*base, "--cache", "off", "--record-trace", unwritable])) or ""
    )
    assert "more than 0" in (
        checked_settings(
            parse_args(
                [*base, "--cache", "off", "--record-trace", str(tmp_path / "t.jsonl"), "--record-rotate-mb", "0"]
            )
        )
        or ""
    )
    assert checked_settings(parse_args(base)) == "--redis-url is required unless --cache off"
    assert (
        checked_settings(parse_args([*base, "--cache", "off", "--record-text"]))
        == "--record-text needs --record-trace FILE"
    )
    assert checked_settings(parse_args([*base, "--cache", "off", "--record-trace", str(tmp_path / "ok.jsonl")])) is None


def test_a_recording_proxy_is_started_with_its_recording(tmp_path: Path) -> None:
    from services.catalog import build_service, cache_proxy_config

    config = cache_proxy_config(
        upstream_url="http://127.0.0.1:1",
        redis_url="redis://127.0.0.1:2/0",
        record_trace=str(tmp_path / "recorded-trace.jsonl"),
        record_tokenizer="models/SmolLM2-135M-Instruct",
        record_block_tokens=64,
    )
    argv = build_service("cache-proxy", config, log_path=tmp_path / "p.log", port=1).resolved_argv()
    assert argv[argv.index("--record-trace") + 1] == str(tmp_path / "recorded-trace.jsonl")
    assert argv[argv.index("--record-tokenizer") + 1] == "models/SmolLM2-135M-Instruct"
    assert argv[argv.index("--record-block-tokens") + 1] == "64"
    plain = cache_proxy_config(upstream_url="http://127.0.0.1:1", redis_url="redis://127.0.0.1:2/0")
    assert (
        "--record-trace" not in build_service("cache-proxy", plain, log_path=tmp_path / "p.log", port=1).resolved_argv()
    )
