"""A custom workload: the user's JSONL of chat requests, one request a session."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lab.workloads import datasets
from lab.workloads import Workload, register, write_sessions

if TYPE_CHECKING:
    from lab.backends import Backend
    from lab.specs.schema import RunSpec, WorkloadSpec


@register
class Custom(Workload):
    name = "custom"
    label = "custom requests (JSONL)"
    script = "chat_replay.js"

    def check(self, workload: "WorkloadSpec") -> None:
        if not workload.requests_path:
            raise ValueError("the custom workload needs a JSONL file of requests (requests_path)")

    def prepare(self, spec: "RunSpec", run_dir: Path, backend: "Backend") -> Path:
        requests = datasets.load_custom_requests(str(spec.workload.requests_path))
        return write_sessions(datasets.custom_requests_as_sessions(requests), run_dir / "requests.json")
