"""Tests of scripts/llamacpp_cmake_args.py: which ggml CPU options the set-up builds with."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "llamacpp_cmake_args.py"
_spec = importlib.util.spec_from_file_location("llamacpp_cmake_args", SCRIPT)
assert _spec is not None and _spec.loader is not None
llamacpp_cmake_args = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(llamacpp_cmake_args)

# The project's machine: a Xeon reporting AVX-512, AVX-VNNI and AMX (trimmed /proc/cpuinfo).
SAPPHIRE_RAPIDS_CPUINFO = """\
processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c bmi1 avx2 bmi2 avx512f avx512dq \
avx512cd avx512bw avx512vl avx_vnni avx512_bf16 avx512vbmi avx512_vnni amx_bf16 avx512_fp16 \
amx_tile amx_int8

processor\t: 1
flags\t\t: fpu sse sse2
"""

# An AMD EPYC of the Zen 2 generation: AVX2, no AVX-VNNI, no AVX-512.
ZEN2_CPUINFO = """\
processor\t: 0
vendor_id\t: AuthenticAMD
flags\t\t: fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c bmi1 avx2 bmi2
"""

# An old x86-64 CPU with SSE4.2 and AVX only.
SANDY_BRIDGE_CPUINFO = "flags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2 avx\n"


def options(cpuinfo: str) -> dict[str, str]:
    """The printed options as a {name: ON/OFF} dict."""
    args = llamacpp_cmake_args.cmake_args(llamacpp_cmake_args.cpu_flags(cpuinfo))
    parsed = {}
    for arg in args:
        assert arg.startswith("-D"), arg
        name, _, value = arg[2:].partition("=")
        parsed[name] = value
    return parsed


def test_cpu_flags_come_from_the_first_processor() -> None:
    flags = llamacpp_cmake_args.cpu_flags(SAPPHIRE_RAPIDS_CPUINFO)
    assert {"avx2", "amx_int8", "avx_vnni"} <= flags
    assert llamacpp_cmake_args.cpu_flags("processor\t: 0\n") == frozenset()


def test_an_amx_cpu_never_gets_amx_or_avx512() -> None:
    built = options(SAPPHIRE_RAPIDS_CPUINFO)
    for option in (
        "GGML_AMX_TILE",
        "GGML_AMX_INT8",
        "GGML_AMX_BF16",
        "GGML_AVX512",
        "GGML_AVX512_VBMI",
        "GGML_AVX512_VNNI",
        "GGML_AVX512_BF16",
    ):
        assert built[option] == "OFF", option
    assert built["GGML_NATIVE"] == "OFF"


def test_an_amx_cpu_gets_avx2_with_avx_vnni() -> None:
    built = options(SAPPHIRE_RAPIDS_CPUINFO)
    for option in ("GGML_SSE42", "GGML_AVX", "GGML_F16C", "GGML_FMA", "GGML_AVX2", "GGML_BMI2", "GGML_AVX_VNNI"):
        assert built[option] == "ON", option


def test_an_avx2_cpu_without_vnni_gets_avx2_only() -> None:
    built = options(ZEN2_CPUINFO)
    assert built["GGML_AVX2"] == "ON"
    assert built["GGML_FMA"] == "ON"
    assert built["GGML_AVX_VNNI"] == "OFF"


def test_an_avx_only_cpu_gets_no_instruction_it_lacks() -> None:
    built = options(SANDY_BRIDGE_CPUINFO)
    assert built["GGML_AVX"] == "ON"
    assert built["GGML_SSE42"] == "ON"
    for option in ("GGML_AVX2", "GGML_FMA", "GGML_F16C", "GGML_BMI2", "GGML_AVX_VNNI"):
        assert built[option] == "OFF", option


def test_main_prints_one_line_of_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(SAPPHIRE_RAPIDS_CPUINFO)
    assert llamacpp_cmake_args.main(["--cpuinfo", str(cpuinfo), "--machine", "x86_64"]) == 0
    line = capsys.readouterr().out
    assert line.count("\n") == 1
    assert "-DGGML_AVX_VNNI=ON" in line.split()
    assert "-DGGML_AMX_INT8=OFF" in line.split()


def test_main_keeps_llama_cpp_defaults_off_x86(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert llamacpp_cmake_args.main(["--cpuinfo", str(tmp_path / "absent"), "--machine", "aarch64"]) == 0
    assert capsys.readouterr().out.strip() == ""


def test_main_reports_an_unreadable_cpuinfo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert llamacpp_cmake_args.main(["--cpuinfo", str(tmp_path / "absent"), "--machine", "x86_64"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "cannot read" in captured.err
