"""A workload defined by the tests alone ("count up from n"), registered by a fixture, to show
that a workload plugin needs no edit elsewhere (tests/ui/test_workload_plugin.py and
tests/integration/test_workload_plugin.py)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from lab.user_input.base import StrictModel
from lab.workloads import RunSettings, Workload, write_sessions

KIND = "count-up"


SECTION = "count_up"


class CountUpOptions(StrictModel):
    """The ``workload.count_up`` section."""

    prompts: int = Field(default=3, ge=1, le=100, title="Counting prompts", description="distinct prompts sent")
    start: int = Field(default=1, ge=0, le=1000, title="First number", description="where the counting starts")


class CountUp(Workload):
    """One-turn prompts "Count up from n.": the smallest workload with options of its own."""

    name = KIND
    label = "count up (a test's workload)"
    script = "chat_replay.js"
    section = SECTION
    options_model = CountUpOptions

    def prepare(self, spec: RunSettings, run_dir: Path, backend: object) -> Path:
        options = spec.workload.options()
        sessions = [
            [
                {
                    "messages": [{"role": "user", "content": f"Count up from {options.start + index}."}],
                    "max_tokens": spec.max_tokens,
                }
            ]
            for index in range(options.prompts)
        ]
        run_dir.mkdir(parents=True, exist_ok=True)
        return write_sessions(sessions, run_dir / "requests.json")

    def distinct_requests(self, spec: RunSettings) -> int | None:
        return spec.workload.options().prompts
