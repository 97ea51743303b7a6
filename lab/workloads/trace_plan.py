"""What a trace replay will send, decided from the trace alone: the schedule (timestamps over
the speed-up, cut at the run's duration), the lines clipped or skipped for the model's
context, the hit rates the trace allows the caches, and the summary the form shows.

Pure functions over :class:`~lab.workloads.trace_file.TraceRequest`: no tokenizer, no file.

The two ceilings:

- **response cache**: an unbounded exact cache with no expiry answers every request whose
  prompt (its hash-id list, or its own text) and output length came before: repeats / requests.
- **prefix reuse**: an unbounded block cache serves, of each prompt, the leading blocks
  whose ids came before (ids are chained, so a known id means a known prefix up to it):
  reused prompt tokens / prompt tokens (the share vLLM's prefix-cache hit rate counts).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from lab.workloads.trace_file import TraceRequest

OverLong = Literal["clip", "skip"]
# A prompt shorter than this cannot hold a chat template and one word: skipped, never clipped to it.
MIN_PROMPT_TOKENS = 16


@dataclass(frozen=True)
class PlannedRequest:
    """A request the replay sends: at ``send_at_ms`` after the start, ``input_tokens`` long
    (clipped when ``clipped``), its first ``len(hash_ids)`` blocks shared as the trace says."""

    request: TraceRequest
    index: int
    send_at_ms: float
    input_tokens: int
    hash_ids: tuple[int, ...]
    clipped: bool = False


@dataclass(frozen=True)
class TracePlan:
    """The schedule a replay keeps and what it left out of the trace."""

    requests: tuple[PlannedRequest, ...]
    trace_requests: int
    cut_at_s: float | None  # where the run's duration cut the (sped-up) trace; None: not cut
    requests_cut: int
    requests_clipped: int
    requests_skipped: int

    def cut_note(self) -> str | None:
        """Where the trace was cut, in one sentence (None when it was not)."""
        if self.cut_at_s is None:
            return None
        first_left = self.trace_requests - self.requests_cut + 1
        return (
            f"the trace was cut at {self.cut_at_s:g} s, the run's duration: {self.requests_cut:,} of its "
            f"{self.trace_requests:,} requests (from request {first_left:,} on) were not sent"
        )


def input_limit(request: TraceRequest, *, max_input_tokens: int | None, context_tokens: int) -> int:
    """The most prompt tokens the request may carry: the setting, else the context less its output."""
    return max_input_tokens if max_input_tokens is not None else context_tokens - request.output_length


def plan_trace(
    requests: Sequence[TraceRequest],
    *,
    block_tokens: int,
    speedup: float = 1.0,
    duration_s: float | None = None,
    max_input_tokens: int | None = None,
    context_tokens: int = 1 << 30,
    over_long: OverLong = "clip",
) -> TracePlan:
    """The replay's schedule: each request at its timestamp over ``speedup``, those at or after
    ``duration_s`` cut, prompts over their limit (:func:`input_limit`) clipped to it (their
    hash ids to the blocks left) or skipped. Lines with their own text are sent as they are."""
    planned: list[PlannedRequest] = []
    clipped = skipped = cut = 0
    cut_at_s = None
    for index, request in enumerate(requests):
        send_at_ms = request.timestamp_ms / speedup
        if duration_s is not None and send_at_ms >= duration_s * 1000:
            cut, cut_at_s = len(requests) - index, duration_s
            break
        item = PlannedRequest(request, index, send_at_ms, request.input_length, request.hash_ids)
        limit = input_limit(request, max_input_tokens=max_input_tokens, context_tokens=context_tokens)
        if request.text is None and request.input_length > limit:
            if over_long == "skip" or limit < MIN_PROMPT_TOKENS:
                skipped += 1
                continue
            blocks = math.ceil(limit / block_tokens)
            item = replace(item, input_tokens=limit, hash_ids=request.hash_ids[:blocks], clipped=True)
            clipped += 1
        planned.append(item)
    return TracePlan(tuple(planned), len(requests), cut_at_s, cut, clipped, skipped)


def _prompt_key(item: PlannedRequest, block_tokens: int) -> tuple[object, ...] | None:
    """What makes two requests the same to an exact cache; None for a prompt that cannot
    repeat (tokens past its hash ids are filled with text of its own)."""
    request = item.request
    if request.text is not None:
        return ("text", request.text, request.output_length)
    if len(item.hash_ids) * block_tokens < item.input_tokens:
        return None
    return ("ids", item.hash_ids, item.input_tokens, request.output_length)


def response_cache_ceiling(requests: Sequence[PlannedRequest], *, block_tokens: int) -> float | None:
    """The hit rate of an unbounded exact response cache with no expiry: requests whose prompt
    and output length came before, over all requests (None for no request)."""
    seen: set[tuple[object, ...]] = set()
    hits = 0
    for item in requests:
        key = _prompt_key(item, block_tokens)
        if key is None:
            continue
        hits += key in seen
        seen.add(key)
    return hits / len(requests) if requests else None


def prefix_reuse_ceiling(requests: Sequence[PlannedRequest], *, block_tokens: int) -> float | None:
    """The share of prompt tokens an unbounded block cache serves: each prompt's leading blocks
    whose ids came before, in tokens, over all prompt tokens (None without prompt tokens)."""
    seen: set[int] = set()
    reused = total = 0
    for item in requests:
        total += item.input_tokens
        leading = 0
        for block_id in item.hash_ids:
            if block_id not in seen:
                break
            leading += 1
        reused += min(leading * block_tokens, item.input_tokens)
        seen.update(item.hash_ids)
    return reused / total if total else None


def quantiles(values: Sequence[float], points: Sequence[float] = (0.5, 0.9, 0.99)) -> dict[str, float]:
    """Nearest-rank quantiles of ``values`` by name (``p50``...) and their ``max``."""
    ordered = sorted(values)
    if not ordered:
        return {}
    found = {f"p{round(q * 100)}": ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)] for q in points}
    return {**found, "max": ordered[-1]}


@dataclass(frozen=True)
class TraceSummary:
    """What the form shows before a launch and the run stores beside its figures."""

    requests: int
    duration_s: float
    mean_rate_per_s: float | None
    peak_rate_per_s: int
    input_tokens: dict[str, float]
    output_tokens: dict[str, float]
    sessions: int
    response_cache_ceiling: float | None
    prefix_reuse_ceiling: float | None
    requests_clipped: int
    requests_skipped: int
    requests_cut: int
    cut_at_s: float | None
    # Only a run with the semantic tier: its ceiling at the run's threshold
    # (lab.workloads.trace_semantic.trace_semantic_ceiling: it needs the prompts' embeddings).
    semantic_cache_ceiling: float | None = None
    semantic_cache_similarity: float | None = None

    def lines(self) -> list[str]:
        """The summary in a few sentences for a person."""

        def share(value: float | None) -> str:
            return "n/a" if value is None else f"{value:.1%}"

        def lengths(figures: dict[str, float]) -> str:
            return ", ".join(f"{name} {value:,.0f}" for name, value in figures.items()) or "n/a"

        mean = "n/a" if self.mean_rate_per_s is None else f"{self.mean_rate_per_s:.2f}/s"
        lines = [
            f"{self.requests:,} requests over {self.duration_s:,.1f} s: mean rate {mean}, "
            f"peak {self.peak_rate_per_s:,} in one second; {self.sessions:,} sessions",
            f"prompt tokens: {lengths(self.input_tokens)}; output tokens: {lengths(self.output_tokens)}",
            f"ceilings from the trace: response cache {share(self.response_cache_ceiling)}, "
            f"prefix reuse {share(self.prefix_reuse_ceiling)}"
            + (
                ""
                if self.semantic_cache_similarity is None
                else f", semantic cache at similarity {self.semantic_cache_similarity:g} "
                f"{share(self.semantic_cache_ceiling)}"
            ),
            f"{self.requests_clipped:,} prompts clipped and {self.requests_skipped:,} skipped for the context",
        ]
        if self.cut_at_s is not None:
            lines.append(f"cut at {self.cut_at_s:g} s (the run's duration): {self.requests_cut:,} requests not sent")
        return lines


def summarise(plan: TracePlan, *, block_tokens: int) -> TraceSummary:
    """The summary of what a plan sends."""
    sent = plan.requests
    times_s = [item.send_at_ms / 1000 for item in sent]
    duration_s = (times_s[-1] - times_s[0]) if times_s else 0.0
    per_second: dict[int, int] = {}
    for time_s in times_s:
        per_second[int(time_s)] = per_second.get(int(time_s), 0) + 1
    return TraceSummary(
        requests=len(sent),
        duration_s=duration_s,
        mean_rate_per_s=len(sent) / duration_s if duration_s > 0 else None,
        peak_rate_per_s=max(per_second.values(), default=0),
        input_tokens=quantiles([item.input_tokens for item in sent if item.request.text is None]),
        output_tokens=quantiles([item.request.output_length for item in sent]),
        sessions=len({item.request.session_id for item in sent if item.request.session_id is not None}),
        response_cache_ceiling=response_cache_ceiling(sent, block_tokens=block_tokens),
        prefix_reuse_ceiling=prefix_reuse_ceiling(sent, block_tokens=block_tokens),
        requests_clipped=plan.requests_clipped,
        requests_skipped=plan.requests_skipped,
        requests_cut=plan.requests_cut,
        cut_at_s=plan.cut_at_s,
    )
