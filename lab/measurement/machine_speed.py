"""How fast the machine was around a run: a short fixed CPU kernel timed before and after.

The same configuration measured twice an hour apart can differ 2-3x here while nothing else
runs (the host, not the lab, moved). A fixed amount of work (single-threaded float32 matrix
products, the operation that dominates a small model's decode on CPU, and a Python loop, the
per-step overhead of a serving engine) timed just before and just after each run gives each
run a figure of the machine's speed. Over an experiment, :func:`speed_indices` turns those
into a ``machine_speed_index``: 1.0 at the experiment's median, 0.8 for a run measured on a
machine 20% slower.

The index is a figure for the record, never a flag. Re-analysed on the stored runs
(``benchmarks/machine_speed_separation.py``, docs/records/2026-12-03-machine-speed-index-as-a-busy-flag.md),
no threshold on it separates runs beside a CPU hog from quiet ones: in the contention reproduction the old
10% rule flagged two quiet runs (1.56, 1.46) and missed a hog run (0.90, other processes at
111% of a core); the best cut fitted on those 13 runs still misses one and flags quiet runs of
the other reproductions, and it catches only half of the busy runs of a reproduction taken on
a machine busy throughout (relative to the median, a machine busy all along looks normal).
The kernel times the moments before and after the load, not the load itself. Contention is
flagged by what is measured during the load: other processes' CPU
(:mod:`lab.measurement.checks`): at 10% of a core it separates those runs without an error; at the
lab's 25% it misses only a run that overlapped the hog for 13 of its 56 s.

The kernel runs in a child process with one BLAS/OpenMP thread, so it neither disturbs the
worker's threads nor depends on how many cores the BLAS library would take.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from collections.abc import Mapping

KERNEL_TIMEOUT_S = 60.0

# About two seconds on a quiet core of the project's machine: 20 repetitions of a fixed piece
# of work. Fixed work, never fixed time: the seconds it takes are the figure. Measured here
# (docs/records/2026-12-01-machine-speed-steadiness.md), an idle 2-vCPU machine of this kind switches every few
# seconds between two speeds about 1.5x apart, so a one-second sample is mostly luck; two
# seconds before and two after the load average over several switches, while contention that
# lasts (a busy loop, another tenant) slows all of it.
REPETITIONS = 20
_KERNEL = """
import sys, time, numpy
a = numpy.random.default_rng(0).standard_normal((256, 256), dtype=numpy.float32)
start = time.perf_counter()
for _ in range(int(sys.argv[1])):
    for _ in range(60):
        b = a @ a
    total = 0
    for i in range(300_000):
        total += i & 7
print(time.perf_counter() - start)
"""

_ONE_THREAD = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}


def calibration_s(repetitions: int = REPETITIONS) -> float | None:
    """Seconds ``repetitions`` of the fixed kernel took now, scaled to :data:`REPETITIONS` so
    figures taken with other counts compare; None if it could not run (the run goes on
    without it) or with no repetitions asked for."""
    if repetitions <= 0:
        return None
    try:
        done = subprocess.run(
            [sys.executable, "-c", _KERNEL, str(repetitions)],
            capture_output=True,
            text=True,
            timeout=KERNEL_TIMEOUT_S,
            env={**os.environ, **_ONE_THREAD},
            check=True,
        )
        return float(done.stdout.strip().splitlines()[-1]) * REPETITIONS / repetitions
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def run_calibration_s(before_s: float | None, after_s: float | None) -> float | None:
    """A run's kernel time: the mean of before and after, or whichever exists."""
    values = [value for value in (before_s, after_s) if value]
    return statistics.fmean(values) if values else None


def speed_indices(calibration_by_run: Mapping[int, float | None]) -> dict[int, float | None]:
    """Each run's machine speed relative to the median run of the set (1.0 = the median;
    above 1 faster, below slower); None where a run has no calibration."""
    measured = [value for value in calibration_by_run.values() if value]
    if not measured:
        return {run_id: None for run_id in calibration_by_run}
    median_s = statistics.median(measured)
    return {run_id: (median_s / value if value else None) for run_id, value in calibration_by_run.items()}
