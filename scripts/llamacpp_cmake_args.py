"""Print the CMAKE_ARGS that build llama-cpp-python's CPU backend fastest on this host.

Run by the set-up before ``pip wheel llama-cpp-python``; prints one line of ``-D`` options
(empty on a CPU that is not x86-64, where llama.cpp's own default is kept).

Why not llama.cpp's default: the default build compiles ggml with ``-march=native``. On
this project's machine (an Intel Xeon under a Firecracker VM reporting AVX512, AVX512-VNNI,
AVX512-BF16, AVX-VNNI and AMX) that enables ggml's AMX matrix kernels, and the first
completion dies: a general protection fault on ``ldtilecfg`` in
``ggml_backend_amx_mul_mat`` with the native build, an invalid opcode on ``tilezero`` in
``tinygemm_kernel_amx`` with an explicit AMX_TILE/AMX_INT8 build. A standalone AMX program
(permission request, ``ldtilecfg``, ``tilezero``, four threads) runs fine there, so it is
ggml's AMX path, not AMX itself, that fails; every build without AMX works. So AMX is
never enabled here.

Why not AVX-512 either: measured on that machine with llama.cpp's own variant builds
(ggml ``GGML_CPU_ALL_VARIANTS``), CPU seconds for loading SmolLM2-135M Q4_1 and generating
128 tokens on one thread (medians; docs/records/2026-12-01-llamacpp-build-flags.md): AVX2
(haswell) 2.66 s, AVX2 + AVX-VNNI (alderlake) 2.61 s, AVX512 (skylakex) 2.95 s,
AVX512 + VBMI + VNNI (icelake) 2.82 s, + BF16 (zen4) 2.80 s. The 256-bit kernels are as
fast or faster for a model this small, so the fastest working set is AVX2 with AVX-VNNI
where the CPU has it.

    python scripts/llamacpp_cmake_args.py [--cpuinfo /proc/cpuinfo]
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

# ggml's x86 instruction-set options and the /proc/cpuinfo flag each needs; an option is
# on only when the CPU reports its flag. AVX_VNNI helps the 256-bit int8 dot products.
X86_OPTIONS_BY_CPU_FLAG: dict[str, str] = {
    "GGML_SSE42": "sse4_2",
    "GGML_AVX": "avx",
    "GGML_F16C": "f16c",
    "GGML_FMA": "fma",
    "GGML_AVX2": "avx2",
    "GGML_BMI2": "bmi2",
    "GGML_AVX_VNNI": "avx_vnni",
}

# Always off (see the module docstring): AMX faults, the AVX-512 kernels are slower.
X86_OPTIONS_OFF: tuple[str, ...] = (
    "GGML_AVX512",
    "GGML_AVX512_VBMI",
    "GGML_AVX512_VNNI",
    "GGML_AVX512_BF16",
    "GGML_AMX_TILE",
    "GGML_AMX_INT8",
    "GGML_AMX_BF16",
)

X86_MACHINES = frozenset({"x86_64", "amd64", "i686", "i386"})


def cpu_flags(cpuinfo_text: str) -> frozenset[str]:
    """The feature flags of the first processor in a /proc/cpuinfo text."""
    for line in cpuinfo_text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def cmake_args(flags: frozenset[str]) -> list[str]:
    """The ``-D`` options for an x86-64 CPU with these /proc/cpuinfo flags."""
    args = ["-DGGML_NATIVE=OFF"]
    for option, flag in X86_OPTIONS_BY_CPU_FLAG.items():
        args.append(f"-D{option}={'ON' if flag in flags else 'OFF'}")
    args.extend(f"-D{option}=OFF" for option in X86_OPTIONS_OFF)
    return args


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpuinfo", type=Path, default=Path("/proc/cpuinfo"))
    parser.add_argument("--machine", default=platform.machine(), help="as platform.machine()")
    args = parser.parse_args(argv)
    if args.machine.lower() not in X86_MACHINES:
        print("")  # llama.cpp's default build on other architectures
        return 0
    try:
        text = args.cpuinfo.read_text()
    except OSError as error:
        print(f"cannot read {args.cpuinfo}: {error.strerror}", file=sys.stderr)
        return 1
    print(" ".join(cmake_args(cpu_flags(text))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
