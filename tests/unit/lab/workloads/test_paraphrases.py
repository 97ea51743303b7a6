"""The synthetic paraphrase trace and the semantic ceiling of a trace (with a stand-in embedding:
no model)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lab.workloads.paraphrases import (
    MAX_PHRASINGS,
    MAX_QUESTIONS,
    paraphrase_ceiling,
    paraphrase_requests,
    paraphrase_trace_text,
)
from lab.workloads.trace_file import parse_trace
from lab.workloads.trace_plan import plan_trace
from lab.workloads.trace_semantic import embedded_text, semantic_ceilings


def test_each_question_is_asked_in_distinct_wordings_in_a_seeded_order() -> None:
    requests = paraphrase_requests(questions=12, phrasings=3, random_seed=7)
    assert len(requests) == 36
    by_question: dict[int, set[str]] = {}
    for number, text in requests:
        by_question.setdefault(number, set()).add(text)
    assert len(by_question) == 12 and all(len(texts) == 3 for texts in by_question.values())
    assert requests == paraphrase_requests(questions=12, phrasings=3, random_seed=7)
    assert requests != paraphrase_requests(questions=12, phrasings=3, random_seed=8)
    # Families in turn: the first five questions are five kinds of question (near-misses come later).
    first_five = {text for number, text in requests if number < 5}
    assert any("capital" in text for text in first_five) and any("legs" in text for text in first_five)
    assert paraphrase_ceiling(requests) == pytest.approx(24 / 36)
    assert len(paraphrase_requests(questions=MAX_QUESTIONS, phrasings=MAX_PHRASINGS, random_seed=0)) == 200


def test_the_trace_file_replays_the_same_requests() -> None:
    text = paraphrase_trace_text(questions=4, phrasings=2, random_seed=1, rate_per_s=2, output_tokens=8)
    lines = [json.loads(line) for line in text.splitlines()]
    assert [line["input_text"] for line in lines] == [
        t for _, t in paraphrase_requests(questions=4, phrasings=2, random_seed=1)
    ]
    assert [line["timestamp"] for line in lines[:3]] == [0, 500, 1000]
    assert {line["output_length"] for line in lines} == {8}


# Stand-in vectors: "Paris is?" and "Paris was?" 0.8 similar, "Rome is?" far from both.
FAKE_VECTORS = {"Paris is?": (1.0, 0.0, 0.0), "Paris was?": (0.8, 0.6, 0.0), "Rome is?": (0.0, 0.0, 1.0)}


def fake_embed(texts: list[str]) -> np.ndarray:
    return np.array([FAKE_VECTORS[text] for text in texts], dtype=np.float32)


def test_the_semantic_ceiling_counts_similar_earlier_prompts_of_the_same_length() -> None:
    lines = [
        {"timestamp": 0, "input_text": "Paris is?", "output_length": 8},
        {"timestamp": 1, "input_text": "Paris is?", "output_length": 8},  # an exact repeat: similarity 1
        {"timestamp": 2, "input_text": "Paris was?", "output_length": 8},  # similar
        {"timestamp": 3, "input_text": "Paris was?", "output_length": 9},  # another answer length
        {"timestamp": 4, "input_text": "Rome is?", "output_length": 8},
    ]
    plan = plan_trace(parse_trace([json.dumps(line) for line in lines], block_tokens=16), block_tokens=16)
    found = semantic_ceilings(plan.requests, [0.5, 0.9999], embed=fake_embed)
    assert found is not None
    assert found[0.9999] == pytest.approx(1 / 5)  # the exact repeat only
    assert found[0.5] == pytest.approx(2 / 5)  # and the similar one of the same length
    built = {"timestamp": 0, "input_length": 32, "output_length": 4, "hash_ids": [1, 2]}
    only_ids = plan_trace(parse_trace([json.dumps(built)], block_tokens=16), block_tokens=16)
    assert semantic_ceilings(only_ids.requests, [0.9], embed=fake_embed) is None


def test_the_last_user_turn_of_a_messages_line_is_what_is_compared() -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"}]
    assert embedded_text(json.dumps(messages)) == "Capital of France?"
    assert embedded_text(json.dumps("plain text")) == "plain text"
