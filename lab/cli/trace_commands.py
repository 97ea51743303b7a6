"""``python -m lab traces synth``: write a seeded trace of a stated shape
(:mod:`lab.workloads.trace_synth`) and print what a replay of it would send; ``traces synth-paraphrases``:
a synthetic paraphrase trace (:mod:`lab.workloads.paraphrases`); ``traces ceilings``: a trace's
exact, prefix and semantic cache ceilings (:mod:`lab.workloads.trace_semantic`)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

from lab.context import LabContext
from lab.workloads.trace_synth import SynthShape, SynthShapeError, synth_text

# The shape's settings as options: name, type, help.
SHAPE_OPTIONS: tuple[tuple[str, type, str], ...] = (
    ("rate_per_s", float, "mean requests a second"),
    ("duration_s", float, "seconds the trace spans"),
    ("sessions", int, "users (sessions) the requests belong to"),
    ("zipf_exponent", float, "Zipf exponent of the prompts' and system prompts' popularity"),
    ("prompts", int, "distinct opening prompts"),
    ("system_prompts", int, "distinct system prompts, shared by the sessions"),
    ("system_prompt_tokens", int, "tokens of a system prompt"),
    ("prompt_tokens", int, "mean tokens of a user's message"),
    ("output_tokens", int, "mean tokens of an answer"),
    ("block_tokens", int, "prompt tokens one hash id stands for (the replay's workload.trace.block_tokens)"),
    ("random_seed", int, "random seed: the same shape and random seed give the same trace"),
)
# Earlier names of an option, still accepted: --seed was the random seed's name before it said so.
OPTION_ALIASES: dict[str, tuple[str, ...]] = {"random_seed": ("--seed",)}


def add_trace_commands(commands: Any) -> None:
    """traces synth."""
    traces = commands.add_parser("traces", help="make Mooncake traces to replay")
    actions = traces.add_subparsers(dest="action", required=True)
    synth = actions.add_parser("synth", help="write a seeded trace of a stated shape (Zipf prompts, sessions)")
    synth.add_argument("--out", required=True, metavar="FILE", help="the trace file to write (JSONL)")
    defaults = {item.name: item.default for item in fields(SynthShape)}
    for name, kind, text in SHAPE_OPTIONS:
        synth.add_argument(
            f"--{name.replace('_', '-')}",
            *OPTION_ALIASES.get(name, ()),
            dest=name,
            type=kind,
            default=defaults[name],
            help=f"{text} ({defaults[name]})",
        )
    _add_semantic_trace_commands(actions)


def _add_semantic_trace_commands(actions: Any) -> None:
    """traces synth-paraphrases, traces ceilings."""
    paraphrases = actions.add_parser(
        "synth-paraphrases", help="write a synthetic paraphrase trace: questions asked several ways, near-misses beside"
    )
    paraphrases.add_argument("--out", required=True, metavar="FILE", help="the trace file to write (JSONL)")
    paraphrases.add_argument("--questions", type=int, default=20, help="distinct questions (20)")
    paraphrases.add_argument("--phrasings", type=int, default=3, help="wordings of each question (3)")
    paraphrases.add_argument("--rate-per-s", type=float, default=1.0, help="requests a second (1)")
    paraphrases.add_argument("--output-tokens", type=int, default=16, help="tokens of each answer (16)")
    paraphrases.add_argument(
        "--random-seed",
        *OPTION_ALIASES["random_seed"],
        dest="random_seed",
        type=int,
        default=0,
        help="random seed of the order (0)",
    )
    ceilings = actions.add_parser("ceilings", help="a trace's cache ceilings: exact, prefix reuse and semantic")
    ceilings.add_argument("trace", metavar="FILE", help="a trace file (JSONL)")
    ceilings.add_argument(
        "--similarity",
        type=float,
        nargs="+",
        default=[0.8, 0.85, 0.9, 0.95, 0.98],
        help="the semantic tier's thresholds to compute the ceiling at (lines with text only)",
    )
    ceilings.add_argument("--block-tokens", type=int, default=512, help="tokens one hash id stands for (512)")


def _cmd_semantic_traces(args: argparse.Namespace) -> int:
    from lab.workloads.paraphrases import MAX_PHRASINGS, MAX_QUESTIONS, paraphrase_trace_text
    from lab.workloads.trace_file import parse_trace
    from lab.workloads.trace_plan import plan_trace, summarise

    if args.action == "synth-paraphrases":
        if not (1 <= args.questions <= MAX_QUESTIONS and 1 <= args.phrasings <= MAX_PHRASINGS and args.rate_per_s > 0):
            print(f"error: 1-{MAX_QUESTIONS} questions, 1-{MAX_PHRASINGS} phrasings, a positive rate", file=sys.stderr)
            return 2
        text = paraphrase_trace_text(
            questions=args.questions,
            phrasings=args.phrasings,
            random_seed=args.random_seed,
            rate_per_s=args.rate_per_s,
            output_tokens=args.output_tokens,
        )
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"wrote {args.out}")
        return 0
    if any(not 0 < threshold <= 1 for threshold in args.similarity):
        print("error: --similarity thresholds must be in (0, 1]", file=sys.stderr)
        return 2
    from lab.workloads.trace_semantic import semantic_ceilings
    from services.embeddings import load_embedder

    lines = Path(args.trace).read_text(encoding="utf-8").splitlines()
    plan = plan_trace(parse_trace(lines, block_tokens=args.block_tokens), block_tokens=args.block_tokens)
    for line in summarise(plan, block_tokens=args.block_tokens).lines():
        print(line)
    found = semantic_ceilings(plan.requests, args.similarity, embed=load_embedder().embed)
    if found is None:
        print("semantic ceiling: n/a (no line carries its text)")
    for threshold, share in (found or {}).items():
        print(f"semantic ceiling at similarity {threshold:g}: {share:.1%}")
    return 0


def cmd_traces(args: argparse.Namespace, context: LabContext) -> int:
    """Write the trace (nothing when the shape cannot be generated: one line, status 2)."""
    if args.action != "synth":
        return _cmd_semantic_traces(args)
    try:
        shape = SynthShape(**{name: getattr(args, name) for name, _, _ in SHAPE_OPTIONS})
    except SynthShapeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    from lab.workloads.trace_file import parse_trace
    from lab.workloads.trace_plan import plan_trace, summarise

    text = synth_text(shape)
    out = Path(args.out)
    out.write_text(text, encoding="utf-8")
    plan = plan_trace(parse_trace(text.splitlines(), block_tokens=shape.block_tokens), block_tokens=shape.block_tokens)
    print(f"wrote {out}")
    for line in summarise(plan, block_tokens=shape.block_tokens).lines():
        print(line)
    return 0
