"""A custom workload: the user's JSONL of chat requests, one request a session."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lab.user_input.fields import OptionField
from lab.workloads import RunSettings, Workload, WorkloadSettings, check_named_files, datasets, register, write_sessions

if TYPE_CHECKING:
    from lab.backends import Backend


@register
class Custom(Workload):
    name = "custom"
    label = "custom requests (JSONL)"
    script = "chat_replay.js"
    option_fields = (OptionField("requests_path", "Requests file (JSONL)", upload="jsonl", required=True),)

    def check(self, workload: WorkloadSettings) -> None:
        if not workload.requests_path:
            raise ValueError("the custom workload needs a JSONL file of requests (requests_path)")
        check_named_files(self, workload)

    def prepare(self, spec: RunSettings, run_dir: Path, backend: Backend) -> Path:
        requests = datasets.load_custom_requests(str(spec.workload.requests_path))
        return write_sessions(datasets.custom_requests_as_sessions(requests), run_dir / "requests.json")
