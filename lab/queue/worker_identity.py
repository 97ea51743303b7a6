"""A worker's identity on a shared queue: its hardware, a one-line summary of it, and the
overview of every worker the Workers page shows.

The hardware is stored on the worker's row and copied onto every run it claims, so a
comparison can say which machine each figure came from.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import psutil
from sqlalchemy.orm import Session

from db import store
from lab.measurement.environment import cpu_model, git_commit


def _gpus_by_nvml() -> list[dict[str, Any]] | None:
    try:
        import pynvml  # optional (nvidia-ml-py); nvidia-smi below otherwise
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


@dataclass
class WorkerOverview:
    """One worker as the Workers page shows it."""

    name: str
    host: str
    labels: str
    hardware: str
    state: str  # alive | lost (heartbeat older than the lease) | stopped
    heartbeat_age_s: float | None
    current_run: str
    services: str  # the managed services recorded on its machine


def worker_overview(*, session: Session, lease_s: float) -> list[WorkerOverview]:
    """Every registered worker with its heartbeat age, current run and recorded services."""
    services_by_worker: dict[str, list[str]] = {}
    for record in store.list_service_records(session=session):
        services_by_worker.setdefault(record.worker, []).append(f"{record.name}: {record.state}")
    rows = []
    for record in store.list_workers(session=session):
        age_s = store.heartbeat_age_s(session=session, record=record)
        if record.state == "stopped":
            state = "stopped"
        else:
            state = "alive" if age_s is not None and age_s <= lease_s else "lost"
        current = ""
        if record.current_run_id and state == "alive":
            run = store.get_run(session=session, run_id=record.current_run_id)
            current = f"#{run.id} {run.backend} {run.cell_label}: {run.status}" if run else ""
        rows.append(
            WorkerOverview(
                name=record.name,
                host=record.host,
                labels=", ".join(record.labels or []),
                hardware=hardware_summary(record.hardware),
                state=state,
                heartbeat_age_s=round(age_s, 1) if age_s is not None else None,
                current_run=current,
                services=", ".join(services_by_worker.get(record.name, [])),
            )
        )
    return rows
