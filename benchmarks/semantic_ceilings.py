"""Benchmark: what a semantic cache could answer, by threshold, before any run: the ceilings.

For two prompt sets, each replayed once in order as a trace (every line its text and one answer
length), the share of requests an unbounded cache with no expiry answers (``lab traces
ceilings``, :mod:`lab.workloads.trace_semantic`): exact (the same text came before) and semantic
at each threshold (a prompt at least that similar came before, right or wrong):

- ShareGPT: the first user turn of the first ``--sharegpt`` conversations of the bundled file
  (those of at most 2,000 characters), in file order: real users' opening prompts;
- the paraphrase workload (:mod:`lab.workloads.paraphrases`): its 50 questions asked 4 ways,
  in a seeded order: what is there to gain by construction (three of every four).

A semantic ceiling above the exact one is what only matching by meaning finds; on prompts with
few real paraphrases most of it is near-misses (a run in the proxy's measuring mode tells how
many are false). The embedding model is all-MiniLM-L6-v2, as the proxy's.

Run: ``.venv/bin/python -m benchmarks.semantic_ceilings [--sharegpt 2000] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import data_files
from lab.workloads.paraphrases import MAX_PHRASINGS, MAX_QUESTIONS, paraphrase_requests
from lab.workloads.sharegpt_reader import iter_sharegpt_conversations
from lab.workloads.trace_file import parse_trace
from lab.workloads.trace_plan import plan_trace, response_cache_ceiling
from lab.workloads.trace_semantic import semantic_ceilings
from services.embeddings import load_embedder

THRESHOLDS = (0.8, 0.85, 0.9, 0.95, 0.98)
MAX_PROMPT_CHARS = 2000
BLOCK_TOKENS = 512


def sharegpt_openings(count: int) -> list[str]:
    """The first user turn of the first ``count`` conversations that open with one (at most
    :data:`MAX_PROMPT_CHARS` characters), in file order."""
    openings: list[str] = []
    for conversation in iter_sharegpt_conversations():
        first = conversation.messages[0] if conversation.messages else None
        if first is not None and first["role"] == "user" and 0 < len(first["content"].strip()) <= MAX_PROMPT_CHARS:
            openings.append(first["content"])
            if len(openings) == count:
                break
    return openings


def ceilings(prompts: list[str]) -> dict[str, Any]:
    """The exact and semantic ceilings of ``prompts`` replayed once as a trace."""
    lines = [
        json.dumps({"timestamp": index, "input_text": text, "output_length": 16}) for index, text in enumerate(prompts)
    ]
    plan = plan_trace(parse_trace(lines, block_tokens=BLOCK_TOKENS), block_tokens=BLOCK_TOKENS)
    started = time.perf_counter()
    semantic = semantic_ceilings(plan.requests, THRESHOLDS, embed=load_embedder().embed) or {}
    return {
        "requests": len(plan.requests),
        "exact_ceiling": response_cache_ceiling(plan.requests, block_tokens=BLOCK_TOKENS),
        "semantic_ceilings": [{"similarity": threshold, "ceiling": share} for threshold, share in semantic.items()],
        "embedding_s": time.perf_counter() - started,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--sharegpt", type=int, default=2000, help="ShareGPT opening prompts (2000)")
    parser.add_argument("--json", type=Path, default=None, help="write the results here (docs/benchmarks/...)")
    args = parser.parse_args()
    paraphrases = [
        text for _, text in paraphrase_requests(questions=MAX_QUESTIONS, phrasings=MAX_PHRASINGS, random_seed=0)
    ]
    sets = {
        "ShareGPT opening prompts": ceilings(sharegpt_openings(args.sharegpt)),
        "the paraphrase workload": ceilings(paraphrases),
    }
    results: dict[str, Any] = {"thresholds": list(THRESHOLDS), "sets": sets}
    for name, found in sets.items():
        shares = ", ".join(f"{row['similarity']:g}: {row['ceiling']:.1%}" for row in found["semantic_ceilings"])
        print(f"{name} ({found['requests']} requests): exact {found['exact_ceiling']:.1%}; semantic {shares}")
    if args.json is not None:
        results["command"] = " ".join(["python -m benchmarks.semantic_ceilings", *sys.argv[1:]])
        data_files.write(args.json, results)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
