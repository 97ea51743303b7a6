"""The trace workload: the trace as part of the spec (name, sha256, a changed file refused),
bad traces refused before anything is queued, and the request file it prepares."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from lab.backends import get_backend
from lab.specs.schema import ExperimentSpec, RunSpec, format_validation_error
from lab.workloads import get_workload
from lab.workloads.input_files import DatasetError
from lab.workloads.synthetic import load_tokenizer
from lab.workloads.trace import preview
from lab.workloads.uploads import list_uploads, record_upload, save_upload
from tests.support.traces import mooncake_lines, write_trace

FIXTURE = Path(__file__).resolve().parents[3] / "fixtures" / "traces" / "mooncake_sample.jsonl"


def trace_spec(path: Path, **options: object) -> RunSpec:
    return RunSpec.model_validate(
        {
            "backend": "vllm",
            "workload": {"kind": "trace", "trace": {"path": str(path), "block_tokens": 32, **options}},
            "load": {"duration_s": 60},
        }
    )


def refusal(data: dict[str, object]) -> str:
    with pytest.raises(ValidationError) as caught:
        RunSpec.model_validate(data)
    return format_validation_error(caught.value)


def test_checking_a_spec_names_the_trace_and_its_sha256(tmp_path: Path) -> None:
    path = shutil.copy(FIXTURE, tmp_path / "prod-trace.jsonl")
    options = trace_spec(Path(path)).workload.options()
    assert options.name == "prod-trace.jsonl" and len(options.sha256) == 64
    # The stored spec carries them: two traces are two settings, and a rerun names its file's bytes.
    stored = trace_spec(Path(path)).model_dump(mode="json")
    assert stored["workload"]["trace"]["sha256"] == options.sha256


def test_a_spec_whose_trace_changed_is_refused_in_one_line(tmp_path: Path) -> None:
    path = Path(shutil.copy(FIXTURE, tmp_path / "t.jsonl"))
    stored = trace_spec(path).model_dump(mode="json")
    with path.open("a") as handle:
        handle.write(json.dumps({"timestamp": 99_000, "input_length": 32, "output_length": 1, "hash_ids": [7]}) + "\n")
    message = refusal(stored)
    assert "trace t.jsonl changed since the spec was written: its sha256 is" in message and "\n" not in message
    # Without the sha256 the file is replayed as it is now (and the new sha256 recorded).
    fresh = RunSpec.model_validate(
        {**stored, "workload": {"kind": "trace", "trace": {"path": str(path), "block_tokens": 32}}}
    )
    assert fresh.workload.options().sha256 != stored["workload"]["trace"]["sha256"]


def test_a_bad_trace_is_refused_before_an_experiment_is_made(tmp_path: Path) -> None:
    lines = mooncake_lines(5, 10)
    lines[3] = json.dumps({"timestamp": 1, "input_length": 64, "output_length": 4, "hash_ids": [1]})
    path = write_trace(tmp_path / "backwards.jsonl", lines)
    with pytest.raises(ValidationError, match=r"trace backwards.jsonl: line 4: timestamp 1 is earlier than line 3"):
        ExperimentSpec.model_validate(
            {"name": "x", "base": {"workload": {"kind": "trace", "trace": {"path": str(path), "block_tokens": 32}}}}
        )


def test_the_workload_needs_a_trace_file() -> None:
    assert "the trace workload needs Trace file" in refusal({"workload": {"kind": "trace"}})


@pytest.mark.model  # counts tokens with the model's transformers tokenizer
def test_prompts_share_leading_tokens_exactly_where_ids_are_shared(tmp_path: Path) -> None:
    spec = trace_spec(FIXTURE, max_input_tokens=None)
    requests_file = get_workload("trace").prepare(spec, tmp_path, get_backend("vllm"))
    assert requests_file is not None
    turns = [session[0] for session in json.loads(requests_file.read_text())]
    lines = [json.loads(raw) for raw in FIXTURE.read_text().splitlines()]
    tokenizer = load_tokenizer(spec.model)

    def tokens(turn: dict) -> list[int]:
        ids = tokenizer.apply_chat_template(turn["messages"], add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)

    built = [tokens(turn) for turn in turns]
    for turn, line, ids in zip(turns, lines, built, strict=False):
        assert len(ids) == line["input_length"]
        assert turn["max_tokens"] == line["output_length"] and turn["ignore_eos"] is True
        assert turn["at_ms"] == line["timestamp"]
    for a in range(len(turns)):
        for b in range(a + 1, len(turns)):
            shared = 0
            while shared < 3 and lines[a]["hash_ids"][shared] == lines[b]["hash_ids"][shared]:
                shared += 1
            # Equal leading ids: equal leading blocks; the first different id: a different block.
            assert built[a][: 32 * shared] == built[b][: 32 * shared]
            if shared < 3:
                assert built[a][32 * shared : 32 * (shared + 1)] != built[b][32 * shared : 32 * (shared + 1)]
    record = json.loads((tmp_path / "trace.json").read_text())
    assert record["name"] == "mooncake_sample.jsonl" and record["requests"] == len(turns) == 24


def test_the_preview_and_the_k6_settings_follow_the_spec(tmp_path: Path) -> None:
    spec = RunSpec.model_validate(
        {
            "workload": {"kind": "trace", "trace": {"path": str(FIXTURE), "block_tokens": 32, "speedup": 2}},
            "load": {"duration_s": 2, "max_vus": 20},
        }
    )
    summary = preview(spec)
    assert (summary.requests, summary.requests_cut, summary.cut_at_s) == (16, 8, 2)
    assert get_workload("trace").k6_env(spec) == {"TRACE_VUS": "20", "TRACE_DURATION": "2s"}


def test_an_uploaded_trace_is_checked_listed_and_named_by_its_upload(tmp_path: Path) -> None:
    uploads = tmp_path / "uploads"
    data = FIXTURE.read_bytes()
    saved = save_upload(data=data, original_name="prod.jsonl", kind="trace", upload_dir=uploads, max_bytes=10**6)
    record_upload(saved)
    assert saved.items == 24 and saved.path.suffix == ".trace"
    assert [label.split(" (")[0] for _, label in list_uploads(uploads, "trace")] == ["prod.jsonl"]
    assert list_uploads(uploads, "jsonl") == []
    assert trace_spec(saved.path).workload.options().name == "prod.jsonl"
    with pytest.raises(DatasetError, match=r"^bad.jsonl: line 2: output_length is 0"):
        bad = data.splitlines()[0] + b'\n{"timestamp": 1, "input_length": 5, "output_length": 0, "hash_ids": []}\n'
        save_upload(data=bad, original_name="bad.jsonl", kind="trace", upload_dir=uploads, max_bytes=10**6)
    with pytest.raises(DatasetError, match="the upload limit is"):
        save_upload(data=data, original_name="big.jsonl", kind="trace", upload_dir=uploads, max_bytes=100)


def test_a_trace_upload_is_checked_once_told_its_block_size_stored_once_and_named_as_the_user_named_it(
    tmp_path: Path,
) -> None:
    from lab.workloads.trace_file import TraceError, read_trace
    from lab.workloads.uploads import record_upload, save_upload

    # Two hash ids for 256 tokens: made with blocks of 128, not Mooncake's 512.
    data = b'{"timestamp": 0, "input_length": 256, "output_length": 8, "hash_ids": [1, 2]}\n'
    first = save_upload(data=data, original_name="good.jsonl", kind="trace", upload_dir=tmp_path, max_bytes=10**6)
    record_upload(first)
    assert any("set 'Tokens per hash id' to 128 or less" in note for note in first.notes)
    again = save_upload(data=data, original_name="good.jsonl", kind="trace", upload_dir=tmp_path, max_bytes=10**6)
    record_upload(again)
    assert again.already_stored and again.path == first.path
    assert len([path for path in tmp_path.iterdir() if path.suffix == first.path.suffix]) == 1
    with pytest.raises(TraceError) as refused:
        read_trace(first.path, block_tokens=512)
    message = str(refused.value)
    assert message.startswith("trace good.jsonl: line 1: 2 hash ids")
    assert "'Tokens per hash id' (trace.block_tokens) of 128 or less fits this line" in message
