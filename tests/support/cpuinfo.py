"""Faked ``/proc/cpuinfo`` files: two machines of the same name, one with AVX-512 BF16."""

from __future__ import annotations

from pathlib import Path

# The flags of the project's machine (AMD EPYC, family 25), cut to what the engines look at.
AVX2_ONLY_FLAGS = "fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma avx2 bmi2"
BF16_FLAGS = AVX2_ONLY_FLAGS + " avx512f avx512dq avx512bw avx512vl avx512_vnni avx512_bf16"


def fake_cpuinfo(folder: Path, name: str, *, flags: str, model_name: str = "AMD EPYC", family: int = 25) -> Path:
    """A two-core ``/proc/cpuinfo`` under ``folder``; its path."""
    block = (
        "processor\t: {index}\nvendor_id\t: AuthenticAMD\ncpu family\t: {family}\nmodel\t\t: 1\n"
        "model name\t: {model_name}\nflags\t\t: {flags}\n\n"
    )
    path = folder / name
    path.write_text(
        "".join(block.format(index=i, family=family, model_name=model_name, flags=flags) for i in range(2)),
        encoding="utf-8",
    )
    return path
