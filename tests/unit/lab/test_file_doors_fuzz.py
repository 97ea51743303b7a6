"""The file doors under many mutations of valid files: every mutated trace and every mutated GuideLLM,
vllm bench and AIPerf result either loads or is refused with one line (DatasetError's or
ImportFileError's), never another exception, within a time and a memory bound per file.

The bounds are safety limits (a value that made a reader loop or grow with it), not speed targets.
The mutations are drawn from a fixed seed, so a failure replays.
"""

from __future__ import annotations

import functools
import json
import random
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lab.imports import ImportFileError, parse_result
from lab.workloads.input_files import DatasetError
from lab.workloads.trace_file import parse_trace

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
RESULT_FILES = (
    "guidellm.json",
    "guidellm.yaml",
    "vllm-bench.json",
    "vllm-bench-detailed.json",
    "profile_export_aiperf.json",
)
MUTATIONS_PER_FILE = 40
# The 150 KB GuideLLM YAML costs 0.3 s a parse under tracemalloc: fewer of its mutations keep the
# fast tier fast; the JSON form of the same report takes the full count.
MUTATIONS_PER_YAML_FILE = 12
# What one mutated file may cost at most: far above a valid file's (milliseconds, a few MB).
MAX_SECONDS_PER_FILE = 10.0
MAX_PEAK_BYTES = 256 * 2**20
ABSURD = (
    "NaN",
    "Infinity",
    "-Infinity",
    "1e300",
    "-1",
    "1e11",
    "99999999999999999999999",
    '"x"',
    "null",
    "[]",
    "{}",
    "true",
)


def _numbers_replaced(text: str, rng: random.Random) -> str:
    """One number of the text replaced by an absurd value."""
    spots = [i for i, char in enumerate(text) if char.isdigit() and (i == 0 or not text[i - 1].isalnum())]
    if not spots:
        return text
    start = rng.choice(spots)
    end = start
    while end < len(text) and (text[end].isdigit() or text[end] in ".eE+-"):
        end += 1
    return text[:start] + rng.choice(ABSURD) + text[end:]


def mutations(text: str, rng: random.Random, count: int = MUTATIONS_PER_FILE) -> Iterator[str]:
    """Mutations of ``text``: absurd numbers, cuts, flipped bytes, deep nesting, repeated parts."""
    kinds: list[Callable[[str], str]] = [
        lambda t: _numbers_replaced(t, rng),
        lambda t: _numbers_replaced(_numbers_replaced(t, rng), rng),
        lambda t: t[: rng.randrange(len(t) + 1)],
        lambda t: "".join(chr(rng.randrange(32, 0x2FF)) if rng.random() < 0.01 else c for c in t),
        lambda t: "[" * rng.choice((100, 5000, 200_000)) + t + "]" * rng.choice((0, 100)),
        lambda t: t.replace("{", '{"a":' * rng.randrange(1, 80) + "{", 1),
        lambda t: t + t[: rng.randrange(len(t) + 1)],
        lambda t: t.replace('"', "", rng.randrange(1, 4)),
        lambda t: "\n".join(rng.sample(t.splitlines(), len(t.splitlines()))),
    ]
    for _ in range(count):
        yield rng.choice(kinds)(text)


def bounded(read: Callable[[], object]) -> str:
    """Run ``read`` within the bounds: "loaded" or "refused"; any other exception fails the test."""
    tracemalloc.start()
    started = time.monotonic()
    try:
        read()
        outcome = "loaded"
    except (DatasetError, ImportFileError) as error:
        assert "\n" not in str(error).strip() and str(error).strip(), repr(error)
        outcome = "refused"
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert time.monotonic() - started < MAX_SECONDS_PER_FILE
    assert peak < MAX_PEAK_BYTES, peak
    return outcome


@pytest.mark.parametrize("name", RESULT_FILES)
def test_mutated_result_files_load_or_are_refused_in_one_line(name: str) -> None:
    path = FIXTURES / "imports" / name
    text = path.read_text(encoding="utf-8")
    rng = random.Random(f"{name}-fuzz")
    outcomes = [
        bounded(functools.partial(parse_result, name, mutated.encode("utf-8", "surrogatepass"), suffix=path.suffix))
        for mutated in mutations(text, rng, MUTATIONS_PER_YAML_FILE if path.suffix == ".yaml" else MUTATIONS_PER_FILE)
    ]
    print(f"{name}: {len(outcomes)} mutations, {outcomes.count('refused')} refused, {outcomes.count('loaded')} loaded")
    assert outcomes.count("refused") > 0


def test_mutated_traces_load_or_are_refused_in_one_line() -> None:
    text = (FIXTURES / "traces" / "mooncake_sample.jsonl").read_text(encoding="utf-8")
    rng = random.Random("trace-fuzz")
    outcomes = [bounded(functools.partial(parse_trace, mutated.splitlines())) for mutated in mutations(text, rng)]
    print(f"trace: {len(outcomes)} mutations, {outcomes.count('refused')} refused, {outcomes.count('loaded')} loaded")
    assert outcomes.count("refused") > 0


def test_the_absurd_values_of_the_issue_are_refused_at_the_door() -> None:
    line = {"timestamp": 10, "input_length": 100, "output_length": 5, "hash_ids": [1]}
    for field, value in (("timestamp", "NaN"), ("timestamp", "1e300"), ("input_length", "1e11")):
        raw = json.dumps(line).replace(f'"{field}": {line[field]}', f'"{field}": {value}')
        with pytest.raises(DatasetError, match="line 1: "):
            parse_trace([raw])
    with pytest.raises(ImportFileError, match="nested deeper than 64 levels"):
        parse_result("deep.json", b"[" * 200_000 + b"]" * 200_000)
