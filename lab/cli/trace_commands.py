"""``python -m lab traces synth``: write a seeded trace of a stated shape
(:mod:`lab.workloads.trace_synth`) and print what a replay of it would send."""

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
    ("seed", int, "random seed: the same shape and seed give the same trace"),
)


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
            dest=name,
            type=kind,
            default=defaults[name],
            help=f"{text} ({defaults[name]})",
        )


def cmd_traces(args: argparse.Namespace, context: LabContext) -> int:
    """Write the trace (nothing when the shape cannot be generated: one line, status 2)."""
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
