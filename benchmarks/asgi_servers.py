"""Benchmark: the cache hit path under uvicorn, granian (ASGI) and granian (RSGI), side by side.

One private redis-server and one stub upstream (``tests/stub_upstream.py``) shared by all;
``--vus`` concurrent clients over 50 warmed prompts, ``--duration-s`` seconds per run, in
``--rounds`` interleaved rounds over these targets:

- ``seed``: the seed's proxy (``benchmarks/seed_proxy.py``, FastAPI under uvicorn), the
  baseline of the round-2 targets;
- ``bare-<server>``: a bare app answering from memory (``benchmarks/bare_ceiling.py``) served
  as the proxy is (``services/cache_proxy/serving.py``), the ceiling of each server;
- ``lab-<server>``: the lab's proxy (in-process tier on, the default) under each server.

The load client (``--client``):

- ``k6`` (``benchmarks/k6_cache_hits.js``): the lab's own load generator. On a small machine it
  needs more CPU per request than the servers it drives, so it bounds what they can show.
- ``wrk`` (``benchmarks/wrk_cache_hits.lua``; Debian's ``wrk``, one thread): the same requests at
  a fraction of k6's CPU, so the servers, not the client, are the bound.

Each run also records the CPU the target's processes and the client used (cores, over the
run's wall time). Prints req/s, p50/p95/p99 and CPU of each (mean over rounds), each server's
req/s over uvicorn's by round, the round-2 targets (>= 3x the seed's req/s, p99 <= 1/4 of the
seed's) for the proxy under each server, and the winner: the fastest proxy whose p99 is no
worse than uvicorn's (uvicorn, the default, unless another is faster at an equal or better p99).

Run: ``.venv/bin/python -m benchmarks.asgi_servers [--client k6|wrk] [--duration-s 10]
[--rounds 3] [--json FILE]``. Every process it starts is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psutil

from benchmarks.cache_proxy import REPO_ROOT, _average, _flushdb, python_service, run_k6
from services.redis_server import make_redis_service, redis_url_of
from services.supervisor import ManagedService

SERVERS = ("uvicorn", "granian", "granian-rsgi")
DEFAULT_SERVER = "uvicorn"
CLIENTS = ("k6", "wrk")
WRK_SCRIPT = REPO_ROOT / "benchmarks" / "wrk_cache_hits.lua"


def start_targets(stack: ExitStack, log_dir: Path) -> dict[str, ManagedService]:
    """Start Redis, the stub and every target; return target name -> its service."""
    redis = stack.enter_context(make_redis_service(log_path=log_dir / "redis.log"))
    redis_url = redis_url_of(redis)
    stub = stack.enter_context(python_service("stub", "tests.stub_upstream", [], log_dir))
    services: dict[str, tuple[str, list[str]]] = {
        "seed": ("benchmarks.seed_proxy", ["--upstream", stub.url, "--redis-url", redis_url])
    }
    for server in SERVERS:
        services[f"bare-{server}"] = ("benchmarks.bare_ceiling", ["--server", server])
    for server in SERVERS:
        services[f"lab-{server}"] = (
            "services.cache_proxy",
            ["--upstream", stub.url, "--redis-url", redis_url, "--namespace", f"bench-{server}", "--server", server],
        )
    targets = {
        name: stack.enter_context(python_service(name, module, extra, log_dir))
        for name, (module, extra) in services.items()
    }
    _flushdb(redis.host, int(redis.port or 0))
    return targets


def run_wrk(*, target: str, vus: int, duration_s: float) -> dict[str, float]:
    """One wrk run (one thread, ``vus`` connections) of the hit-path load; its figures in ms."""
    completed = subprocess.run(
        ["wrk", "-t1", f"-c{vus}", f"-d{duration_s:g}s", "-s", str(WRK_SCRIPT), target],
        capture_output=True,
        text=True,
        timeout=duration_s + 60,
        env={"PATH": "/usr/bin:/bin", "PROMPTS": "50"},
    )
    line = next((line for line in completed.stdout.splitlines() if line.startswith("WRK_JSON ")), None)
    if completed.returncode != 0 or line is None:
        raise RuntimeError(
            f"wrk failed ({completed.returncode}):\n{completed.stdout[-2000:]}\n{completed.stderr[-2000:]}"
        )
    figures = json.loads(line.removeprefix("WRK_JSON "))
    requests = figures["requests"]
    return {
        "req_per_s": figures["req_per_s"],
        "requests": requests,
        "failed_rate": figures["errors"] / requests if requests else 1.0,
        "latency_p50_ms": figures["latency_p50_ms"],
        "latency_p95_ms": figures["latency_p95_ms"],
        "latency_p99_ms": figures["latency_p99_ms"],
    }


def _process_cpu_s(pid: int | None) -> float:
    """CPU seconds (user + system) used so far by a process and its children."""
    process = psutil.Process(pid)
    total = 0.0
    for member in (process, *process.children(recursive=True)):
        try:
            times = member.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measured_run(
    client: str, target: ManagedService, *, vus: int, duration_s: float, log_dir: Path, label: str
) -> dict[str, float]:
    """One hit-path run, with the CPU (cores) the target and the client used over it."""
    target_cpu_before, client_cpu_before, started = _process_cpu_s(target.pid), _children_cpu_s(), time.monotonic()
    if client == "wrk":
        figures = run_wrk(target=target.url, vus=vus, duration_s=duration_s)
    else:
        figures = run_k6(target=target.url, mode="hits", vus=vus, duration_s=duration_s, log_dir=log_dir, label=label)
    wall_s = time.monotonic() - started
    figures["server_cpu_cores"] = (_process_cpu_s(target.pid) - target_cpu_before) / wall_s
    figures["client_cpu_cores"] = (_children_cpu_s() - client_cpu_before) / wall_s
    return figures


def measure(
    client: str, targets: dict[str, ManagedService], *, rounds: int, vus: int, duration_s: float, log_dir: Path
) -> dict[str, list]:
    """Warm every target, then ``rounds`` interleaved runs of each; the runs by target."""
    for name, target in targets.items():
        run_k6(target=target.url, mode="warm", vus=1, duration_s=60, log_dir=log_dir, label=f"warm-{name}")
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
    for round_number in range(1, rounds + 1):
        for name, target in targets.items():
            figures = measured_run(
                client, target, vus=vus, duration_s=duration_s, log_dir=log_dir, label=f"hits-{name}-{round_number}"
            )
            runs[name].append(figures)
            print(
                f"round {round_number} {name:18s} {figures['req_per_s']:8.0f} req/s  "
                f"p50 {figures['latency_p50_ms']:6.2f}  p95 {figures['latency_p95_ms']:6.2f}  "
                f"p99 {figures['latency_p99_ms']:6.2f} ms  failed {figures['failed_rate']:.3f}  "
                f"cpu server {figures['server_cpu_cores']:.2f} client {figures['client_cpu_cores']:.2f}",
                flush=True,
            )
    return runs


def verdicts(runs: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """Means, each server's req/s over uvicorn's by round, the round-2 targets and the winner."""
    averages = {name: _average(name_runs) for name, name_runs in runs.items()}
    servers = [server for server in SERVERS if f"lab-{server}" in runs]
    over_default = {
        f"{kind}-{server}": [
            run["req_per_s"] / default["req_per_s"]
            for run, default in zip(runs[f"{kind}-{server}"], runs[f"{kind}-{DEFAULT_SERVER}"], strict=True)
        ]
        for kind in ("bare", "lab")
        for server in servers
        if server != DEFAULT_SERVER and f"{kind}-{server}" in runs
    }
    seed = averages["seed"]
    targets = {
        server: {
            "vs_seed_req_per_s": averages[f"lab-{server}"]["req_per_s"] / seed["req_per_s"],
            "p99_over_seed_p99": averages[f"lab-{server}"]["latency_p99_ms"] / seed["latency_p99_ms"],
            "vs_own_ceiling_req_per_s": averages[f"lab-{server}"]["req_per_s"]
            / averages[f"bare-{server}"]["req_per_s"],
        }
        for server in servers
    }
    default = averages[f"lab-{DEFAULT_SERVER}"]
    eligible = [
        server for server in servers if averages[f"lab-{server}"]["latency_p99_ms"] <= default["latency_p99_ms"]
    ]
    winner = max(eligible, key=lambda server: averages[f"lab-{server}"]["req_per_s"])
    return {"average": averages, "over_uvicorn_req_per_s_by_round": over_default, "targets": targets, "winner": winner}


def print_verdicts(result: dict[str, Any], *, client: str, vus: int, duration_s: float, rounds: int) -> None:
    print()
    print(f"Hit path, {client} with {vus} connections, 50 warmed prompts, {duration_s:g} s x {rounds} rounds (mean):")
    print("| target | req/s | p50 ms | p95 ms | p99 ms | failed | server CPU (cores) | client CPU (cores) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, figures in result["average"].items():
        print(
            f"| {name} | {figures['req_per_s']:.0f} | {figures['latency_p50_ms']:.2f} | "
            f"{figures['latency_p95_ms']:.2f} | {figures['latency_p99_ms']:.2f} | {figures['failed_rate']:.3f} | "
            f"{figures['server_cpu_cores']:.2f} | {figures['client_cpu_cores']:.2f} |"
        )
    for name, ratios in result["over_uvicorn_req_per_s_by_round"].items():
        print(f"{name} / {name.split('-')[0]}-uvicorn req/s by round: " + ", ".join(f"{ratio:.2f}" for ratio in ratios))
    for server, figures in result["targets"].items():
        print(
            f"proxy under {server}: {figures['vs_seed_req_per_s']:.2f}x the seed's req/s (target >= 3.0), "
            f"p99 {figures['p99_over_seed_p99']:.2f} of the seed's (target <= 0.25), "
            f"{figures['vs_own_ceiling_req_per_s']:.0%} of its server's bare ceiling"
        )
    print(f"winner (the fastest at a p99 no worse than uvicorn's): {result['winner']}")


def main() -> None:
    """Start the targets, measure, print the comparison."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.asgi_servers")
    parser.add_argument("--client", choices=CLIENTS, default="k6")
    parser.add_argument("--duration-s", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--vus", type=int, default=32)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    args = parser.parse_args()
    if args.client == "wrk" and shutil.which("wrk", path="/usr/bin:/bin") is None:
        parser.error("--client wrk needs wrk (Debian: apt-get install wrk)")
    log_dir = Path(tempfile.mkdtemp(prefix="bench-asgi-servers-"))
    print(f"logs and k6 summaries: {log_dir}")
    with ExitStack() as stack:
        targets = start_targets(stack, log_dir)
        runs = measure(
            args.client, targets, rounds=args.rounds, vus=args.vus, duration_s=args.duration_s, log_dir=log_dir
        )
    result = {"client": args.client, "runs": runs, **verdicts(runs)}
    print_verdicts(result, client=args.client, vus=args.vus, duration_s=args.duration_s, rounds=args.rounds)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
