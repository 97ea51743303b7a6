"""The peer-agreement benchmark's results: each figure's ratio lab over peer with its interval,
the rounds as measured, and the pooling of complete runs of the same design (``--pool``).
Pure logic over the samples and JSON documents of ``benchmarks.peer_agreement``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks import data_files

STREAMED_FIGURES = ("latency_avg_s", "ttft_avg_s", "tpot_avg_s", "req_per_s", "output_tok_per_s")
UNSTREAMED_FIGURES = ("latency_avg_s", "latency_p50_s", "req_per_s", "output_tok_per_s")
# Read from a vLLM target's /metrics around each run; kept beside each round's figures, not compared.
SERVER_FIGURES = ("server_prefix_cache_hit_ratio", "server_ttft_avg_s")
ROUND_FIGURES = (*STREAMED_FIGURES, "latency_p50_s", *SERVER_FIGURES)
PEER_NAMES = {
    "guidellm": "GuideLLM 0.8.1",
    "vllm-bench": "vllm bench serve 0.32",
    # The control: the lab against itself, run for run, shows how far the server alone moves.
    "lab-again": "the lab again (A/A)",
}
Figures = dict[str, Any]
# (peer, mode, concurrency) -> per round, (the lab's figures, the peer's)
Samples = dict[tuple[str, str, int], list[tuple[Figures, Figures]]]


def ratio_rows(samples: Samples, confidence: float = 0.95) -> list[dict[str, Any]]:
    """Each figure's ratio lab over peer, paired by round, with its interval at ``confidence``."""
    from lab.analysis.statistics import ratio_interval

    rows = []
    for (peer, mode, vus), pairs in sorted(samples.items()):
        for figure in STREAMED_FIGURES if mode == "streamed" else UNSTREAMED_FIGURES:
            lab_values = [pair[0].get(figure) for pair in pairs]
            peer_values = [pair[1].get(figure) for pair in pairs]
            if any(value is None for value in lab_values + peer_values):
                continue
            lab = [float(value) for value in lab_values if value is not None]
            peer_figures = [float(value) for value in peer_values if value is not None]
            interval = ratio_interval(lab, peer_figures, paired=True, confidence=confidence)
            rows.append(
                {
                    "peer": PEER_NAMES[peer],
                    "mode": mode,
                    "concurrency": vus,
                    "figure": figure,
                    "lab_mean": sum(lab) / len(lab),
                    "peer_mean": sum(peer_figures) / len(peer_figures),
                    "ratio": interval.ratio,
                    "ci95_low": interval.ci95_low,
                    "ci95_high": interval.ci95_high,
                    "pairs": len(pairs),
                    "within_5_percent": interval.ci95_low is not None
                    and interval.ci95_low >= 0.95
                    and (interval.ci95_high or 0) <= 1.05,
                }
            )
    return rows


def write_json(path: Path, document: dict[str, Any]) -> None:
    data_files.write(path, document, indent=1)


def rounds_of(samples: Samples) -> list[dict[str, Any]]:
    """Each round's pair as measured, so a wide interval can be read round by round."""
    return [
        {
            "peer": PEER_NAMES[peer],
            "mode": mode,
            "concurrency": vus,
            "lab": [{figure: pair[0].get(figure) for figure in ROUND_FIGURES} for pair in pairs],
            "peer_figures": [{figure: pair[1].get(figure) for figure in ROUND_FIGURES} for pair in pairs],
        }
        for (peer, mode, vus), pairs in sorted(samples.items())
    ]


def pooled_document(paths: list[Path], *, confidence: float) -> dict[str, Any]:
    """The ratios over the rounds of several complete runs of the same settings (the rounds apart)."""
    peer_keys = {name: key for key, name in PEER_NAMES.items()}
    documents = [read_complete_run(path) for path in paths]
    first = documents[0]
    samples: Samples = {}
    for path, document in zip(paths, documents, strict=True):
        differing = sorted(
            name
            for name in set(design_of(first)) | set(design_of(document))
            if design_of(first).get(name) != design_of(document).get(name)
        )
        if differing:
            raise ValueError(f"{path.name}: its settings differ from {paths[0].name}'s ({', '.join(differing)})")
        for cell in document["rounds"]:
            key = (peer_keys[cell["peer"]], cell["mode"], cell["concurrency"])
            samples.setdefault(key, []).extend(zip(cell["lab"], cell["peer_figures"], strict=True))
    return {
        "benchmark": "peer_agreement",
        "date": max(document["date"] for document in documents),
        "target": first["target"],
        "peers": first["peers"],
        "complete": True,
        "pooled_from": [path.name for path in paths],
        "confidence": confidence,
        "settings": {**first["settings"], "pairs": sum(document["settings"]["pairs"] for document in documents)},
        "wall_s": round(sum(document["wall_s"] for document in documents), 1),
        "speed_probe_s_by_round": [probe for document in documents for probe in document["speed_probe_s_by_round"]],
        "rows": ratio_rows(samples, confidence),
        "rounds": rounds_of(samples),
        # The stages' machines, as each recorded its own (older stages recorded none).
        data_files.MACHINE_RECORD_KEY: [document.get(data_files.MACHINE_RECORD_KEY) for document in documents],
    }


def read_complete_run(path: Path) -> dict[str, Any]:
    """A complete run's document as this benchmark wrote it, or ValueError naming the file."""
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: cannot be read as JSON ({error})") from error
    if (
        not isinstance(document, dict)
        or document.get("benchmark") != "peer_agreement"
        or not document.get("complete")
        or not all(key in document for key in ("settings", "target", "peers", "rounds"))
    ):
        raise ValueError(f"{path.name}: not a complete peer_agreement run with its rounds")
    return document


def design_of(document: dict[str, Any]) -> dict[str, Any]:
    """What runs must share to be pooled: everything but the number of rounds."""
    settings = {name: value for name, value in document["settings"].items() if name != "pairs"}
    return {**settings, "target": document["target"], "peers": document["peers"]}
