"""Trace replay: a Mooncake trace sent with its timing (``workload.trace``).

Each line of the trace is one request, sent at its timestamp over ``speedup`` after the
load starts, never earlier (``k6/trace_replay.js``); the prompts are built from the hash
ids so that a prefix cache sees exactly the sharing the trace has
(:mod:`lab.workloads.trace_prompts`), and each answer is exactly ``output_length`` tokens,
asked for the backend's own way. The trace is part of the configuration: the spec names its
file, its name and its sha256 (filled in when the spec is first checked), and a spec whose
file has changed since is refused. Reading and checking the file:
:mod:`lab.workloads.trace_file`; the schedule, the cut, the clipping and the ceilings:
:mod:`lab.workloads.trace_plan` (the semantic one, for a run with the semantic tier:
:mod:`lab.workloads.trace_semantic`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from lab.user_input.base import StrictModel
from lab.user_input.fields import OptionField
from lab.workloads import RunSettings, Workload, WorkloadError, WorkloadSettings, register, write_sessions
from lab.workloads.input_files import DatasetError
from lab.workloads.trace_file import TraceFile, read_trace
from lab.workloads.trace_plan import TracePlan, TraceSummary, plan_trace, summarise
from services.traces.blocks import MOONCAKE_BLOCK_TOKENS

if TYPE_CHECKING:
    from lab.backends import Backend

# The context of a model whose config says none and whose backend sets none.
DEFAULT_CONTEXT_TOKENS = 4096
# Option names of the backends' context lengths (vLLM's max_model_len, llama.cpp's n_ctx).
CONTEXT_OPTIONS = ("max_model_len", "n_ctx")


class TraceOptions(StrictModel):
    """The ``workload.trace`` section."""

    path: str | None = Field(default=None, description="Mooncake trace file (JSONL)")
    name: str | None = Field(default=None, max_length=200, description="the trace's name; the file's by default")
    sha256: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="the trace file's sha256, filled in when the spec is checked; a changed file is refused",
    )
    block_tokens: int = Field(
        default=MOONCAKE_BLOCK_TOKENS, ge=1, le=65_536, description="prompt tokens one hash id stands for"
    )
    speedup: float = Field(default=1.0, gt=0, le=1000, description="replay speed (2.0: twice as fast)")
    max_input_tokens: int | None = Field(
        default=None, ge=16, le=1_048_576, description="longest prompt sent; the model's context less the output"
    )
    over_long: Literal["clip", "skip"] = Field(default="clip", description="a longer prompt: clip it or skip it")
    tokenizer: str | None = Field(default=None, description="tokenizer folder; the run's model otherwise")


def trace_name(path: str) -> str:
    """The name an uploaded trace was given (its upload record), else the file's name."""
    from lab.workloads.upload_records import upload_original_name

    return upload_original_name(Path(path)) or Path(path).name


def checked_trace(options: TraceOptions) -> TraceFile:
    """The trace the options name, read and checked; ValueError (one line) when it cannot be
    replayed or is not the file the spec was written for."""
    assert options.path is not None  # the workload's check requires it
    trace = read_trace(options.path, block_tokens=options.block_tokens)
    if options.sha256 is not None and options.sha256 != trace.sha256:
        raise ValueError(
            f"trace {options.name or Path(options.path).name} changed since the spec was written: its sha256 is "
            f"{trace.sha256[:12]}..., the spec's {options.sha256[:12]}... (leave workload.trace.sha256 out to "
            "replay the file as it is now)"
        )
    return trace


def context_tokens(spec: RunSettings, tokenizer_path: str) -> int:
    """The model's context as the backend serves it: its option (max_model_len, n_ctx), else
    the model's config (max_position_embeddings), else :data:`DEFAULT_CONTEXT_TOKENS`."""
    options = spec.backend_options()
    for name in CONTEXT_OPTIONS:
        if isinstance(getattr(options, name, None), int):
            return int(getattr(options, name))
    try:
        config = json.loads((Path(tokenizer_path) / "config.json").read_text(encoding="utf-8"))
        return int(config["max_position_embeddings"])
    except (OSError, ValueError, KeyError, TypeError):
        return DEFAULT_CONTEXT_TOKENS


def trace_plan(spec: RunSettings, options: TraceOptions, trace: TraceFile, tokenizer_path: str) -> TracePlan:
    """What the run sends of the trace: cut at the load's duration, clipped for the context."""
    return plan_trace(
        trace.requests,
        block_tokens=options.block_tokens,
        speedup=options.speedup,
        duration_s=spec.load.planned_duration_s,
        max_input_tokens=options.max_input_tokens,
        context_tokens=context_tokens(spec, tokenizer_path),
        over_long=options.over_long,
    )


def preview(spec: RunSettings) -> TraceSummary:
    """The summary of what a spec's run would send (the form shows it before a launch)."""
    from lab.workloads.synthetic import tokenizer_path

    options: TraceOptions = spec.workload.options("trace")
    trace = checked_trace(options)
    return summarise(trace_plan(spec, options, trace, tokenizer_path(spec, options)), block_tokens=options.block_tokens)


def with_semantic_ceiling(
    spec: RunSettings, options: TraceOptions, trace: TraceFile, plan: TracePlan, summary: TraceSummary
) -> TraceSummary:
    """The summary with the trace's semantic ceiling at the run's threshold when the run's cache tier
    is semantic (:func:`lab.workloads.trace_semantic.trace_semantic_ceiling`: the vectors are kept
    beside the trace, so a trace is embedded once); unchanged for any other run. A model that does
    not load leaves it None (the proxy refuses to start then, in one line)."""
    if not (spec.uses_cache and spec.cache.tier == "semantic"):
        return summary
    from lab.workloads.trace_semantic import trace_semantic_ceiling
    from services.embeddings import EmbeddingModelError, load_embedder

    cache = spec.cache
    assert options.path is not None  # required: checked with the spec
    try:
        ceiling = trace_semantic_ceiling(
            plan.requests,
            cache.similarity,
            trace_path=Path(options.path),
            trace_sha256=trace.sha256,
            embedding_model=cache.embedding_model,
            load_embed=lambda: load_embedder(cache.embedding_model).embed,
        )
    except EmbeddingModelError:
        ceiling = None
    return replace(summary, semantic_cache_ceiling=ceiling, semantic_cache_similarity=cache.similarity)


def trace_sessions(spec: RunSettings, plan: TracePlan, backend: Backend, tokenizer: str) -> list[Any]:
    """One one-turn session per request: its send time (``at_ms``), its messages, its output length."""
    from lab.workloads.trace_prompts import TracePromptBuilder

    options: TraceOptions = spec.workload.options("trace")
    builder = TracePromptBuilder(
        tokenizer, spec.workload.system_prompt, block_tokens=options.block_tokens, random_seed=spec.random_seed
    )
    sessions = []
    for item in plan.requests:
        messages = item.request.messages or builder.messages(
            item.hash_ids, max(item.input_tokens, builder.min_tokens), item.index
        )
        request = {"at_ms": round(item.send_at_ms, 3), "messages": messages}
        sessions.append([{**request, **backend.fixed_output_fields(item.request.output_length)}])
    return sessions


@register
class Trace(Workload):
    name = "trace"
    label = "trace replay (Mooncake JSONL, with its timing)"
    script = "trace_replay.js"
    section = "trace"
    options_model = TraceOptions
    option_fields = (
        OptionField("trace.path", "Trace file (Mooncake JSONL)", upload="trace", required=True),
        OptionField("trace.speedup", "Speed-up (2.0 replays twice as fast)", step=0.5),
        OptionField("trace.block_tokens", "Tokens per hash id (block)", step=16),
        OptionField("trace.max_input_tokens", "Longest prompt (tokens; blank: the context less the output)", step=256),
        OptionField("trace.over_long", "A longer prompt is"),
    )

    def check(self, workload: WorkloadSettings) -> None:
        """The file gate, then the trace line by line, then its sha256 against the spec's (filled
        in when the spec has none, and the name with it): a bad trace is refused before anything
        is queued. A missing file is left to the run, which says so."""
        super().check(workload)
        options: TraceOptions = workload.options()
        assert options.path is not None  # required: checked above
        if not Path(options.path).exists():
            return
        trace = checked_trace(options)
        if options.sha256 is None:
            options.sha256 = trace.sha256
        if options.name is None:
            options.name = trace_name(options.path)

    def prepare(self, spec: RunSettings, run_dir: Path, backend: Backend) -> Path:
        from lab.workloads.synthetic import tokenizer_path

        options: TraceOptions = spec.workload.options()
        try:
            trace = checked_trace(options)
        except (DatasetError, ValueError) as error:
            raise WorkloadError(str(error)) from error
        tokenizer = tokenizer_path(spec, options)
        plan = trace_plan(spec, options, trace, tokenizer)
        if not plan.requests:
            raise WorkloadError("the trace sends nothing in this run: every request was cut, clipped away or skipped")
        summary = with_semantic_ceiling(spec, options, trace, plan, summarise(plan, block_tokens=options.block_tokens))
        run_dir.mkdir(parents=True, exist_ok=True)
        # What the run sends of the trace, for its figures (lab.measurement.trace_figures) and a reader.
        record = {"name": options.name, "sha256": trace.sha256, **asdict(summary), "cut_note": plan.cut_note()}
        (run_dir / "trace.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
        return write_sessions(trace_sessions(spec, plan, backend, tokenizer), run_dir / "requests.json")

    def preview_lines(self, spec: RunSettings) -> list[str]:
        return preview(spec).lines()

    def block_tokens(self, spec: RunSettings) -> int | None:
        # A replay recorded again chains its hash ids in the blocks the trace was made with.
        options: TraceOptions = spec.workload.options("trace")
        return options.block_tokens

    def k6_env(self, spec: RunSettings) -> dict[str, str]:
        # The schedule is the trace's: VUs are only the most requests in flight at once.
        return {"TRACE_VUS": str(spec.load.max_vus), "TRACE_DURATION": f"{spec.load.planned_duration_s:g}s"}
