"""Capture the environment a run measured: versions, hardware, model identity, git commit."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Any

import psutil

# The lab's own packages; each backend adds its own (lab/backends).
LAB_PACKAGES = ("redis", "httpx", "streamlit", "k6")
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def packages() -> tuple[str, ...]:
    """Every package a run records: the lab's and each registered backend's, once each."""
    from lab.backends import BACKENDS

    names = [name for backend in BACKENDS.values() for name in backend.packages]
    return tuple(dict.fromkeys([*names, *LAB_PACKAGES]))


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (platform.processor() as a fallback)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def gpu_model() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()
        return out.splitlines()[0] if out else None
    except (OSError, subprocess.SubprocessError):
        return None


def git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=PROJECT_ROOT, capture_output=True,
            text=True, timeout=5,
        ).stdout.strip()
        return out + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def model_identity(model: str) -> dict[str, Any]:
    """Path and a hash of config.json for a local model folder (the id for a Hub model)."""
    path = Path(model)
    config = path / "config.json"
    if config.is_file():
        return {"model": str(path.resolve()), "config_sha256": hashlib.sha256(config.read_bytes()).hexdigest()}
    return {"model": model, "config_sha256": None}


@lru_cache(maxsize=1)
def _static_environment() -> dict[str, Any]:
    return {
        "packages": {name: v for name in packages() if (v := _version(name))},
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "gpu_model": gpu_model(),
    }


def capture(*, model: str, k6_version: str | None = None) -> dict[str, Any]:
    """Everything needed to judge whether two runs are comparable."""
    return {**_static_environment(), **model_identity(model), "k6_version": k6_version, "lab_git_commit": git_commit()}
