"""The semantic ceiling of a trace: what a semantic response cache could answer of it.

Beside the exact ceiling (:func:`lab.workloads.trace_plan.response_cache_ceiling`: requests whose
prompt and output length came before), a semantic cache also answers a request whose prompt is
*similar enough* to an earlier one of the same output length: at a cosine similarity of at least
the threshold between their embeddings (the proxy's ``--similarity``; :mod:`services.embeddings`).
Unbounded and with no expiry, like the exact ceiling, and counting every match a hit, right or
wrong: how many of them would be false hits only a run in the proxy's measuring mode tells.

Only lines that carry their own text (``input_text`` or ``messages``) can be compared; a trace of
hash ids alone has no semantic ceiling (None).

A trace run with the semantic tier stores its ceiling at the run's threshold
(:func:`trace_semantic_ceiling`, the figure ``trace_semantic_cache_ceiling``). Embedding is the
cost (about 40 ms a ShareGPT prompt on one thread here), so the vectors of a trace's lines are
kept beside the trace file (:func:`embeddings_path`, keyed by the trace's sha256 and the model):
a trace is embedded once, and the ceiling at any threshold is then a fraction of a second.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

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


def _texted(requests: Sequence[PlannedRequest]) -> list[PlannedRequest]:
    return [item for item in requests if item.request.text is not None]


def nearest_earlier_similarity(texted: Sequence[PlannedRequest], vectors: np.ndarray) -> np.ndarray:
    """Per request (one vector a row), the cosine similarity of its nearest earlier prompt of the
    same output length; -1 for a request with none."""
    best = np.full(len(texted), -1.0)
    by_length: dict[int, list[int]] = {}
    for row, item in enumerate(texted):
        earlier = by_length.setdefault(item.request.output_length, [])
        if earlier:
            best[row] = float(np.max(vectors[earlier] @ vectors[row]))
        earlier.append(row)
    return best


def _shares(best: np.ndarray, thresholds: Sequence[float], requests: int) -> dict[float, float]:
    return {threshold: float(np.sum(best >= threshold - 1e-6)) / requests for threshold in thresholds}


def semantic_ceilings(
    requests: Sequence[PlannedRequest], thresholds: Sequence[float], *, embed: Embed
) -> dict[float, float] | None:
    """Each threshold's semantic ceiling (see the module docstring): the share of requests whose
    nearest earlier prompt of the same output length is at least that similar; None when no
    request carries text."""
    texted = _texted(requests)
    if not texted:
        return None
    vectors = embed([embedded_text(item.request.text or "") for item in texted])
    return _shares(nearest_earlier_similarity(texted, vectors), thresholds, len(requests))


def embeddings_path(trace_path: Path, embedding_model: str) -> Path:
    """Where the vectors of a trace's lines under ``embedding_model`` are kept: beside the trace
    (``<trace>.<model digest>.embeddings.npz``; the upload lists offer only trace suffixes)."""
    digest = hashlib.sha256(embedding_model.encode("utf-8")).hexdigest()[:12]
    return trace_path.with_name(f"{trace_path.name}.{digest}.embeddings.npz")


def _stored_vectors(path: Path, trace_sha256: str) -> dict[int, np.ndarray]:
    """The kept vectors by trace line, when ``path`` holds those of this trace (else none)."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            if str(stored["sha256"]) != trace_sha256:
                return {}
            return dict(zip(stored["lines"].tolist(), np.asarray(stored["vectors"], dtype=np.float32), strict=True))
    except (OSError, ValueError, KeyError):  # none yet, or unreadable: embedded again
        return {}


def _keep_vectors(path: Path, trace_sha256: str, vectors: dict[int, np.ndarray]) -> None:
    """Write the vectors beside the trace, whole or not at all (a folder that cannot be written
    to keeps nothing: the next run embeds again)."""
    lines = sorted(vectors)
    try:
        handle, temporary = tempfile.mkstemp(prefix=".embeddings-", suffix=".npz", dir=path.parent)
    except OSError:
        return
    try:
        with os.fdopen(handle, "wb") as file:
            np.savez(
                file,
                sha256=np.array(trace_sha256),
                lines=np.array(lines, dtype=np.int64),
                vectors=np.stack([vectors[line] for line in lines]).astype(np.float32),
            )
        os.replace(temporary, path)
    except OSError:
        Path(temporary).unlink(missing_ok=True)


def trace_semantic_ceiling(
    requests: Sequence[PlannedRequest],
    threshold: float,
    *,
    trace_path: Path,
    trace_sha256: str,
    embedding_model: str,
    load_embed: Callable[[], Embed],
) -> float | None:
    """The semantic ceiling of the requests a run sends, at ``threshold``; None when none carries
    text. Vectors kept beside the trace are read; only lines not embedded before are, by the
    function ``load_embed`` returns (called only then: no model is loaded for a known trace)."""
    texted = _texted(requests)
    if not texted:
        return None
    path = embeddings_path(trace_path, embedding_model)
    kept = _stored_vectors(path, trace_sha256)
    missing = [item for item in texted if item.index not in kept]
    if missing:
        fresh = load_embed()([embedded_text(item.request.text or "") for item in missing])
        kept.update(zip((item.index for item in missing), fresh, strict=True))
        _keep_vectors(path, trace_sha256, kept)
    vectors = np.stack([kept[item.index] for item in texted])
    return _shares(nearest_earlier_similarity(texted, vectors), [threshold], len(requests))[threshold]
