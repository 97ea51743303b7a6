"""The seed's workload: "Write a short story about the number n." with n drawn per request."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lab.workloads import Messages, Workload, register

if TYPE_CHECKING:
    from lab.specs.schema import RunSpec

NUMBER_STORY_PROMPT = "Write a short story about the number {n}."


@register
class NumberStory(Workload):
    name = "number-story"
    label = "number story (the seed's prompt)"
    script = "number_story.js"  # draws n itself; no request file

    def warmup_messages(self, spec: "RunSpec", requests_file: Path | None) -> list[Messages]:
        turns = [[{"role": "user", "content": NUMBER_STORY_PROMPT.format(n=n)}] for n in range(spec.workload.prompts)]
        return [turns[i % len(turns)] for i in range(spec.warmup_requests)]

    def k6_env(self, spec: "RunSpec") -> dict[str, str]:
        return {"PROMPTS": str(spec.workload.prompts)}

    def distinct_requests(self, spec: "RunSpec") -> int | None:
        return spec.workload.prompts
