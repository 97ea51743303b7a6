"""Benchmark: the cache hit path under uvicorn and under granian, side by side in one run.

One private redis-server and one stub upstream (``tests/stub_upstream.py``) shared by all;
k6 (``benchmarks/k6_cache_hits.js``) at ``--vus`` VUs over 50 warmed prompts, ``--duration-s``
seconds per run, in ``--rounds`` interleaved rounds over these targets:

- ``seed``: the seed's proxy (``benchmarks/seed_proxy.py``, FastAPI under uvicorn), the
  baseline of the round-2 targets;
- ``bare-uvicorn-plain``: the bare ASGI app (``benchmarks/bare_ceiling.py``) under uvicorn's
  defaults, as measured before this benchmark existed;
- ``bare-uvicorn`` / ``bare-granian``: the bare app served as the proxy is
  (``services/cache_proxy/serving.py``: uvloop, HTTP/1, a header deadline), the ceiling
  of each server;
- ``lab-uvicorn`` / ``lab-granian``: the lab's proxy (in-process tier on, the default)
  under each server.

Prints req/s and p50/p95/p99 of each (mean over rounds), the per-round granian/uvicorn
ratios, and the round-2 targets (>= 3x the seed's req/s, p99 <= 1/4 of the seed's) for the
proxy under each server. The winner: granian if its proxy is faster at an equal or better
p99, else uvicorn.

Run: ``.venv/bin/python -m benchmarks.asgi_servers [--duration-s 10] [--rounds 3] [--json FILE]``.
Every process it starts is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.cache_proxy import _average, _flushdb, _python_service, run_k6
from services.redis_server import make_redis_service, redis_url_of

FIGURES = ("req_per_s", "latency_p50_ms", "latency_p95_ms", "latency_p99_ms", "failed_rate")


def start_targets(stack: ExitStack, log_dir: Path) -> dict[str, str]:
    """Start Redis, the stub and every target; return target name -> URL."""
    redis = stack.enter_context(make_redis_service(log_path=log_dir / "redis.log"))
    redis_url = redis_url_of(redis)
    stub = stack.enter_context(_python_service("stub", "tests.stub_upstream", [], log_dir))
    services = {
        "seed": ("benchmarks.seed_proxy", ["--upstream", stub.url, "--redis-url", redis_url]),
        "bare-uvicorn-plain": ("benchmarks.bare_ceiling", ["--plain-uvicorn"]),
        "bare-uvicorn": ("benchmarks.bare_ceiling", ["--server", "uvicorn"]),
        "bare-granian": ("benchmarks.bare_ceiling", ["--server", "granian"]),
        "lab-uvicorn": ("services.cache_proxy", ["--upstream", stub.url, "--redis-url", redis_url,
                                                 "--namespace", "bench-uvicorn", "--server", "uvicorn"]),
        "lab-granian": ("services.cache_proxy", ["--upstream", stub.url, "--redis-url", redis_url,
                                                 "--namespace", "bench-granian", "--server", "granian"]),
    }
    urls = {name: stack.enter_context(_python_service(name, module, extra, log_dir)).url
            for name, (module, extra) in services.items()}
    _flushdb(redis.host, int(redis.port or 0))
    return urls


def measure(urls: dict[str, str], *, rounds: int, vus: int, duration_s: float, log_dir: Path) -> dict[str, list]:
    """Warm every target, then ``rounds`` interleaved k6 runs of each; the runs by target."""
    for name, url in urls.items():
        run_k6(target=url, mode="warm", vus=1, duration_s=60, log_dir=log_dir, label=f"warm-{name}")
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in urls}
    for round_number in range(1, rounds + 1):
        for name, url in urls.items():
            figures = run_k6(target=url, mode="hits", vus=vus, duration_s=duration_s, log_dir=log_dir,
                             label=f"hits-{name}-{round_number}")
            runs[name].append(figures)
            print(f"round {round_number} {name:18s} {figures['req_per_s']:8.0f} req/s  "
                  f"p50 {figures['latency_p50_ms']:6.2f}  p95 {figures['latency_p95_ms']:6.2f}  "
                  f"p99 {figures['latency_p99_ms']:6.2f} ms  failed {figures['failed_rate']:.3f}", flush=True)
    return runs


def verdicts(runs: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """Means, per-round granian/uvicorn ratios, the round-2 targets and the winner."""
    averages = {name: _average(name_runs) for name, name_runs in runs.items()}
    per_round = {
        kind: [granian["req_per_s"] / uvicorn["req_per_s"]
               for granian, uvicorn in zip(runs[f"{kind}-granian"], runs[f"{kind}-uvicorn"])]
        for kind in ("bare", "lab")
    }
    seed = averages["seed"]
    targets = {
        server: {
            "vs_seed_req_per_s": averages[f"lab-{server}"]["req_per_s"] / seed["req_per_s"],
            "p99_over_seed_p99": averages[f"lab-{server}"]["latency_p99_ms"] / seed["latency_p99_ms"],
            "vs_own_ceiling_req_per_s": averages[f"lab-{server}"]["req_per_s"] / averages[f"bare-{server}"]["req_per_s"],
        }
        for server in ("uvicorn", "granian")
    }
    granian, uvicorn = averages["lab-granian"], averages["lab-uvicorn"]
    granian_wins = (granian["req_per_s"] > uvicorn["req_per_s"]
                    and granian["latency_p99_ms"] <= uvicorn["latency_p99_ms"])
    return {"average": averages, "granian_over_uvicorn_req_per_s_by_round": per_round, "targets": targets,
            "winner": "granian" if granian_wins else "uvicorn"}


def print_verdicts(result: dict[str, Any], *, vus: int, duration_s: float, rounds: int) -> None:
    print()
    print(f"Hit path, k6 {vus} VUs, 50 warmed prompts, {duration_s:.0f} s x {rounds} rounds (mean):")
    print("| target | req/s | p50 ms | p95 ms | p99 ms | failed |")
    print("|---|---|---|---|---|---|")
    for name, figures in result["average"].items():
        print(f"| {name} | {figures['req_per_s']:.0f} | {figures['latency_p50_ms']:.2f} | "
              f"{figures['latency_p95_ms']:.2f} | {figures['latency_p99_ms']:.2f} | {figures['failed_rate']:.3f} |")
    for kind, ratios in result["granian_over_uvicorn_req_per_s_by_round"].items():
        print(f"{kind}: granian / uvicorn req/s by round: " + ", ".join(f"{ratio:.2f}" for ratio in ratios))
    for server, figures in result["targets"].items():
        print(f"proxy under {server}: {figures['vs_seed_req_per_s']:.2f}x the seed's req/s (target >= 3.0), "
              f"p99 {figures['p99_over_seed_p99']:.2f} of the seed's (target <= 0.25), "
              f"{figures['vs_own_ceiling_req_per_s']:.0%} of its server's bare ceiling")
    print(f"winner (faster at an equal or better p99): {result['winner']}")


def main() -> None:
    """Start the targets, measure, print the comparison."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.asgi_servers")
    parser.add_argument("--duration-s", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--vus", type=int, default=32)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    args = parser.parse_args()
    log_dir = Path(tempfile.mkdtemp(prefix="bench-asgi-servers-"))
    print(f"logs and k6 summaries: {log_dir}")
    with ExitStack() as stack:
        urls = start_targets(stack, log_dir)
        runs = measure(urls, rounds=args.rounds, vus=args.vus, duration_s=args.duration_s, log_dir=log_dir)
    result = {"runs": runs, **verdicts(runs)}
    print_verdicts(result, vus=args.vus, duration_s=args.duration_s, rounds=args.rounds)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
