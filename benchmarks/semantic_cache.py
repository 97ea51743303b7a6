"""Benchmark: what the semantic tier costs beside the exact one (``--cache semantic`` against ``exact``).

In one go, on this machine, with one private redis-server and the stub upstream
(``tests/stub_upstream.py``, which answers at once, so the proxy's own cost shows):

1. Requests a second and latency, one case at a time, in rounds (each case once a round, in
   turn): the exact tier answering exact hits; the semantic tier answering the same exact hits
   (it embeds nothing on an exact hit); the semantic tier answering paraphrases (an exact miss,
   one embedding, one search, one Redis GET: ``X-Cache: SEMANTIC``); and misses on each tier
   (a new prompt every request: upstream, store, and on the semantic tier the embedding, search
   and vector write), whose latency difference is what the semantic tier adds to a miss. The
   load is ``--concurrency`` asyncio clients in this process (the same client for every case).
   The prompts are the paraphrase workload's (:mod:`lab.workloads.paraphrases`): 50 questions,
   one wording stored, another asked; a pair whose second wording is not a semantic hit at
   ``--similarity`` is left out (said in the output).
2. Embedding time a request: all-MiniLM-L6-v2 on one thread, as the proxy runs it, over the
   prompts (p50, p99), and the proxy's own mean over the run (``lab_cache_embedding_seconds``).
3. Memory per 10,000 entries: the in-process index (:class:`VectorIndex`, 10,000 vectors in one
   group), Redis's bytes for one entry and for one vector record beside it (``MEMORY USAGE``)
   times 10,000, and the resident memory of each proxy process after the load (the semantic one
   holds torch and the model).

Run: ``.venv/bin/python -m benchmarks.semantic_cache [--rounds 3] [--duration-s 8] [--concurrency 8]
[--json FILE]``. Every process it starts is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil

from benchmarks import data_files
from benchmarks.cache_proxy import python_service
from lab.workloads.paraphrases import FAMILIES, paraphrase_requests
from services.cache_proxy.semantic_index import VectorIndex
from services.embeddings import load_embedder
from services.redis_server import make_redis_service, redis_url_of
from services.supervisor import ManagedService
from tests.support.integration_proxy import redis_command

CHAT_PATH = "/v1/chat/completions"
ENTRIES = 10_000
# The cases of part 1: (name, proxy, which prompts).
CASES = (
    ("exact tier, exact hits", "exact", "stored"),
    ("semantic tier, exact hits", "semantic", "stored"),
    ("semantic tier, semantic hits", "semantic", "paraphrases"),
    ("exact tier, misses", "exact", "new"),
    ("semantic tier, misses", "semantic", "new"),
)


def body(text: str) -> dict[str, Any]:
    return {"model": "stub-model", "messages": [{"role": "user", "content": text}], "max_tokens": 16, "temperature": 0}


def service(name: str, module: str, arguments: list[str], log_dir: Path) -> ManagedService:
    # A semantic proxy loads torch and its embedding model before it answers /health.
    return python_service(name, module, arguments, log_dir, readiness_timeout_s=120.0)


async def load(url: str, texts: Iterator[str], *, duration_s: float, concurrency: int) -> dict[str, Any]:
    """``concurrency`` clients sending ``texts`` in turn for ``duration_s``: req/s, latency
    quantiles (ms) and the X-Cache values seen."""
    latencies_s: list[float] = []
    seen: dict[str, int] = {}
    deadline = time.perf_counter() + duration_s

    async def client(http: httpx.AsyncClient) -> None:
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            response = await http.post(CHAT_PATH, json=body(next(texts)))
            latencies_s.append(time.perf_counter() - started)
            cache = response.headers.get("x-cache", "none") if response.status_code == 200 else "error"
            seen[cache] = seen.get(cache, 0) + 1

    began = time.perf_counter()
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=httpx.Limits(max_connections=concurrency)) as http:
        await asyncio.gather(*(client(http) for _ in range(concurrency)))
    elapsed_s = time.perf_counter() - began
    quantiles = np.quantile(np.array(latencies_s) * 1000, [0.5, 0.99])
    return {
        "req_per_s": len(latencies_s) / elapsed_s,
        "requests": len(latencies_s),
        "latency_p50_ms": float(quantiles[0]),
        "latency_p99_ms": float(quantiles[1]),
        "x_cache": seen,
    }


def paraphrase_pairs(semantic_url: str, exact_url: str) -> tuple[list[str], list[str], int]:
    """Store one wording of each of 50 questions in both proxies; keep the pairs whose second
    wording the semantic tier answers SEMANTIC. (stored, paraphrases, pairs left out)."""
    wordings: dict[int, list[str]] = {}
    for number, text in paraphrase_requests(questions=50, phrasings=2, random_seed=0):
        wordings.setdefault(number, []).append(text)
    stored, paraphrases = [], []
    with httpx.Client(timeout=60) as http:
        for first, second in wordings.values():
            for url in (semantic_url, exact_url):
                http.post(url + CHAT_PATH, json=body(first))
            if http.post(semantic_url + CHAT_PATH, json=body(second)).headers.get("x-cache") == "SEMANTIC":
                stored.append(first)
                paraphrases.append(second)
    return stored, paraphrases, len(wordings) - len(stored)


def new_prompts(seed: int) -> Iterator[str]:
    """A prompt never sent before, every time: eight words drawn from the paraphrase workload's
    (a sentence of a pattern, "fact number N", would be a semantic hit on its predecessor)."""
    words = sorted(
        {
            word.strip("?.'")
            for templates, subjects in FAMILIES
            for text in (*templates, *subjects)
            for word in text.split()
            if word.strip("?.'").isalpha()
        }
    )
    rng = random.Random(seed)
    for number in itertools.count():
        yield " ".join(rng.sample(words, 8)) + f" {number}"


def metric(url: str, name: str) -> float:
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def embedding_times(texts: list[str]) -> dict[str, float]:
    """all-MiniLM-L6-v2, one thread, one text a call (as the proxy embeds): p50 and p99 in ms."""
    embedder = load_embedder()
    embedder.embed_one("warm up")
    times_ms = []
    for text in texts * 4:
        started = time.perf_counter()
        embedder.embed_one(text)
        times_ms.append((time.perf_counter() - started) * 1000)
    quantiles = np.quantile(times_ms, [0.5, 0.99])
    return {"p50_ms": float(quantiles[0]), "p99_ms": float(quantiles[1]), "calls": len(times_ms)}


def memory(redis: ManagedService, proxies: dict[str, ManagedService], namespace: str) -> dict[str, Any]:
    """Part 3 (see the module docstring)."""
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((ENTRIES, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = VectorIndex(384)
    for number, vector in enumerate(vectors):
        index.add("group", f"entry-{number}", vector)
    host, port = redis.host, int(redis.port or 0)
    scanned = redis_command(
        host, port, b"SCAN", b"0", b"MATCH", f"{namespace}:resp:v2:vec:*".encode(), b"COUNT", b"1000"
    )
    vector_key = next(part for part in scanned.split(b"\r\n") if part.startswith(namespace.encode()))
    entry_key = vector_key.replace(b":vec:", b":")
    entry_bytes = int(redis_command(host, port, b"MEMORY", b"USAGE", entry_key).split(b"\r\n")[0][1:])
    vector_bytes = int(redis_command(host, port, b"MEMORY", b"USAGE", vector_key).split(b"\r\n")[0][1:])
    return {
        "index_mib_per_10000": index.memory_bytes() / 2**20,
        "redis_entry_bytes": entry_bytes,
        "redis_vector_bytes": vector_bytes,
        "redis_entries_mib_per_10000": entry_bytes * ENTRIES / 2**20,
        "redis_vectors_mib_per_10000": vector_bytes * ENTRIES / 2**20,
        "proxy_rss_mib": {name: psutil.Process(proxy.pid).memory_info().rss / 2**20 for name, proxy in proxies.items()},
    }


def summarise(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """Each case's means over the rounds, and its slowest and fastest round's req/s."""
    summary = {}
    for name, _, _ in CASES:
        runs = [found[name] for found in rounds]
        summary[name] = {
            "req_per_s": statistics.mean(run["req_per_s"] for run in runs),
            "req_per_s_min": min(run["req_per_s"] for run in runs),
            "req_per_s_max": max(run["req_per_s"] for run in runs),
            "latency_p50_ms": statistics.mean(run["latency_p50_ms"] for run in runs),
            "latency_p99_ms": statistics.mean(run["latency_p99_ms"] for run in runs),
        }
    return summary


def measure(args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    with ExitStack() as stack:
        redis = stack.enter_context(make_redis_service(log_path=log_dir / "redis.log"))
        stub = stack.enter_context(service("stub", "tests.stub_upstream", [], log_dir))
        upstream = ["--upstream", stub.url, "--redis-url", redis_url_of(redis)]
        semantic_arguments = ["--cache", "semantic", "--similarity", str(args.similarity)]
        proxies = {
            "exact": stack.enter_context(
                service("exact", "services.cache_proxy", [*upstream, "--namespace", "bench-exact"], log_dir)
            ),
            "semantic": stack.enter_context(
                service(
                    "semantic",
                    "services.cache_proxy",
                    [*upstream, "--namespace", "bench-semantic", *semantic_arguments],
                    log_dir,
                )
            ),
        }
        stored, paraphrases, left_out = paraphrase_pairs(proxies["semantic"].url, proxies["exact"].url)
        prompts = {"stored": stored, "paraphrases": paraphrases}
        rounds = []
        for number in range(args.rounds):
            found = {}
            for case, (name, proxy, which) in enumerate(CASES):
                seed = number * len(CASES) + case
                texts = new_prompts(seed) if which == "new" else itertools.cycle(prompts[which])
                found[name] = asyncio.run(
                    load(proxies[proxy].url, texts, duration_s=args.duration_s, concurrency=args.concurrency)
                )
                print(f"round {number + 1} {name}: {found[name]['req_per_s']:,.0f} req/s {found[name]['x_cache']}")
            rounds.append(found)
        semantic_url = proxies["semantic"].url
        proxy_embedding_ms = (
            metric(semantic_url, "lab_cache_embedding_seconds_sum")
            / max(1.0, metric(semantic_url, "lab_cache_embedding_seconds_count"))
            * 1000
        )
        return {
            "similarity": args.similarity,
            "concurrency": args.concurrency,
            "duration_s": args.duration_s,
            "pairs": len(stored),
            "pairs_left_out": left_out,
            "rounds": rounds,
            "cases": summarise(rounds),
            "embedding": {**embedding_times(stored + paraphrases), "proxy_mean_ms": proxy_embedding_ms},
            "memory": memory(redis, proxies, "bench-semantic"),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration-s", type=float, default=8.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--similarity", type=float, default=0.9)
    parser.add_argument("--json", type=Path, default=None, help="write the results here (docs/benchmarks/...)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="semantic-bench-") as folder:
        results = measure(args, Path(folder))
    for name, figures in results["cases"].items():
        print(
            f"{name}: {figures['req_per_s']:,.0f} req/s (rounds {figures['req_per_s_min']:,.0f}-"
            f"{figures['req_per_s_max']:,.0f}), p50 {figures['latency_p50_ms']:.2f} ms,"
            f" p99 {figures['latency_p99_ms']:.2f} ms"
        )
    print(f"embedding: {results['embedding']}")
    print(f"memory: {results['memory']}")
    if args.json is not None:
        results["command"] = " ".join(["python -m benchmarks.semantic_cache", *sys.argv[1:]])
        data_files.write(args.json, results)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
