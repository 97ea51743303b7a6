"""Sample CPU and memory of processes (and the GPU, where present) while a run's load runs."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import psutil


def _process_tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def read_gpu() -> dict[str, float] | None:
    """GPU utilisation (%) and memory used (MiB) of GPU 0 via NVML, else nvidia-smi; None without a GPU."""
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        utilization = pynvml.nvmlDeviceGetUtilizationRates(handle)
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        return {"gpu_utilization_percent": float(utilization.gpu), "gpu_memory_used_mb": memory.used / 2**20}
    except Exception:  # noqa: BLE001 (no NVML: fall back to nvidia-smi, then to nothing)
        pass
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits", "-i", "0"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()
        utilization_text, memory_text = (part.strip() for part in out.split(",")[:2])
        return {"gpu_utilization_percent": float(utilization_text), "gpu_memory_used_mb": float(memory_text)}
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


class ResourceSampler:
    """A background thread sampling, once per ``interval_s``, each named process tree's
    CPU (% of one core, summed over the tree) and RSS (MiB), and the GPU.

    ``pids`` maps a label (``vllm``, ``k6``...) to a root pid; it may be a callable so a
    pid known only later (k6's) can be added.
    """

    def __init__(self, pids: Mapping[str, int] | Callable[[], Mapping[str, int]], *, interval_s: float = 1.0) -> None:
        self._pids = pids
        self.interval_s = interval_s
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="resource-sampler", daemon=True)
        self._known: dict[int, psutil.Process] = {}
        self.has_gpu = read_gpu() is not None

    def start(self) -> "ResourceSampler":
        self._thread.start()
        return self

    def stop(self) -> list[dict[str, Any]]:
        self._stop.set()
        self._thread.join(timeout=5)
        return self.samples

    def _cpu_percent(self, process: psutil.Process) -> float:
        # cpu_percent(None) compares with the previous call on the same object, so keep them.
        known = self._known.setdefault(process.pid, process)
        return known.cpu_percent(None)

    def _loop(self) -> None:
        while not self._stop.is_set():
            pids = self._pids() if callable(self._pids) else self._pids
            sample: dict[str, Any] = {"t": time.time()}
            for label, pid in pids.items():
                cpu_percent, rss_bytes = 0.0, 0
                for process in _process_tree(pid):
                    try:
                        cpu_percent += self._cpu_percent(process)
                        rss_bytes += process.memory_info().rss
                    except psutil.NoSuchProcess:
                        continue
                sample[f"{label}_cpu_percent"] = cpu_percent
                sample[f"{label}_rss_mb"] = rss_bytes / 2**20
            if self.has_gpu:
                sample.update(read_gpu() or {})
            self.samples.append(sample)
            self._stop.wait(self.interval_s)


def summarise(samples: list[dict[str, Any]], label: str) -> dict[str, float | None]:
    """Average CPU % and peak RSS MiB of one label over the samples (first sample skipped:
    psutil's first cpu_percent reading is always 0)."""
    cpu = [s[f"{label}_cpu_percent"] for s in samples[1:] if f"{label}_cpu_percent" in s]
    rss = [s[f"{label}_rss_mb"] for s in samples if f"{label}_rss_mb" in s]
    return {
        "cpu_percent_avg": sum(cpu) / len(cpu) if cpu else None,
        "rss_max_mb": max(rss) if rss else None,
    }
