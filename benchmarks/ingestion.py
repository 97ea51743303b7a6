"""Ingestion benchmark: how fast k6's samples are parsed as they arrive, what is left after the load, peak memory.

Generates an NDJSON of N request samples (default 500,000) in exactly the layout real
k6 v1.1.0 writes for the lab's scripts: the lines of one request are taken from the
committed fixture ``tests/fixtures/k6/number_story.ndjson`` (cut from a real run) and
repeated with new times and values (18 sample lines per request, 5% failures, X-Cache
on successes, ``vus``/``vus_max`` once a second). Then, in a fresh child process, it feeds
the file in 1 MiB pieces to a ``SampleStream`` (what the lab does with k6's pipe during the
load), then times what is left once the load has ended (``finish``, ``parse_summary``, the
per-request figures encoded for the store) and reads the child's peak RSS
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``).

Target: <= 10 s after the load and <= 300 MB peak. Usage:
    .venv/bin/python -m benchmarks.ingestion [--requests 500000] [--rate-per-s 1700] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE_NDJSON = ROOT / "tests" / "fixtures" / "k6" / "number_story.ndjson"
FIXTURE_SUMMARY = ROOT / "tests" / "fixtures" / "k6" / "number_story_summary.json"

_SAMPLE_RE = re.compile(r'^(\{"metric":"[a-z_]+","type":"Point","data":\{"time":")[^"]+(","value":)[^,]+(,"tags":.*)$')


def _templates() -> tuple[list[str], dict[str, str], dict[str, str]]:
    """Metric definition lines, and the sample-line templates of a successful and a failed request."""
    definitions: list[str] = []
    ok: dict[str, str] = {}
    failed: dict[str, str] = {}
    with open(FIXTURE_NDJSON, encoding="utf-8") as handle:
        for line in handle:
            line = line.rstrip("\n")
            record = json.loads(line)
            if record["type"] == "Metric":
                definitions.append(line)
                continue
            tags = record["data"]["tags"]
            if tags.get("name") == "healthcheck":
                continue
            match = _SAMPLE_RE.match(line)
            assert match is not None, line
            template = match.group(1) + "%s" + match.group(2) + "%s" + match.group(3)
            target = failed if tags.get("expected_response") == "false" else ok
            target.setdefault(record["metric"], template)
    for metric in (
        "iterations",
        "iteration_duration",
        "data_sent",
        "data_received",
        "lab_iterations_started",
        "lab_requests_started",
        "lab_input_tokens",
        "lab_output_tokens",
        "lab_cache_hits",
        "vus",
        "vus_max",
    ):
        failed.setdefault(metric, ok[metric])
    return definitions, ok, failed


_REQUEST_ORDER = (
    "lab_iterations_started",
    "lab_requests_started",
    "http_reqs",
    "http_req_duration",
    "http_req_blocked",
    "http_req_connecting",
    "http_req_tls_handshaking",
    "http_req_sending",
    "http_req_waiting",
    "http_req_receiving",
    "http_req_failed",
    "lab_cache_hits",
    "lab_input_tokens",
    "lab_output_tokens",
    "data_sent",
    "data_received",
    "iteration_duration",
    "iterations",
)


def _timestamp(epoch_s: float) -> str:
    """RFC 3339 with nanoseconds, as Go writes it."""
    whole = int(epoch_s)
    nanos = round((epoch_s - whole) * 1e9)
    if nanos >= 1_000_000_000:
        whole, nanos = whole + 1, nanos - 1_000_000_000
    base = datetime.fromtimestamp(whole, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{base}.{nanos:09d}".rstrip("0").rstrip(".") + "Z"


def generate(path: Path, *, requests: int, rate_per_s: float, seed: int = 1) -> dict[str, int]:
    """Write the NDJSON; return what it holds (requests ok/failed, lines, bytes)."""
    definitions, ok, failed = _templates()
    rng = random.Random(seed)
    start = 1_800_000_000.0
    lines = 0
    ok_count = 0
    last_second = -1
    with open(path, "w", encoding="utf-8") as out:
        out.write("\n".join(definitions) + "\n")
        lines += len(definitions)
        block: list[str] = []
        for index in range(requests):
            now = start + index / rate_per_s
            second = int(now)
            if second != last_second:
                stamp = _timestamp(float(second) + 0.59)
                block.append(ok["vus"] % (stamp, 32))
                block.append(ok["vus_max"] % (stamp, 32))
                last_second = second
            is_ok = rng.random() >= 0.05
            templates = ok if is_ok else failed
            latency_ms = rng.lognormvariate(2.5, 0.4) if is_ok else rng.uniform(1.0, 5.0)
            stamp = _timestamp(now)
            values = {
                "lab_iterations_started": 1,
                "lab_requests_started": 1,
                "http_reqs": 1,
                "http_req_duration": round(latency_ms, 6),
                "http_req_blocked": 0.004,
                "http_req_connecting": 0,
                "http_req_tls_handshaking": 0,
                "http_req_sending": 0.031,
                "http_req_waiting": round(latency_ms - 0.1, 6),
                "http_req_receiving": 0.06,
                "http_req_failed": 0 if is_ok else 1,
                "lab_cache_hits": int(rng.random() < 0.9),
                "lab_input_tokens": 40,
                "lab_output_tokens": 128,
                "data_sent": 258,
                "data_received": 456,
                "iteration_duration": round(latency_ms + 0.3, 6),
                "iterations": 1,
            }
            for metric in _REQUEST_ORDER:
                if not is_ok and metric in ("lab_cache_hits", "lab_input_tokens", "lab_output_tokens"):
                    continue
                block.append(templates[metric] % (stamp, values[metric]))
            ok_count += is_ok
            if len(block) >= 20_000:
                out.write("\n".join(block) + "\n")
                lines += len(block)
                block = []
        if block:
            out.write("\n".join(block) + "\n")
            lines += len(block)
    return {
        "requests_ok": ok_count,
        "requests_failed": requests - ok_count,
        "lines": lines,
        "bytes": path.stat().st_size,
    }


_CHILD = r"""
import json, resource, sys, time
from lab.measurement.k6_ndjson import SampleStream
from lab.measurement.k6_ndjson_files import iter_chunks
from lab.measurement.k6_results import parse_summary
from lab.measurement.request_figures import encode
from pathlib import Path
stream = SampleStream()
started = time.perf_counter()
for chunk in iter_chunks(Path(sys.argv[1]), 1024 * 1024):  # pieces as the pipe gives them, during the load
    stream.feed(chunk)
fed = time.perf_counter()
series, samples = stream.finish()  # what is left once the load has ended
figures = parse_summary(sys.argv[2])
per_request = encode(samples)
finished = time.perf_counter()
print(json.dumps({
    "feed_s": fed - started, "after_load_s": finished - fed, "total_s": finished - started,
    "per_request_requests": per_request["requests"],
    "per_request_stored_bytes": sum(len(per_request[k] or b"") for k in ("latency_s", "ok", "ttft_s", "tpot_s")),
    "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "buckets": len(series), "requests_ok": series.requests_ok_total, "requests_failed": series.requests_failed_total,
    "latency_p95_s": series.latency.p95_s, "samples_read": series.samples_read,
}))
"""


def measure(ndjson_path: Path, summary_path: Path) -> dict[str, float]:
    """Parse in a fresh interpreter and return its timings and peak RSS."""
    baseline = subprocess.run(
        [
            sys.executable,
            "-c",
            "import resource, lab.measurement.k6_ndjson; "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, str(ndjson_path), str(summary_path)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    figures = json.loads(result.stdout)
    figures["interpreter_rss_mb"] = float(baseline.stdout.strip())
    return figures


def main() -> None:
    """Generate, measure, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=500_000)
    parser.add_argument("--rate-per-s", type=float, default=1_700.0, help="simulated completed requests per second")
    parser.add_argument("--keep", type=Path, default=None, help="write the NDJSON into this folder and keep it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "ingestion.ndjson"
        began = time.perf_counter()
        made = generate(path, requests=args.requests, rate_per_s=args.rate_per_s)
        print(
            f"generated {made['requests_ok'] + made['requests_failed']:,} requests "
            f"({made['requests_failed']:,} failed), "
            f"{made['lines']:,} lines, {made['bytes'] / 1e6:,.0f} MB in {time.perf_counter() - began:.1f} s"
        )
        figures = measure(path, FIXTURE_SUMMARY)
        assert figures["requests_ok"] == made["requests_ok"], (figures, made)
        assert figures["requests_failed"] == made["requests_failed"], (figures, made)
    assert figures["per_request_requests"] == made["requests_ok"] + made["requests_failed"], figures
    requests = made["requests_ok"] + made["requests_failed"]
    verdict = "PASS" if figures["after_load_s"] <= 10 and figures["peak_rss_mb"] <= 300 else "FAIL"
    print(
        f"parsed as it would arrive: {figures['feed_s']:.2f} s ({requests / figures['feed_s']:,.0f} requests/s of "
        f"parsing, one core); after the load: {figures['after_load_s']:.2f} s (finish the series, per-request "
        f"figures encoded: {figures['per_request_stored_bytes'] / 1e6:.2f} MB); peak RSS "
        f"{figures['peak_rss_mb']:.0f} MB (interpreter + imports alone {figures['interpreter_rss_mb']:.0f} MB); "
        f"{figures['buckets']} buckets; latency p95 {figures['latency_p95_s'] * 1000:.1f} ms; "
        f"target <= 10 s after the load and <= 300 MB: {verdict}"
    )


if __name__ == "__main__":
    main()
