"""A trace run's semantic ceiling as a stored figure: computed at the run's threshold only when its
cache tier is semantic, the trace embedded once (the vectors kept beside it), read back into the
run's figures and shown as a tile (a stand-in embedding: no model)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from lab.measurement.results import RunResults
from lab.measurement.trace_figures import trace_part
from lab.workloads.trace import TraceOptions, with_semantic_ceiling
from lab.workloads.trace_file import read_trace
from lab.workloads.trace_plan import TraceSummary, plan_trace, summarise
from lab.workloads.trace_semantic import embeddings_path
from pages.view.tables import figures_summary
from services import embeddings

# Stand-in vectors: "Paris is?" and "Paris was?" 0.8 similar, "Rome is?" far from both.
FAKE_VECTORS = {"Paris is?": (1.0, 0.0, 0.0), "Paris was?": (0.8, 0.6, 0.0), "Rome is?": (0.0, 0.0, 1.0)}
LINES = [
    {"timestamp": 0, "input_text": "Paris is?", "output_length": 8},
    {"timestamp": 1, "input_text": "Paris is?", "output_length": 8},  # an exact repeat
    {"timestamp": 2, "input_text": "Paris was?", "output_length": 8},  # 0.8 alike
    {"timestamp": 3, "input_text": "Rome is?", "output_length": 8},
    {"timestamp": 4, "input_length": 32, "output_length": 4, "hash_ids": [1, 2]},  # no text: never a hit
]


class CountingModel:
    """Stands in for load_embedder: counts the models loaded and the texts embedded."""

    def __init__(self) -> None:
        self.loaded = 0
        self.embedded: list[str] = []

    def load(self, name: str, **_: object) -> SimpleNamespace:
        self.loaded += 1
        return SimpleNamespace(embed=self.embed)

    def embed(self, texts: list[str]) -> np.ndarray:
        self.embedded += texts
        return np.array([FAKE_VECTORS[text] for text in texts], dtype=np.float32)


def run_spec(tier: str, similarity: float = 0.5) -> SimpleNamespace:
    return SimpleNamespace(
        uses_cache=True, cache=SimpleNamespace(tier=tier, similarity=similarity, embedding_model="stand-in")
    )


def summary_of(trace_path: Path, spec: SimpleNamespace) -> TraceSummary:
    options = TraceOptions(path=str(trace_path), block_tokens=16)
    trace = read_trace(trace_path, block_tokens=16)
    plan = plan_trace(trace.requests, block_tokens=16)
    return with_semantic_ceiling(spec, options, trace, plan, summarise(plan, block_tokens=16))


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> CountingModel:
    counting = CountingModel()
    monkeypatch.setattr(embeddings, "load_embedder", counting.load)
    return counting


def test_a_semantic_run_gets_the_ceiling_at_its_threshold_and_the_trace_is_embedded_once(
    tmp_path: Path, model: CountingModel
) -> None:
    trace_path = tmp_path / "paris.jsonl"
    trace_path.write_text("\n".join(json.dumps(line) for line in LINES) + "\n")
    summary = summary_of(trace_path, run_spec("semantic", similarity=0.5))
    assert summary.semantic_cache_ceiling == pytest.approx(2 / 5)  # the repeat and the paraphrase, of 5 sent
    assert summary.semantic_cache_similarity == 0.5
    assert "semantic cache at similarity 0.5 40.0%" in "\n".join(summary.lines())
    assert model.embedded == ["Paris is?", "Paris is?", "Paris was?", "Rome is?"]
    assert embeddings_path(trace_path, "stand-in").is_file()
    # Another run of the trace, at another threshold: the kept vectors, no model loaded.
    again = summary_of(trace_path, run_spec("semantic", similarity=0.9))
    assert again.semantic_cache_ceiling == pytest.approx(1 / 5)  # the exact repeat only
    assert model.loaded == 1 and len(model.embedded) == 4


def test_a_changed_trace_is_embedded_again(tmp_path: Path, model: CountingModel) -> None:
    trace_path = tmp_path / "paris.jsonl"
    trace_path.write_text("\n".join(json.dumps(line) for line in LINES[:2]) + "\n")
    assert summary_of(trace_path, run_spec("semantic")).semantic_cache_ceiling == pytest.approx(1 / 2)
    trace_path.write_text("\n".join(json.dumps(line) for line in LINES[2:4]) + "\n")  # same line numbers
    assert summary_of(trace_path, run_spec("semantic")).semantic_cache_ceiling == 0
    assert model.embedded == ["Paris is?", "Paris is?", "Paris was?", "Rome is?"]


def test_another_tier_has_no_semantic_ceiling_and_loads_no_model(tmp_path: Path, model: CountingModel) -> None:
    trace_path = tmp_path / "paris.jsonl"
    trace_path.write_text("\n".join(json.dumps(line) for line in LINES) + "\n")
    for tier in ("exact", "off"):
        summary = summary_of(trace_path, run_spec(tier))
        assert summary.semantic_cache_ceiling is None and summary.semantic_cache_similarity is None
        assert "semantic cache" not in "\n".join(summary.lines())
    uncached = SimpleNamespace(uses_cache=False, cache=run_spec("semantic").cache)  # a backend without the proxy
    assert summary_of(trace_path, uncached).semantic_cache_ceiling is None
    assert model.loaded == 0 and not embeddings_path(trace_path, "stand-in").exists()


def test_the_stored_ceiling_is_a_figure_of_the_run_and_a_tile(tmp_path: Path) -> None:
    record = {"name": "paris.jsonl", "sha256": "a" * 64, "response_cache_ceiling": 0.2, "semantic_cache_ceiling": 0.4}
    (tmp_path / "trace.json").write_text(json.dumps(record))
    part = trace_part(tmp_path, tmp_path / "summary.json")
    assert part is not None and part.trace_semantic_cache_ceiling == 0.4
    results = RunResults.from_parts(part)
    assert results.as_columns()["trace_semantic_cache_ceiling"] == 0.4
    tiles = {label: value for label, value, _ in figures_summary(results)}
    assert tiles["semantic cache ceiling"] == "40.0%"
    (tmp_path / "trace.json").write_text(json.dumps({**record, "semantic_cache_ceiling": None}))
    exact_run = RunResults.from_parts(trace_part(tmp_path, tmp_path / "summary.json") or part)
    assert "semantic cache ceiling" not in {label for label, _, _ in figures_summary(exact_run)}
