"""``python -m lab traces synth-paraphrases`` and ``traces ceilings``: the paraphrase trace written,
bad settings refused in one line, and a trace's semantic ceilings printed (with a stand-in model)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from lab.cli import trace_commands
from services import embeddings


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab")
    trace_commands.add_trace_commands(parser.add_subparsers(dest="command", required=True))
    return trace_commands.cmd_traces(parser.parse_args(argv), None)  # type: ignore[arg-type]  # the command needs no lab context


def test_the_paraphrase_trace_is_written_and_bad_settings_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "paraphrases.jsonl"
    assert run(["traces", "synth-paraphrases", "--out", str(out), "--questions", "4", "--phrasings", "2"]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 8 and all("input_text" in line for line in lines)
    assert run(["traces", "synth-paraphrases", "--out", str(out), "--questions", "0"]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    assert run(["traces", "ceilings", str(out), "--similarity", "1.5"]) == 2
    assert "must be in (0, 1]" in capsys.readouterr().err


def test_a_traces_ceilings_include_the_semantic_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "paraphrases.jsonl"
    assert run(["traces", "synth-paraphrases", "--out", str(out), "--questions", "3", "--phrasings", "2"]) == 0
    capsys.readouterr()

    def same_question_same_vector(texts: list[str]) -> np.ndarray:  # every wording of a subject alike
        subjects = ("France", "spider", "house")
        rows = [[float(subject in text) for subject in subjects] for text in texts]
        return np.array(rows, dtype=np.float32)

    monkeypatch.setattr(
        embeddings, "load_embedder", lambda *args, **kw: SimpleNamespace(embed=same_question_same_vector)
    )
    assert run(["traces", "ceilings", str(out), "--similarity", "0.9"]) == 0
    printed = capsys.readouterr().out
    assert "ceilings from the trace: response cache 0.0%" in printed
    assert "semantic ceiling at similarity 0.9: 50.0%" in printed  # the second wording of each of 3 questions
