"""Pooling the rounds of runs of the peer-agreement benchmark continued in stages."""

import json
import re
from pathlib import Path

import pytest

from benchmarks.peer_agreement_results import pooled_document

SETTINGS = {"concurrency": [8], "pairs": 2, "duration_s": 60.0, "prefix_caching": False}


def run_document(lab_latencies_s: list[float], peer_latencies_s: list[float], **settings: object) -> dict:
    return {
        "benchmark": "peer_agreement",
        "date": "2026-12-06",
        "target": "vllm",
        "peers": ["GuideLLM 0.8.1"],
        "complete": True,
        "settings": {**SETTINGS, "pairs": len(lab_latencies_s), **settings},
        "wall_s": 100.0,
        "speed_probe_s_by_round": [0.9] * len(lab_latencies_s),
        "rounds": [
            {
                "peer": "GuideLLM 0.8.1",
                "mode": "not streamed",
                "concurrency": 8,
                "lab": [{"latency_avg_s": value, "req_per_s": 4.0} for value in lab_latencies_s],
                "peer_figures": [{"latency_avg_s": value, "req_per_s": 4.0} for value in peer_latencies_s],
            }
        ],
    }


def write(path: Path, document: dict) -> Path:
    path.write_text(json.dumps(document))
    return path


def test_pooled_rounds_give_one_interval_over_all_of_them(tmp_path: Path) -> None:
    first = write(tmp_path / "a.json", run_document([1.0, 1.1], [1.0, 1.0]))
    second = write(tmp_path / "b.json", run_document([1.0, 0.9], [1.0, 1.0]))

    pooled = pooled_document([first, second], confidence=0.95)

    assert pooled["settings"]["pairs"] == 4
    assert pooled["pooled_from"] == ["a.json", "b.json"]
    latency = next(row for row in pooled["rows"] if row["figure"] == "latency_avg_s")
    assert latency["pairs"] == 4
    assert latency["ci95_low"] < latency["ratio"] < latency["ci95_high"]
    # A figure no round kept (the median here) is left out, not compared on part of the rounds.
    assert [row["figure"] for row in pooled["rows"]] == ["latency_avg_s", "req_per_s"]


def test_runs_of_other_settings_are_refused_naming_the_setting(tmp_path: Path) -> None:
    first = write(tmp_path / "a.json", run_document([1.0, 1.1], [1.0, 1.0]))
    other = write(tmp_path / "b.json", run_document([1.0, 0.9], [1.0, 1.0], prefix_caching=True))

    with pytest.raises(ValueError, match=re.escape("b.json: its settings differ from a.json's (prefix_caching)")):
        pooled_document([first, other], confidence=0.95)
