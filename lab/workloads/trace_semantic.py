"""The semantic ceiling of a trace: what a semantic response cache could answer of it.

Beside the exact ceiling (:func:`lab.workloads.trace_plan.response_cache_ceiling`: requests whose
prompt and output length came before), a semantic cache also answers a request whose prompt is
*similar enough* to an earlier one of the same output length: at a cosine similarity of at least
the threshold between their embeddings (the proxy's ``--similarity``; :mod:`services.embeddings`).
Unbounded and with no expiry, like the exact ceiling, and counting every match a hit, right or
wrong: how many of them would be false hits only a run in the proxy's measuring mode tells.

Only lines that carry their own text (``input_text`` or ``messages``) can be compared; a trace of
hash ids alone has no semantic ceiling (None).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import numpy as np

from lab.workloads.trace_plan import PlannedRequest

# texts -> unit vectors, one row each (services.embeddings.Embedder.embed)
Embed = Callable[[list[str]], np.ndarray]


def embedded_text(text: str) -> str:
    """What the proxy embeds of a trace line's text (its last user turn; a plain ``input_text``
    is that turn)."""
    parsed = json.loads(text)
    if isinstance(parsed, str):
        return parsed
    users = [
        message.get("content") for message in parsed if isinstance(message, dict) and message.get("role") == "user"
    ]
    return str(users[-1]) if users else text


def semantic_ceilings(
    requests: Sequence[PlannedRequest], thresholds: Sequence[float], *, embed: Embed
) -> dict[float, float] | None:
    """Each threshold's semantic ceiling (see the module docstring): the share of requests whose
    nearest earlier prompt of the same output length is at least that similar; None when no
    request carries text."""
    texted = [(index, item) for index, item in enumerate(requests) if item.request.text is not None]
    if not texted:
        return None
    vectors = embed([embedded_text(item.request.text or "") for _, item in texted])
    best = np.full(len(texted), -1.0)
    by_length: dict[int, list[int]] = {}
    for row, (_, item) in enumerate(texted):
        earlier = by_length.setdefault(item.request.output_length, [])
        if earlier:
            best[row] = float(np.max(vectors[earlier] @ vectors[row]))
        earlier.append(row)
    return {threshold: float(np.sum(best >= threshold - 1e-6)) / len(requests) for threshold in thresholds}
