"""The workload registry: one module per workload, looked up by name.

A workload declares (see :class:`Workload`): its option section in the spec (if any), a
check of the spec's workload fields, the request file it prepares for k6 (if any), its
warm-up messages, the ``-e`` settings and the k6 script it runs. The runner and the k6
driver look workloads up here; nothing else names one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

if TYPE_CHECKING:
    from lab.backends import Backend
    from lab.specs.schema import RunSpec, WorkloadSpec

K6_DIR = Path(__file__).resolve().parent.parent.parent / "k6"

Messages = list[dict[str, str]]


class UnknownWorkloadError(ValueError):
    """A workload name no module registered."""


class WorkloadError(RuntimeError):
    """The workload cannot be prepared (the message says why, for the user)."""


class Workload:
    """One workload. Subclass, set the class attributes, register."""

    name: ClassVar[str]
    label: ClassVar[str] = ""
    script: ClassVar[str]  # file name under k6/
    # The spec's ``workload.<section>`` and its model; None: the workload uses the flat fields.
    section: ClassVar[str | None] = None
    options_model: ClassVar[type[BaseModel] | None] = None

    def check(self, workload: "WorkloadSpec") -> None:
        """Raise ValueError when the spec's workload fields cannot work (a missing file...)."""

    def prepare(self, spec: "RunSpec", run_dir: Path, backend: "Backend") -> Path | None:
        """Write the request file k6 replays into ``run_dir``; None when the script needs none."""
        return None

    def warmup_messages(self, spec: "RunSpec", requests_file: Path | None) -> list[Messages]:
        """The messages of the warm-up requests: by default the request file's first turns."""
        if requests_file is None:
            return []
        sessions = json.loads(requests_file.read_text())
        turns = [turn if isinstance(turn, list) else turn["messages"] for session in sessions for turn in session]
        return [turns[i % len(turns)] for i in range(spec.warmup_requests)] if turns else []

    def k6_env(self, spec: "RunSpec") -> dict[str, str]:
        """Settings of this workload's k6 script beyond the common ones (see k6/lib.js)."""
        return {}

    def distinct_requests(self, spec: "RunSpec") -> int | None:
        """How many different requests the script can send (None: not a fixed, known set)."""
        return None

    @property
    def script_path(self) -> Path:
        return K6_DIR / self.script


WORKLOADS: dict[str, Workload] = {}


def register(cls: type[Workload]) -> type[Workload]:
    """Class decorator: add a workload to the registry (its name must be new)."""
    if not cls.name or cls.name in WORKLOADS:
        raise ValueError(f"cannot register workload {cls.name!r}: empty or taken")
    WORKLOADS[cls.name] = cls()
    return cls


def get_workload(name: str) -> Workload:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise UnknownWorkloadError(f"unknown workload {name!r}; workloads: {', '.join(WORKLOADS)}") from None


def workload_names() -> list[str]:
    return list(WORKLOADS)


def options_sections() -> dict[str, type[BaseModel]]:
    """``{section: options model}`` of the workloads that have one."""
    return {w.section: w.options_model for w in WORKLOADS.values() if w.section and w.options_model is not None}


def write_sessions(sessions: list[Any], path: Path) -> Path:
    if not sessions:
        raise WorkloadError("the workload has no usable sessions: check the dataset and the turn/size limits")
    from lab.workloads import datasets

    return datasets.write_requests_file(sessions, path)


from lab.workloads import number_story, sharegpt_chat, custom, synthetic  # noqa: E402,F401
