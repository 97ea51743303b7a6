"""What k6's per-sample output costs, by how it is written: k6 CPU per 1,000 req/s, bytes per request.

Runs the lab's number-story script at a constant arrival rate against the OpenAI stub
(``tests/stub_openai.py`` in its own process) once per output option, one after the other:

- ``file``: ``--out json=FILE`` (the lab before round 3: one NDJSON file in the run folder);
- ``pipe``: ``--out json=-`` read by this process into a ``SampleStream`` as k6 writes it
  (the lab now: nothing on disk);
- ``fifo``: ``--out json=FIFO``, a named pipe read the same way (k6 writes a file's way:
  a few large writes per 200 ms flush, where its stdout goes through a 4 KiB buffer);
- ``pipe-fewer-tags``: the same with ``--system-tags status,expected_response,error_code``
  (no method/scenario tags: fewer bytes per sample);
- ``pipe-no-ids``: the same without the per-request metadata ``lab_request_id`` (``REQUEST_IDS=0``);
- ``pipe-lean``: both (fewer tags, no request ids);
- ``gzip``: ``--out json=FILE.gz`` (k6 compresses);
- ``csv``: ``--out csv=-`` drained, not parsed (the shorter format, for its k6 cost only);
- ``none``: no per-sample output at all (the floor: the summary only).

k6's CPU is its own rusage (``os.wait4``), so nothing else on the machine counts in it; the
reader's CPU is this process's for the pipe options.

    .venv/bin/python -m benchmarks.k6_output_cost [--rate 1000] [--duration-s 15] [--only pipe,file]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from lab.measurement.k6_ndjson import SampleStream
from lab.measurement.k6_results import parse_summary
from lab.run import k6_driver
from lab.run.k6_driver import build_k6_command, script_path
from services.processes import PROJECT_ROOT
from services.supervisor import ManagedService

OPTIONS: dict[str, tuple[str | None, list[str]]] = {
    "file": ("json={folder}/k6.ndjson", []),
    "pipe": ("json=-", []),
    "fifo": ("json={folder}/k6.fifo", []),
    "pipe-fewer-tags": ("json=-", ["--system-tags", "status,expected_response,error_code"]),
    "pipe-no-ids": ("json=-", ["-e", "REQUEST_IDS=0"]),
    "pipe-lean": ("json=-", ["--system-tags", "status,expected_response,error_code", "-e", "REQUEST_IDS=0"]),
    "gzip": ("json={folder}/k6.ndjson.gz", []),
    "csv": ("csv=-", []),
    "none": (None, []),
}


def k6_argv(option: str, *, target_url: str, rate_per_s: int, duration_s: float, folder: Path) -> list[str]:
    """The lab's k6 command with the output of ``option``."""
    env = {
        "TARGET": target_url,
        "MODEL": "stub",
        "MAX_TOKENS": "8",
        "PROMPTS": "1000",
        "LOAD_KIND": "constant-arrival-rate",
        "RATE": str(rate_per_s),
        "TIME_UNIT": "1s",
        "DURATION": f"{duration_s:g}s",
        "PRE_ALLOCATED_VUS": "50",
        "MAX_VUS": "200",
        "GRACEFUL_STOP": "2s",
    }
    argv = build_k6_command(script=script_path("number-story"), env=env, summary_path=folder / "summary.json")
    out_at = argv.index("--out")
    out, extra = OPTIONS[option]
    if out is None:
        del argv[out_at : out_at + 2]
    else:
        argv[out_at + 1] = out.format(folder=folder)
    return argv[:-1] + extra + argv[-1:]


def _reader(pipe: int, parse: bool, counted: dict[str, int]) -> None:
    """As ``K6Process.drain`` reads: a larger pipe, larger pieces, each fed to a ``SampleStream``."""
    k6_driver._grow_pipe(pipe)
    stream = SampleStream()
    while data := os.read(pipe, k6_driver.PIPE_READ_BYTES):
        if len(data) < k6_driver.PIPE_BATCH_BYTES:
            time.sleep(k6_driver.PIPE_BATCH_WAIT_S)
        counted["bytes"] += len(data)
        if parse:
            stream.feed(data)


def measure(option: str, *, target_url: str, rate_per_s: int, duration_s: float) -> dict[str, float]:
    """Run k6 once with ``option``; its CPU, the requests it completed, bytes written per request."""
    with tempfile.TemporaryDirectory(prefix="k6-output-") as tmp:
        folder = Path(tmp)
        argv = k6_argv(option, target_url=target_url, rate_per_s=rate_per_s, duration_s=duration_s, folder=folder)
        out = OPTIONS[option][0]
        piped = out is not None and out.endswith("=-")
        fifo = folder / "k6.fifo" if option == "fifo" else None
        if fifo is not None:
            os.mkfifo(fifo)
        counted = {"bytes": 0}
        self_before = resource.getrusage(resource.RUSAGE_SELF)
        began = time.monotonic()
        process = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE if piped else subprocess.DEVNULL,
            stderr=open(folder / "k6.log", "wb"),  # noqa: SIM115 - k6 writes to it until it exits
            env={**os.environ, "K6_NO_USAGE_REPORT": "true"},
        )
        reader = None
        if piped and process.stdout is not None:  # piped: Popen made a stdout pipe
            reader = threading.Thread(
                target=_reader, args=(process.stdout.fileno(), option.startswith("pipe"), counted)
            )
            reader.start()
        if fifo is not None:
            reader = threading.Thread(target=lambda: _reader(os.open(fifo, os.O_RDONLY), True, counted))
            reader.start()
        _, status, usage = os.wait4(process.pid, 0)
        wall_s = time.monotonic() - began
        if fifo is not None:
            os.close(os.open(fifo, os.O_RDWR))  # a reader still waiting for k6 to open the FIFO gets its end
        if reader is not None:
            reader.join()
        self_after = resource.getrusage(resource.RUSAGE_SELF)
        written = [path for path in folder.iterdir() if path.name.startswith("k6.ndjson")]
        counted["bytes"] += sum(path.stat().st_size for path in written)
        figures = parse_summary(folder / "summary.json")
    requests = figures["requests_total"] or 1
    k6_cpu_s = usage.ru_utime + usage.ru_stime
    reader_cpu_s = (self_after.ru_utime + self_after.ru_stime) - (self_before.ru_utime + self_before.ru_stime)
    per_s = figures["req_per_s"] or 0.0
    return {
        "req_per_s": per_s,
        "requests": requests,
        "wall_s": wall_s,
        "exit": os.waitstatus_to_exitcode(status),
        "k6_cpu_percent": 100 * k6_cpu_s / wall_s,
        "k6_cpu_percent_per_1000_req_per_s": 100 * k6_cpu_s / wall_s / (per_s / 1000) if per_s else float("nan"),
        "bytes_per_request": counted["bytes"] / requests,
        "reader_cpu_percent_per_1000_req_per_s": 100 * reader_cpu_s / wall_s / (per_s / 1000) if per_s else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=1000, help="arrival rate, requests/s")
    parser.add_argument("--duration-s", type=float, default=15)
    parser.add_argument("--only", default=",".join(OPTIONS), help="options to measure, in order")
    args = parser.parse_args()
    stub = ManagedService(
        name="stub",
        argv=[sys.executable, "-m", "tests.stub_openai", "--host", "{host}", "--port", "{port}"],
        log_path=Path(tempfile.mkdtemp(prefix="k6-output-stub-")) / "stub.log",
        cwd=PROJECT_ROOT,
        readiness_timeout_s=30,
    )
    print(f"rate {args.rate} req/s for {args.duration_s:g} s per option; load average {os.getloadavg()[0]:.2f}")
    print(
        f"{'option':<16} {'req/s':>8} {'k6 CPU %':>9} {'k6 CPU %/1k req/s':>18} {'bytes/req':>10} "
        f"{'reader CPU %/1k req/s':>22}"
    )
    with stub:
        for option in args.only.split(","):
            row = measure(option, target_url=stub.url, rate_per_s=args.rate, duration_s=args.duration_s)
            print(
                f"{option:<16} {row['req_per_s']:>8.0f} {row['k6_cpu_percent']:>9.1f} "
                f"{row['k6_cpu_percent_per_1000_req_per_s']:>18.1f} {row['bytes_per_request']:>10.0f} "
                f"{row['reader_cpu_percent_per_1000_req_per_s']:>22.1f}"
                + (f"  exit {row['exit']}" if row["exit"] else "")
            )


if __name__ == "__main__":
    main()
