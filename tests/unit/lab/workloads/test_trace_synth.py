"""``lab traces synth`` (lab/workloads/trace_synth.py): seeded, Zipf-shaped, sessions whose
prefixes grow, ceilings that follow from the shape; impossible shapes refused in one line; the
``trace-cache`` preset replays the trace it says it does."""

from __future__ import annotations

import itertools
import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from lab.cli.entry import build_parser
from lab.cli.trace_commands import cmd_traces
from lab.specs.schema import PRESETS_DIR, load_preset
from lab.workloads.trace_file import parse_trace
from lab.workloads.trace_plan import plan_trace, summarise
from lab.workloads.trace_synth import SynthShape, SynthShapeError, synth_lines, synth_text

# The trace-cache preset's trace, as its description's command makes it.
PRESET_SHAPE = SynthShape(
    rate_per_s=2,
    duration_s=300,
    sessions=200,
    zipf_exponent=1.1,
    prompts=100,
    system_prompts=4,
    system_prompt_tokens=128,
    prompt_tokens=64,
    output_tokens=16,
    block_tokens=64,
    random_seed=38,
)


def test_the_same_shape_and_seed_give_the_same_trace() -> None:
    shape = SynthShape(rate_per_s=5, duration_s=60, sessions=30, block_tokens=64, random_seed=4)
    assert synth_text(shape) == synth_text(
        SynthShape(rate_per_s=5, duration_s=60, sessions=30, block_tokens=64, random_seed=4)
    )
    assert synth_text(shape) != synth_text(
        SynthShape(rate_per_s=5, duration_s=60, sessions=30, block_tokens=64, random_seed=5)
    )


def test_openings_follow_the_zipf_popularity() -> None:
    # Sessions' first turns, no system prompt: a line's hash ids are its opening's.
    for exponent in (1.1, 2.0):
        shape = SynthShape(
            rate_per_s=100, duration_s=200, sessions=10_000_000, zipf_exponent=exponent, system_prompts=1,
            system_prompt_tokens=0, prompts=50, prompt_tokens=64, block_tokens=64, random_seed=1,
        )  # fmt: skip
        firsts: dict[object, tuple[int, ...]] = {}
        for line in synth_lines(shape):
            firsts.setdefault(line["session_id"], tuple(line["hash_ids"]))  # type: ignore[arg-type]  # a list of ids
        counts = sorted(Counter(firsts.values()).values(), reverse=True)
        assert len(counts) <= 50
        assert counts[0] / counts[1] == pytest.approx(2**exponent, rel=0.15)
        assert counts[0] / counts[9] == pytest.approx(10**exponent, rel=0.3)


def test_a_sessions_turns_grow_its_prefix() -> None:
    lines = synth_lines(SynthShape(rate_per_s=4, duration_s=120, sessions=20, block_tokens=64, random_seed=2))
    by_session: dict[str, list[dict]] = defaultdict(list)
    for line in lines:
        by_session[str(line["session_id"])].append(line)
    grown = 0
    for turns in by_session.values():
        for before, after in itertools.pairwise(turns):
            assert after["input_length"] > before["input_length"]
            # Every full block of the previous prompt but its last is shared; the rest are new.
            kept = before["hash_ids"][:-1]
            assert after["hash_ids"][: len(kept)] == kept
            assert after["hash_ids"][len(kept)] != before["hash_ids"][-1]
            grown += 1
    assert grown > 100


def test_the_ceilings_follow_from_the_shape() -> None:
    text = synth_text(PRESET_SHAPE)
    requests = parse_trace(text.splitlines(), block_tokens=64)  # the lab reads it: ids fit the lengths
    summary = summarise(plan_trace(requests, block_tokens=64), block_tokens=64)
    assert summary.requests == 600 and summary.mean_rate_per_s == pytest.approx(2.0, rel=0.05)
    assert summary.sessions <= 200
    # Only openings repeat whole: the response cache's ceiling is the repeated first turns.
    first_turns = Counter(
        (request.hash_ids, request.output_length)
        for request in requests
        if request.session_id is not None and requests.index(request) == first_index(requests, request.session_id)
    )
    repeats = sum(count - 1 for count in first_turns.values())
    response, prefix = summary.response_cache_ceiling, summary.prefix_reuse_ceiling
    assert response is not None and prefix is not None
    assert response == pytest.approx(repeats / 600)
    assert 0.05 < response < 0.5
    # System prompts and growing sessions: most prompt tokens are a prefix seen before.
    assert response < prefix < 0.95


def first_index(requests: list, session_id: str) -> int:
    return next(index for index, request in enumerate(requests) if request.session_id == session_id)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"zipf_exponent": 0}, "the Zipf exponent must be more than 0"),
        ({"rate_per_s": 0}, "the rate must be more than 0 requests a second, not 0"),
        ({"duration_s": -1}, "the duration must be more than 0 s"),
        ({"sessions": 0}, "sessions must be at least 1, not 0"),
        ({"rate_per_s": 0.001, "duration_s": 10}, "is no request"),
    ],
)
def test_a_shape_that_cannot_be_generated_is_refused_in_one_line(change: dict, message: str) -> None:
    with pytest.raises(SynthShapeError, match=message) as caught:
        SynthShape(**change)
    assert "\n" not in str(caught.value)


def test_the_command_writes_the_trace_or_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "t.jsonl"
    args = build_parser().parse_args(["traces", "synth", "--out", str(out), "--zipf-exponent", "0"])
    assert cmd_traces(args, None) == 2  # type: ignore[arg-type]  # the command needs no lab context
    assert not out.exists()
    assert (
        capsys.readouterr().err.strip()
        == "error: the Zipf exponent must be more than 0 (0: every prompt equally likely), not 0"
    )
    args = build_parser().parse_args(["traces", "synth", "--out", str(out), "--duration-s", "30", "--random-seed", "3"])
    assert cmd_traces(args, None) == 0  # type: ignore[arg-type]  # the command needs no lab context
    assert out.read_text() == synth_text(SynthShape(duration_s=30, random_seed=3))
    assert "ceilings from the trace" in capsys.readouterr().out


def test_seed_is_still_the_random_seeds_option() -> None:
    """``--seed``, the option's name before it said which seed, sets the same random seed."""
    for action in ("synth", "synth-paraphrases"):
        args = build_parser().parse_args(["traces", action, "--out", "t.jsonl", "--seed", "3"])
        assert args.random_seed == 3


def test_the_trace_cache_preset_replays_its_trace_directly_and_through_the_cache() -> None:
    trace = PRESETS_DIR / "traces" / "trace-cache.jsonl"
    assert trace.read_text() == synth_text(PRESET_SHAPE)  # the file is the command's output
    experiment = load_preset("trace-cache")
    cells = experiment.expand()
    assert [run.backend for _, _, run in cells] == ["vllm", "vllm+cache"]
    for _, _, run in cells:
        options = run.workload.options("trace")
        assert run.workload.kind == "trace" and Path(options.path) == trace and options.block_tokens == 64
        assert run.load.planned_duration_s == 300
    summary = summarise(
        plan_trace(parse_trace(trace.read_text().splitlines(), block_tokens=64), block_tokens=64), block_tokens=64
    )
    description = json.loads((PRESETS_DIR / "trace-cache.json").read_text())["description"]
    assert f"response cache {summary.response_cache_ceiling:.1%}" in description
    assert f"prefix reuse {summary.prefix_reuse_ceiling:.1%}" in description
    assert load_preset("trace-cache", quick=True).base.load.duration_s == 60
