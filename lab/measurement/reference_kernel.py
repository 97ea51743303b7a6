"""A fixed-kernel speed comparable across machines: single-threaded float32 matrix products.

Not the within-run machine-speed index (:mod:`lab.measurement.machine_speed`): that one is a
run's kernel time over the median of its experiment, so 1.0 on every machine. This one is an
absolute figure, GFLOP/s of one core on a fixed matrix product (the operation that dominates a
small model's decode on CPU), the best of a few tries so a momentary slowdown does not set it.
Two reports whose figures differ 2x were measured on machines (or host loads) that differ as
much, whatever their CPUs are called.

Measured once per lab process (the machine does not change under a worker) in a child with one
BLAS/OpenMP thread, so it neither disturbs the worker nor depends on the BLAS library's threads.
"""

from __future__ import annotations

import os
import subprocess
import sys
from functools import lru_cache

KERNEL_TIMEOUT_S = 30.0
MATRIX_SIZE = 512
PRODUCTS = 8  # per try: about 0.1 s on a core of the project's machine
TRIES = 5
_KERNEL = """
import sys, time, numpy
size, products, tries = (int(arg) for arg in sys.argv[1:4])
a = numpy.random.default_rng(0).standard_normal((size, size), dtype=numpy.float32)
a @ a  # the first product pays for loading BLAS
best = min(
    (lambda start: ([a @ a for _ in range(products)], time.perf_counter() - start)[1])(time.perf_counter())
    for _ in range(tries)
)
print(2 * size**3 * products / best / 1e9)
"""
_ONE_THREAD = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}


@lru_cache(maxsize=1)
def _measured_gflops() -> float:
    # Cached only when it succeeds (lru_cache keeps no exception): a failure is tried again.
    done = subprocess.run(
        [sys.executable, "-c", _KERNEL, str(MATRIX_SIZE), str(PRODUCTS), str(TRIES)],
        capture_output=True,
        text=True,
        timeout=KERNEL_TIMEOUT_S,
        env={**os.environ, **_ONE_THREAD},
        check=True,
    )
    return round(float(done.stdout.strip().splitlines()[-1]), 2)


def reference_kernel_gflops() -> float | None:
    """GFLOP/s of one core on the fixed float32 kernel, the best of :data:`TRIES`; None if it
    could not run (the run goes on without it)."""
    try:
        return _measured_gflops()
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
