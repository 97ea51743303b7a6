"""How fast can a trace be replayed on time? p99 lateness of the trace replay by arrival rate.

For each rate (steps of 10 requests a second), a generated Mooncake trace of ``--requests``
requests at that steady rate is prepared by the lab's trace workload and replayed by the
real k6 (``k6/trace_replay.js``) against the OpenAI stub (tests/stub_openai.py, 20 ms an
answer, in this process); the lateness figures are the run's own (``lab.measurement.trace_figures``).
Prints one JSON document: each rate's p50/p99/max lateness and late count, and the highest
rate at which p99 lateness stays within ``--p99-limit-ms`` (every lower rate too). Stops after
the first rate over it, unless ``--keep-going``.

    .venv/bin/python -m benchmarks.trace_lateness [--rates 10,20,...] [--requests 1000] \
        > docs/benchmarks/trace_lateness.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import data_files


def replay(rate_per_s: float, requests: int, work_dir: Path, max_vus: int) -> dict[str, Any]:
    """One replay at ``rate_per_s``: its lateness figures and how many requests the stub saw."""
    from lab.measurement.trace_figures import trace_part
    from lab.specs.schema import RunSpec
    from services.processes import find_free_port
    from tests.stub_openai import StubServer
    from tests.support.traces import mooncake_lines, trace_replay_k6, write_trace

    run_dir = work_dir / f"rate-{rate_per_s:g}"
    run_dir.mkdir(parents=True, exist_ok=True)
    trace = write_trace(run_dir / "trace.jsonl", mooncake_lines(requests, rate_per_s, block_tokens=32))
    with StubServer(port=find_free_port(), delay_s=0.02) as stub:
        spec = RunSpec.model_validate(
            {
                "backend": "external",
                "target_url": stub.url,
                "workload": {"kind": "trace", "trace": {"path": str(trace), "block_tokens": 32}},
                "load": {"duration_s": requests / rate_per_s + 5, "max_vus": max_vus, "graceful_stop_s": 10},
            }
        )
        k6 = trace_replay_k6(spec, run_dir, stub.url, spec.backend_kind)
        with k6:
            exit_code = k6.wait(timeout_s=requests / rate_per_s + 120)
        served = stub.stats.completions_ok
    figures = trace_part(run_dir, run_dir / "summary.json")
    assert figures is not None
    return {
        "rate_per_s": rate_per_s,
        "requests": requests,
        "served": served,
        "k6_exit_code": exit_code,
        "lateness_p50_ms": figures.lateness_p50_ms,
        "lateness_p99_ms": figures.lateness_p99_ms,
        "lateness_max_ms": figures.lateness_max_ms,
        "requests_late_over_50ms": figures.requests_late_over_50ms,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default=",".join(str(rate) for rate in range(10, 210, 10)))
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--max-vus", type=int, default=64)
    parser.add_argument("--p99-limit-ms", type=float, default=10.0)
    parser.add_argument("--keep-going", action="store_true", help="try every rate, past the first over the limit")
    parser.add_argument("--json", type=Path, default=None, help="also write the document to this file")
    args = parser.parse_args()
    os.environ.setdefault("LAB_DATA_DIR", tempfile.mkdtemp(prefix="bench-trace-lateness-"))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    work_dir = Path(tempfile.mkdtemp(prefix="bench-trace-lateness-runs-"))
    rows, highest = [], None
    started = time.monotonic()
    for rate in (float(value) for value in args.rates.split(",")):
        row = replay(rate, args.requests, work_dir, args.max_vus)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
        within = row["lateness_p99_ms"] is not None and row["lateness_p99_ms"] <= args.p99_limit_ms
        if within and highest == (rate - 10 if rate > 10 else None):
            highest = rate  # every rate up to this one kept the limit
        elif not args.keep_going:
            break
    load_1m, _, _ = os.getloadavg()
    document = {
        "benchmark": "trace replay lateness (benchmarks/trace_lateness.py)",
        "command": "python -m benchmarks.trace_lateness " + " ".join(sys.argv[1:]),
        "date": datetime.now(UTC).date().isoformat(),
        "machine": f"{os.cpu_count()} cores, shared with other work (1-minute load average {load_1m:.1f} at the end)",
        "p99_limit_ms": args.p99_limit_ms,
        "highest_rate_per_s_within_limit": highest,
        "rows": rows,
        "seconds": round(time.monotonic() - started),
    }
    print(json.dumps(document, indent=1))
    if args.json:
        data_files.write(args.json, document, indent=1)


if __name__ == "__main__":
    main()
