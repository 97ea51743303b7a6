"""Capture the environment a run measured: versions, hardware, model identity, git commit."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import os
import platform
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import psutil

from db.documents import JsonObject

# The lab's own packages; each backend adds its own (lab/backends).
LAB_PACKAGES = ("redis", "httpx", "streamlit", "k6")
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def packages() -> tuple[str, ...]:
    """Every package a run records: the lab's and each registered backend's, once each."""
    from lab.backends import BACKENDS

    names = [name for backend in BACKENDS.values() for name in backend.packages]
    return tuple(dict.fromkeys([*names, *LAB_PACKAGES]))


def package_version(package: str) -> str | None:
    """The installed version of ``package``, or None when it is not installed."""
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
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        return out.splitlines()[0] if out else None
    except (OSError, subprocess.SubprocessError):
        return None


@dataclass(frozen=True)
class Provenance:
    """Which code measured: the lab's commit, whether tracked files differed from it, and a
    hash of that difference (two dirty runs with the same hash ran the same code)."""

    commit: str | None
    dirty: bool
    diff_sha256: str | None

    @property
    def label(self) -> str | None:
        """The commit, with ``-dirty`` when the tree differed (the form stored before provenance)."""
        return None if self.commit is None else self.commit + ("-dirty" if self.dirty else "")


def _git(*argv: str) -> str:
    return subprocess.run(
        ["git", *argv], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=10, check=True
    ).stdout


def provenance() -> Provenance:
    """The checkout's commit and whether its files differ from it: changed tracked files, and
    new files git does not ignore (ignored ones, such as run data, models and virtual
    environments, are not code)."""
    try:
        commit = _git("rev-parse", "HEAD").strip()
        diff = _git("diff", "HEAD", "--binary")
        new_files = _git("ls-files", "--others", "--exclude-standard", "-z").split("\0")
    except (OSError, subprocess.SubprocessError):
        return Provenance(None, False, None)
    digest = hashlib.sha256(diff.encode())
    for name in sorted(filter(None, new_files)):
        digest.update(name.encode() + b"\0")
        with contextlib.suppress(OSError):
            digest.update((PROJECT_ROOT / name).read_bytes())
    if not diff and not any(new_files):
        return Provenance(commit, False, None)
    return Provenance(commit, True, digest.hexdigest())


def git_commit() -> str | None:
    """The commit, with ``-dirty`` when tracked files differ from it."""
    return provenance().label


def model_identity(model: str) -> JsonObject:
    """Path and a hash of config.json for a local model folder (the id for a Hub model)."""
    path = Path(model)
    config = path / "config.json"
    if config.is_file():
        return {"model": str(path.resolve()), "config_sha256": hashlib.sha256(config.read_bytes()).hexdigest()}
    return {"model": model, "config_sha256": None}


@lru_cache(maxsize=1)
def _static_environment() -> JsonObject:
    return {
        "packages": {name: v for name in packages() if (v := package_version(name))},
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "gpu_model": gpu_model(),
    }


def capture(*, model: str, k6_version: str | None = None) -> JsonObject:
    """Everything needed to judge whether two runs are comparable."""
    code = provenance()
    return {
        **_static_environment(),
        **model_identity(model),
        "k6_version": k6_version,
        "lab_git_commit": code.label,
        "lab_git_dirty": code.dirty,
        "lab_git_diff_sha256": code.diff_sha256,
    }
