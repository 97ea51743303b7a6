"""The machine a worker offers runs: its GPUs, CPU, memory and the lab's version, and a
one-line summary of them.

Stored on the worker's row and copied onto every run it claims, so a comparison can say which
machine each figure came from. Here in measurement (with the other facts a run measured on),
so that the analysis that names the machine does not import the queue.
"""

from __future__ import annotations

import os
import subprocess
from functools import lru_cache
from typing import Any

import psutil

from lab.measurement.environment import cpu_model, git_commit


def _gpus_by_nvml() -> list[dict[str, Any]] | None:
    try:
        # Optional (nvidia-ml-py, only where an NVIDIA GPU is): nvidia-smi below otherwise.
        import pynvml  # type: ignore[import-not-found]  # optional: not installed without a GPU
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total
            gpus.append(
                {"name": name.decode() if isinstance(name, bytes) else name, "memory_gib": round(memory / 2**30, 1)}
            )
        return gpus
    finally:
        pynvml.nvmlShutdown()


def _gpus_by_nvidia_smi() -> list[dict[str, Any]]:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        name, _, memory_mib = line.rpartition(",")
        try:
            gpus.append({"name": name.strip(), "memory_gib": round(float(memory_mib) / 1024, 1)})
        except ValueError:
            continue
    return gpus


def gpus() -> list[dict[str, Any]]:
    """The machine's NVIDIA GPUs (name, memory in GiB) by NVML or nvidia-smi; [] without one."""
    found = _gpus_by_nvml()
    return found if found is not None else _gpus_by_nvidia_smi()


@lru_cache(maxsize=1)
def worker_hardware() -> dict[str, Any]:
    """What this machine offers a run: CPU model, cores, memory, GPUs, the lab's version."""
    return {
        "cpu_model": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "gpus": gpus(),
        "lab_version": git_commit() or "unknown",  # the lab is a checkout, not a package
    }


def hardware_summary(hardware: dict[str, Any] | None) -> str:
    """One line: ``2x NVIDIA H200 (139.8 GiB), Intel Xeon (16 cores, 128 GiB)``; '' if unknown."""
    if not hardware:
        return ""
    cpu = f"{hardware.get('cpu_model') or 'CPU'} ({hardware.get('cpu_cores')} cores, {hardware.get('memory_gib')} GiB)"
    names: dict[str, int] = {}
    for gpu in hardware.get("gpus") or []:
        key = f"{gpu.get('name')} ({gpu.get('memory_gib')} GiB)"
        names[key] = names.get(key, 0) + 1
    gpu_part = ", ".join(f"{count}x {key}" if count > 1 else key for key, count in names.items())
    return f"{gpu_part}, {cpu}" if gpu_part else cpu
