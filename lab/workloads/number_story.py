"""The seed's workload: "Write a short story about the number n." with n drawn per request."""

from __future__ import annotations

from pathlib import Path

from lab.user_input.fields import OptionField
from lab.workloads import Messages, RunSettings, Workload, register

NUMBER_STORY_PROMPT = "Write a short story about the number {n}."


@register
class NumberStory(Workload):
    name = "number-story"
    label = "number story (the seed's prompt)"
    script = "number_story.js"  # draws n itself; no request file
    option_fields = (OptionField("prompts", "PROMPTS (distinct numbers)", step=1),)

    def warmup_messages(self, spec: RunSettings, requests_file: Path | None) -> list[Messages]:
        turns = [[{"role": "user", "content": NUMBER_STORY_PROMPT.format(n=n)}] for n in range(spec.workload.prompts)]
        return [turns[i % len(turns)] for i in range(spec.warmup_requests)]

    def k6_env(self, spec: RunSettings) -> dict[str, str]:
        return {"PROMPTS": str(spec.workload.prompts)}

    def distinct_requests(self, spec: RunSettings) -> int | None:
        return spec.workload.prompts

    def prompts_column(self, spec: RunSettings) -> int | None:
        return spec.workload.prompts
