"""Benchmark: the lab's cache proxy against the seed's proxy and the bare ceiling.

In one go, on this machine, with one private redis-server and one stub upstream
(``tests/stub_upstream.py``) shared by all:

1. Local-tier lookup: the two ways to keep hits in process coherent with Redis, timed
   per lookup on the same warmed keys: redis-py's client-side caching (sync ``redis.Redis``,
   RESP3 tracking; ``redis.asyncio`` has none) and the proxy's :class:`LocalTier` (an LRU
   kept coherent by ``CLIENT TRACKING ... REDIRECT`` invalidations). The faster one is
   the one the proxy keeps.
2. Hit path: k6 (``benchmarks/k6_cache_hits.js``), 32 VUs, 50 prompts warmed first,
   ``--duration-s`` seconds per run, in rounds (seed proxy, the lab proxy asking Redis on
   every hit, the lab proxy with its local tier, a bare ASGI app answering from memory).
   Prints req/s and p50/p95/p99 of each and the ratios of the local-tier proxy (targets:
   >= 3.0x the seed's req/s, >= 90% of the ceiling, p99 <= 1/4 of the seed's).
3. Miss path: 1 VU, the upstream directly vs the lab proxy with ``Cache-Control:
   no-store`` (BYPASS) vs the lab proxy with a new prompt every request (a real MISS:
   GET, upstream, SET). Prints p50 added by the proxy (target <= 2 ms).

With ``--recording`` it measures only the cost of trace recording (``--record-trace``) on
the hit path: the lab proxy without and with recording (the model's tokenizer, as a ``+cache``
run records), interleaved in ABBA rounds, the ratio of their req/s paired by round (target:
recording costs at most 5%) and of the proxy's CPU seconds a request, each with its 95%
interval; it also counts the lines recorded against the requests sent.

Run: ``.venv/bin/python -m benchmarks.cache_proxy [--duration-s 10] [--rounds 2] [--json FILE]``
or ``... --recording [--rounds 4]``. Every process it starts is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from statistics import mean
from typing import Any

from benchmarks import data_files
from services.redis_server import make_redis_service, redis_url_of
from services.supervisor import ManagedService

REPO_ROOT = Path(__file__).resolve().parent.parent
K6_SCRIPT = REPO_ROOT / "benchmarks" / "k6_cache_hits.js"
K6_BINARY = REPO_ROOT / ".venv" / "bin" / "k6"
TREND_STATS = "avg,min,med,max,p(50),p(95),p(99)"


def python_service(
    name: str, module: str, extra_args: list[str], log_dir: Path, *, readiness_timeout_s: float = 30.0
) -> ManagedService:
    """``python -m module --port {port} extra_args`` as a managed service logging under ``log_dir``."""
    return ManagedService(
        name=name,
        argv=[sys.executable, "-m", module, "--port", "{port}", *extra_args],
        log_path=log_dir / f"{name}.log",
        readiness_timeout_s=readiness_timeout_s,
        cwd=REPO_ROOT,
    )


def run_k6(
    *,
    target: str,
    mode: str,
    vus: int,
    duration_s: float,
    log_dir: Path,
    label: str,
    no_store: bool = False,
    prompts: int = 50,
) -> dict[str, float]:
    """Run the k6 script once; return req/s, error rate and latency figures in ms."""
    summary_path = log_dir / f"k6-{label}.json"
    env = {
        "TARGET": target,
        "MODE": mode,
        "VUS": str(vus),
        "DURATION": f"{duration_s}s",
        "PROMPTS": str(prompts),
        "NO_STORE": "1" if no_store else "0",
        "K6_NO_USAGE_REPORT": "true",
        "PATH": "/usr/bin:/bin",
    }
    argv = [
        str(K6_BINARY),
        "run",
        "--quiet",
        "--no-color",
        "--summary-export",
        str(summary_path),
        "--summary-trend-stats",
        TREND_STATS,
        str(K6_SCRIPT),
    ]
    completed = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=duration_s + 120)
    if completed.returncode != 0:
        raise RuntimeError(
            f"k6 failed ({completed.returncode}) for {label}:\n{completed.stdout[-2000:]}\n{completed.stderr[-2000:]}"
        )
    metrics = json.loads(summary_path.read_text())["metrics"]
    duration = metrics["http_req_duration"]
    return {
        "req_per_s": float(metrics["http_reqs"]["rate"]),
        "requests": float(metrics["http_reqs"]["count"]),
        "failed_rate": float(metrics.get("http_req_failed", {}).get("value", 0.0)),
        "latency_p50_ms": float(duration["p(50)"]),
        "latency_p95_ms": float(duration["p(95)"]),
        "latency_p99_ms": float(duration["p(99)"]),
        "latency_max_ms": float(duration["max"]),
    }


def _flushdb(host: str, port: int) -> None:
    with socket.create_connection((host, port), timeout=2) as sock:
        sock.sendall(b"FLUSHDB\r\n")
        sock.recv(64)


def _average(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: mean(run[key] for run in runs) for key in runs[0]}


def compare_local_tiers(host: str, port: int, *, keys: int = 50, lookups: int = 20_000) -> dict[str, float]:
    """Microseconds per hit lookup of redis-py's client-side cache and of LocalTier, both
    warmed with the same ``keys`` values (about 1 KB each, like a stored completion)."""
    import redis
    from redis.cache import CacheConfig

    from services.cache_proxy.resp import PipelinedRedis

    value = b"j" + b"x" * 1000
    names = [f"bench-tier:{index}" for index in range(keys)]
    setup = redis.Redis(host=host, port=port)
    for name in names:
        setup.set(name, value)
    figures: dict[str, float] = {}

    # redis-py refuses client-side caching below Redis 7.4 (Debian's here is 7.0): lifted for
    # this timing only, as the lookup cost of a cached GET does not depend on the server.
    import redis.connection

    redis.connection.CacheProxyConnection.MIN_ALLOWED_VERSION = "6.0.0"
    client = redis.Redis(host=host, port=port, protocol=3, cache_config=CacheConfig(max_size=keys * 2))
    for name in names:
        client.get(name)
    started_at = time.perf_counter()
    for index in range(lookups):
        client.get(names[index % keys])
    figures["redis_py_client_side_cache_us"] = (time.perf_counter() - started_at) / lookups * 1e6
    client.close()

    async def local_tier() -> float:
        from services.cache_proxy.local_tier import LocalTier

        tier = LocalTier(max_entries=keys * 2, max_bytes=64 * 1024 * 1024)
        pipelined = PipelinedRedis(f"redis://{host}:{port}/0", timeout_s=1.0, local_tier=tier)
        for name in names:
            await pipelined.get_and_fill(name)  # connects, turns tracking on, fills
        for name in names:
            await pipelined.get_and_fill(name)
        assert len(tier) == keys, "the local tier did not fill"
        started_at = time.perf_counter()
        for index in range(lookups):
            tier.get(names[index % keys])
        elapsed_s = time.perf_counter() - started_at
        await pipelined.close()
        return elapsed_s / lookups * 1e6

    figures["local_tier_lru_us"] = asyncio.run(local_tier())
    setup.delete(*names)
    setup.close()
    return figures


def start_services(stack: ExitStack, log_dir: Path) -> dict[str, ManagedService]:
    """Redis, the stub upstream, the seed's proxy, the lab's proxy without and with its local
    tier, and the bare ceiling, all started under ``stack``."""
    redis = stack.enter_context(make_redis_service(log_path=log_dir / "redis.log"))
    redis_url = redis_url_of(redis)
    stub = stack.enter_context(python_service("stub", "tests.stub_upstream", [], log_dir))
    upstream = ["--upstream", stub.url, "--redis-url", redis_url]
    services = {
        "seed": ("seed-proxy", "benchmarks.seed_proxy", upstream),
        "lab-redis": (
            "lab-proxy-redis",
            "services.cache_proxy",
            [*upstream, "--namespace", "bench-redis", "--local-tier-entries", "0"],
        ),
        "lab": ("lab-proxy", "services.cache_proxy", [*upstream, "--namespace", "bench"]),
        "bare": ("bare", "benchmarks.bare_ceiling", []),
    }
    started = {
        name: stack.enter_context(python_service(service_name, module, extra, log_dir))
        for name, (service_name, module, extra) in services.items()
    }
    _flushdb(redis.host, int(redis.port or 0))
    return {"redis": redis, "stub": stub, **started}


def measure_hit_path(
    targets: dict[str, str], *, rounds: int, vus: int, duration_s: float, log_dir: Path
) -> dict[str, list[dict[str, float]]]:
    """Warm each target, then ``rounds`` interleaved k6 runs of each; the runs by target."""
    for name, url in targets.items():
        run_k6(target=url, mode="warm", vus=1, duration_s=60, log_dir=log_dir, label=f"warm-{name}")
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
    for round_number in range(1, rounds + 1):
        for name, url in targets.items():
            figures = run_k6(
                target=url,
                mode="hits",
                vus=vus,
                duration_s=duration_s,
                log_dir=log_dir,
                label=f"hits-{name}-{round_number}",
            )
            runs[name].append(figures)
            print(
                f"round {round_number} {name:5s} {figures['req_per_s']:8.0f} req/s  "
                f"p50 {figures['latency_p50_ms']:6.2f} ms  p95 {figures['latency_p95_ms']:6.2f} ms  "
                f"p99 {figures['latency_p99_ms']:6.2f} ms  failed {figures['failed_rate']:.3f}",
                flush=True,
            )
    return runs


def measure_miss_path(*, upstream_url: str, proxy_url: str, duration_s: float, log_dir: Path) -> dict[str, dict]:
    """1 VU of new prompts: the upstream directly, the proxy bypassed, the proxy missing and storing."""
    return {
        "upstream direct": run_k6(
            target=upstream_url, mode="unique", vus=1, duration_s=duration_s, log_dir=log_dir, label="miss-direct"
        ),
        "lab proxy no-store (BYPASS)": run_k6(
            target=proxy_url,
            mode="unique",
            vus=1,
            duration_s=duration_s,
            log_dir=log_dir,
            label="miss-nostore",
            no_store=True,
        ),
        "lab proxy new prompts (MISS+store)": run_k6(
            target=proxy_url, mode="unique", vus=1, duration_s=duration_s, log_dir=log_dir, label="miss-store"
        ),
    }


def print_hit_path(
    averages: dict[str, dict[str, float]], *, vus: int, duration_s: float, rounds: int
) -> dict[str, float]:
    """The hit-path table and the lab proxies' ratios to the seed and the ceiling; the ratios."""
    print()
    print(f"Hit path, k6 {vus} VUs, 50 warmed prompts, {duration_s:.0f} s x {rounds} rounds (mean):")
    print("| server | req/s | p50 ms | p95 ms | p99 ms | failed |")
    print("|---|---|---|---|---|---|")
    for name, figures in averages.items():
        print(
            f"| {name} | {figures['req_per_s']:.0f} | {figures['latency_p50_ms']:.2f} | "
            f"{figures['latency_p95_ms']:.2f} | {figures['latency_p99_ms']:.2f} | {figures['failed_rate']:.3f} |"
        )
    seed_figures, bare_figures = averages["seed"], averages["bare"]
    ratios: dict[str, float] = {}
    for name in ("lab-redis", "lab"):
        figures = averages[name]
        ratios[f"{name}_vs_seed_req_per_s"] = figures["req_per_s"] / seed_figures["req_per_s"]
        ratios[f"{name}_vs_bare_req_per_s"] = figures["req_per_s"] / bare_figures["req_per_s"]
        ratios[f"{name}_p99_over_seed_p99"] = figures["latency_p99_ms"] / seed_figures["latency_p99_ms"]
        print(
            f"{name}: {ratios[f'{name}_vs_seed_req_per_s']:.2f}x the seed's req/s (target >= 3.0), "
            f"{ratios[f'{name}_vs_bare_req_per_s']:.0%} of the ceiling (target >= 90%), "
            f"p99 {ratios[f'{name}_p99_over_seed_p99']:.2f} of the seed's (target <= 0.25)"
        )
    return ratios


def print_miss_path(miss_runs: dict[str, dict], *, duration_s: float) -> dict[str, float]:
    """The miss-path table and the p50 each proxy path adds to the upstream's; those additions."""
    print()
    print(f"Miss path, 1 VU, {duration_s:.0f} s each, stub upstream:")
    print("| path | req/s | p50 ms | p95 ms | p99 ms |")
    print("|---|---|---|---|---|")
    for name, figures in miss_runs.items():
        print(
            f"| {name} | {figures['req_per_s']:.0f} | {figures['latency_p50_ms']:.2f} | "
            f"{figures['latency_p95_ms']:.2f} | {figures['latency_p99_ms']:.2f} |"
        )
    direct_p50 = miss_runs["upstream direct"]["latency_p50_ms"]
    added_p50_ms = {}
    for name in ("lab proxy no-store (BYPASS)", "lab proxy new prompts (MISS+store)"):
        added_p50_ms[name] = miss_runs[name]["latency_p50_ms"] - direct_p50
        print(f"p50 added by {name}: {added_p50_ms[name]:.2f} ms (target <= 2 ms)")
    return added_p50_ms


def measure_recording(*, rounds: int, vus: int, duration_s: float, log_dir: Path) -> dict[str, Any]:
    """The hit path of the lab proxy without and with trace recording, side by side: rounds in
    ABBA order (the plain proxy first in odd rounds, the recording one first in even ones), each
    run's req/s and the proxy process's CPU seconds per request (both proxies are one process on
    one event loop, so the CPU a request costs is what bounds their rate, and it varies far less
    between runs than a rate on a shared machine)."""
    import psutil

    from lab.analysis.statistics import ratio_interval

    trace = log_dir / "recorded.jsonl"
    tokenizer = REPO_ROOT / "models" / "SmolLM2-135M-Instruct"
    record = ["--record-trace", str(trace)] + (["--record-tokenizer", str(tokenizer)] if tokenizer.is_dir() else [])
    runs: dict[str, list[dict[str, float]]] = {"lab": [], "lab-recording": []}
    with ExitStack() as stack:
        redis = stack.enter_context(make_redis_service(log_path=log_dir / "redis.log"))
        stub = stack.enter_context(python_service("stub", "tests.stub_upstream", [], log_dir))
        upstream = ["--upstream", stub.url, "--redis-url", redis_url_of(redis)]
        proxies = {
            "lab": stack.enter_context(
                python_service("lab-proxy", "services.cache_proxy", [*upstream, "--namespace", "bench"], log_dir)
            ),
            "lab-recording": stack.enter_context(
                python_service(
                    "lab-proxy-recording",
                    "services.cache_proxy",
                    [*upstream, "--namespace", "bench-rec", *record],
                    log_dir,
                )
            ),
        }
        for name, proxy in proxies.items():
            run_k6(target=proxy.url, mode="warm", vus=1, duration_s=60, log_dir=log_dir, label=f"warm-{name}")
        for round_number in range(1, rounds + 1):
            order = ("lab", "lab-recording") if round_number % 2 else ("lab-recording", "lab")
            for name in order:
                process = psutil.Process(proxies[name].pid)
                cpu_before = sum(process.cpu_times()[:2])
                figures = run_k6(
                    target=proxies[name].url, mode="hits", vus=vus, duration_s=duration_s, log_dir=log_dir,
                    label=f"hits-{name}-{round_number}",
                )  # fmt: skip
                figures["proxy_cpu_ms_per_request"] = (
                    (sum(process.cpu_times()[:2]) - cpu_before) * 1000 / max(figures["requests"], 1)
                )
                runs[name].append(figures)
                print(
                    f"round {round_number} {name:13s} {figures['req_per_s']:8.0f} req/s  "
                    f"{figures['proxy_cpu_ms_per_request'] * 1000:6.1f} us CPU a request  "
                    f"p99 {figures['latency_p99_ms']:6.2f} ms  failed {figures['failed_rate']:.3f}",
                    flush=True,
                )
        time.sleep(2.0)  # the writer thread writes every 0.1 s; the tokenizer may still be loading
    sent = sum(run["requests"] for run in runs["lab-recording"]) + 50  # the warm-up's 50 prompts
    recorded = sum(len(path.read_text().splitlines()) for path in log_dir.glob("recorded*.jsonl"))
    averages = {name: _average(name_runs) for name, name_runs in runs.items()}
    kept = ratio_interval(
        [run["req_per_s"] for run in runs["lab-recording"]], [run["req_per_s"] for run in runs["lab"]], paired=True
    )
    cpu = ratio_interval(
        [run["proxy_cpu_ms_per_request"] for run in runs["lab-recording"]],
        [run["proxy_cpu_ms_per_request"] for run in runs["lab"]],
        paired=True,
    )
    print()
    print(f"Hit path with and without trace recording, k6 {vus} VUs, {duration_s:.0f} s x {rounds} rounds (mean):")
    print("| proxy | req/s | proxy CPU us a request | p50 ms | p95 ms | p99 ms | failed |")
    print("|---|---|---|---|---|---|---|")
    for name, figures in averages.items():
        print(
            f"| {name} | {figures['req_per_s']:.0f} | {figures['proxy_cpu_ms_per_request'] * 1000:.1f} | "
            f"{figures['latency_p50_ms']:.2f} | {figures['latency_p95_ms']:.2f} | {figures['latency_p99_ms']:.2f} | "
            f"{figures['failed_rate']:.3f} |"
        )
    print(
        f"recording keeps {kept.ratio:.1%} [{kept.ci95_low:.1%}, {kept.ci95_high:.1%}] of the hit path's req/s "
        f"(paired by round; target >= 95%); the proxy's CPU a request x{cpu.ratio:.3f} "
        f"[{cpu.ci95_low:.3f}, {cpu.ci95_high:.3f}]; {recorded:,.0f} of {sent:,.0f} requests recorded"
    )
    return {
        "hit_path": {"runs": runs, "average": averages},
        "recording_vs_plain_req_per_s": kept.ratio,
        "recording_vs_plain_req_per_s_ci95": [kept.ci95_low, kept.ci95_high],
        "recording_vs_plain_cpu_per_request": cpu.ratio,
        "recording_vs_plain_cpu_per_request_ci95": [cpu.ci95_low, cpu.ci95_high],
        "requests_sent_to_recording_proxy": sent,
        "lines_recorded": recorded,
        "tokenizer": tokenizer.is_dir(),
    }


def main() -> None:
    """Start the services, run the hit-path and miss-path comparisons, print the figures."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cache_proxy")
    parser.add_argument("--duration-s", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--vus", type=int, default=32)
    parser.add_argument("--miss-duration-s", type=float, default=8.0)
    parser.add_argument("--tier-lookups", type=int, default=20_000, help="lookups timed per local-tier kind")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    parser.add_argument("--recording", action="store_true", help="only the cost of trace recording on the hit path")
    args = parser.parse_args()

    log_dir = Path(tempfile.mkdtemp(prefix="bench-cache-proxy-"))
    print(f"logs and k6 summaries: {log_dir}")
    if args.recording:
        figures = measure_recording(rounds=args.rounds, vus=args.vus, duration_s=args.duration_s, log_dir=log_dir)
        if args.json:
            data_files.write(args.json, figures)
        return
    results: dict[str, Any] = {}
    with ExitStack() as stack:
        services = start_services(stack, log_dir)
        redis = services["redis"]
        tiers = compare_local_tiers(redis.host, int(redis.port or 0), lookups=args.tier_lookups)
        results["local_tier_lookup_us"] = tiers
        print(
            f"local-tier lookup: redis-py client-side cache {tiers['redis_py_client_side_cache_us']:.2f} us, "
            f"LocalTier {tiers['local_tier_lru_us']:.2f} us per hit",
            flush=True,
        )
        targets = {name: services[name].url for name in ("seed", "lab-redis", "lab", "bare")}
        runs = measure_hit_path(targets, rounds=args.rounds, vus=args.vus, duration_s=args.duration_s, log_dir=log_dir)
        miss_runs = measure_miss_path(
            upstream_url=services["stub"].url,
            proxy_url=services["lab"].url,
            duration_s=args.miss_duration_s,
            log_dir=log_dir,
        )
        lab_metrics = subprocess.run(
            ["curl", "-s", f"{services['lab'].url}/metrics"], capture_output=True, text=True
        ).stdout
    averages = {name: _average(name_runs) for name, name_runs in runs.items()}
    results["hit_path"] = {"runs": runs, "average": averages}
    results["miss_path"] = miss_runs
    results["lab_metrics_counters"] = [
        line for line in lab_metrics.splitlines() if line.startswith("lab_cache_") and "_total " in line
    ]
    results["ratios"] = print_hit_path(averages, vus=args.vus, duration_s=args.duration_s, rounds=args.rounds)
    results["miss_added_p50_ms"] = print_miss_path(miss_runs, duration_s=args.miss_duration_s)
    print()
    print("\n".join(results["lab_metrics_counters"]))
    if args.json:
        data_files.write(args.json, results)


if __name__ == "__main__":
    main()
