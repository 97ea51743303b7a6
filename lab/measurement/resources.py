"""Sample CPU and memory of processes (and the GPU, where present) while a run's load runs.

Beside the run's own processes, each sample holds the whole machine's CPU so a busy
machine is noticed: ``host_cpu_percent`` (all cores, in % of one core, like the process
figures), ``other_cpu_percent`` (the part not used by the run's processes nor the lab
itself) and ``steal_cpu_percent`` (time the hypervisor gave to other guests, where the
kernel reports it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
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
        import pynvml  # type: ignore[import-not-found]  # NVML's bindings: installed on GPU machines only

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        utilization = pynvml.nvmlDeviceGetUtilizationRates(handle)
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        return {"gpu_utilization_percent": float(utilization.gpu), "gpu_memory_used_mb": memory.used / 2**20}
    except Exception:
        pass
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits", "-i", "0"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
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
        self._host = HostCpu()

    def start(self) -> ResourceSampler:
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
            counted: set[int] = set()
            own_cpu_percent = 0.0
            for label, pid in pids.items():
                cpu_percent, rss_bytes = 0.0, 0
                for process in _process_tree(pid):
                    try:
                        process_cpu = self._cpu_percent(process)
                        cpu_percent += process_cpu
                        rss_bytes += process.memory_info().rss
                    except psutil.NoSuchProcess:
                        continue
                    if process.pid not in counted:  # a tree may hold another label's process
                        counted.add(process.pid)
                        own_cpu_percent += process_cpu
                sample[f"{label}_cpu_percent"] = cpu_percent
                sample[f"{label}_rss_mb"] = rss_bytes / 2**20
            if os.getpid() not in counted:  # the lab itself (this worker: sampler, progress, parsing)
                with contextlib.suppress(psutil.NoSuchProcess):
                    own_cpu_percent += self._cpu_percent(psutil.Process(os.getpid()))
            sample.update(self._host.sample(own_cpu_percent=own_cpu_percent))
            if self.has_gpu:
                sample.update(read_gpu() or {})
            self.samples.append(sample)
            self._stop.wait(self.interval_s)


class HostCpu:
    """The machine's CPU use between two calls, in % of one core (100 = one core busy)."""

    def __init__(self) -> None:
        self._previous = psutil.cpu_times()

    def sample(self, *, own_cpu_percent: float) -> dict[str, float | None]:
        """Host busy, steal and "other" (busy minus ``own_cpu_percent``) since the last call."""
        current = psutil.cpu_times()
        previous, self._previous = self._previous, current
        return host_cpu_shares(previous, current, cores=psutil.cpu_count() or 1, own_cpu_percent=own_cpu_percent)


def host_cpu_shares(previous: Any, current: Any, *, cores: int, own_cpu_percent: float) -> dict[str, float | None]:
    """Busy, steal and other processes' CPU between two ``psutil.cpu_times()`` readings.

    Busy excludes idle, iowait and steal; guest time is already inside user time on Linux.
    Shares are in % of one core, so 2 busy cores read 200.
    """

    def field(times: Any, name: str) -> float:
        return float(getattr(times, name, 0.0) or 0.0)

    names = [name for name in current._fields if name not in ("guest", "guest_nice")]
    total_s = sum(field(current, n) - field(previous, n) for n in names)
    if total_s <= 0:
        return {"host_cpu_percent": None, "other_cpu_percent": None, "steal_cpu_percent": None}
    idle_s = sum(field(current, n) - field(previous, n) for n in ("idle", "iowait"))
    steal_s = field(current, "steal") - field(previous, "steal")
    scale = cores * 100.0 / total_s
    busy_percent = max(0.0, (total_s - idle_s - steal_s) * scale)
    return {
        "host_cpu_percent": busy_percent,
        "other_cpu_percent": max(0.0, busy_percent - own_cpu_percent),
        "steal_cpu_percent": max(0.0, steal_s * scale) if hasattr(current, "steal") else None,
    }


def summarise(samples: Sequence[Mapping[str, Any]], label: str) -> dict[str, float | None]:
    """Average CPU % and peak RSS MiB of one label over the samples (first sample skipped:
    psutil's first cpu_percent reading is always 0)."""
    cpu = [s[f"{label}_cpu_percent"] for s in samples[1:] if f"{label}_cpu_percent" in s]
    rss = [s[f"{label}_rss_mb"] for s in samples if f"{label}_rss_mb" in s]
    return {"cpu_percent_avg": sum(cpu) / len(cpu) if cpu else None, "rss_max_mb": max(rss) if rss else None}


def summarise_host(samples: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """Average host, other-process and steal CPU (% of one core); first sample skipped."""
    figures: dict[str, float | None] = {}
    for key in ("host_cpu_percent", "other_cpu_percent", "steal_cpu_percent"):
        values = [s[key] for s in samples[1:] if s.get(key) is not None]
        figures[f"{key}_avg"] = sum(values) / len(values) if values else None
    return figures
