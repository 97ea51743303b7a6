"""The recorder's hash ids are the trace workload's: prompts the workload builds from a trace,
recorded with the model's tokenizer, give back the trace's lengths and its hash ids (numbered
as first seen)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.backends import get_backend
from lab.specs.schema import RunSpec
from lab.workloads import get_workload
from services.traces.blocks import ChatTemplateTokens
from services.traces.lines import Observation, TraceLines
from tests.support.traces import mooncake_lines, write_trace

BLOCK_TOKENS = 32


def first_seen(id_lists: list[list[int]]) -> list[list[int]]:
    numbers: dict[int, int] = {}
    return [[numbers.setdefault(block, len(numbers)) for block in ids] for ids in id_lists]


@pytest.mark.model  # the trace workload counts with the model's transformers tokenizer
def test_recorded_prompts_of_a_replayed_trace_give_back_its_hash_ids_and_lengths(tmp_path: Path) -> None:
    trace = [
        json.loads(line)
        for line in mooncake_lines(40, 10, block_tokens=BLOCK_TOKENS, families=3, prefix_blocks=2, own_blocks=2, seed=3)
    ]
    path = write_trace(tmp_path / "t.jsonl", [json.dumps(line) for line in trace])
    spec = RunSpec.model_validate(
        {
            "backend": "vllm",
            "workload": {"kind": "trace", "trace": {"path": str(path), "block_tokens": BLOCK_TOKENS}},
            "load": {"duration_s": 60},
        }
    )
    requests_file = get_workload("trace").prepare(spec, tmp_path / "run", get_backend("vllm"))
    assert requests_file is not None
    turns = [session[0] for session in json.loads(requests_file.read_text())]

    lines = TraceLines(ChatTemplateTokens(spec.model), block_tokens=BLOCK_TOKENS, record_text=False)
    recorded = []
    for turn in turns:
        body = json.dumps({"model": "m", "messages": turn["messages"], "max_tokens": turn["max_tokens"]}).encode()
        line = lines.line(Observation(turn["at_ms"] / 1000, "/v1/chat/completions", body, (), None))
        assert line is not None
        recorded.append(line)

    assert [line["input_length"] for line in recorded] == [line["input_length"] for line in trace]
    assert [line["output_length"] for line in recorded] == [line["output_length"] for line in trace]
    assert [line["hash_ids"] for line in recorded] == first_seen([line["hash_ids"] for line in trace])
    assert [line["timestamp"] for line in recorded] == [line["timestamp"] for line in trace]
