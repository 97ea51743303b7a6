"""The naive backend: the lab's own Transformers + FastAPI server, one request at a time."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Literal

from lab.backends import VLLM_METRICS, Backend, Launch, MetricNames, register
from lab.specs_base import StrictModel

if TYPE_CHECKING:
    from lab.settings import Settings


class NaiveOptions(StrictModel):
    dtype: Literal["bfloat16", "float32", "float16"] = "bfloat16"


@register
class NaiveBackend(Backend):
    name = "naive"
    label = "Transformers (naive)"
    options_model = NaiveOptions
    # The naive server exports vLLM's names where the meaning is the same (no prefix cache).
    metrics = MetricNames(**{**VLLM_METRICS.__dict__, "prefix_cache_hits": None, "prefix_cache_queries": None})
    start_hint = "about 10 s"
    packages = ("torch", "transformers", "fastapi", "uvicorn")
    readiness_timeout_s = 180.0

    def launch(self, *, model: str, options: NaiveOptions, settings: "Settings") -> Launch:
        argv = [
            sys.executable, "-m", "services.naive_server",
            "--model", model, "--dtype", options.dtype,
            "--host", "{host}", "--port", "{port}",
        ]
        return Launch(argv=argv, readiness_timeout_s=self.readiness_timeout_s)

    def fixed_output_fields(self, max_tokens: int) -> dict[str, object]:
        # The naive server honours max_tokens only; it may stop earlier at end of sequence.
        return {"max_tokens": max_tokens}
