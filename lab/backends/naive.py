"""The naive backend: the lab's own Transformers + FastAPI server, one request at a time."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Literal

from pydantic import Field, PositiveInt

from lab.backends import VLLM_METRICS, Backend, Launch, MetricNames, SeedSetup, register
from lab.user_input.base import StrictModel
from lab.user_input.fields import OptionField

if TYPE_CHECKING:
    from lab.settings import Settings


def usable_cores() -> int:
    """The cores this process may run on (its affinity), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def best_torch_threads(cores: int) -> int:
    """torch intra-op threads that leave one core to k6, the proxy and the lab (see
    docs/records/2026-12-01-naive-server-threads.md): one fewer than the cores, at least one."""
    return max(1, cores - 1)


class NaiveOptions(StrictModel):
    dtype: Literal["bfloat16", "float32", "float16"] = "bfloat16"
    # "best": derived from the cores (best_torch_threads); "torch": torch's own choice; or a count.
    torch_threads: Literal["best", "torch"] | PositiveInt = Field(default="best")

    def resolved_torch_threads(self, cores: int) -> int | None:
        """The thread count passed to the server; None leaves it to torch."""
        if self.torch_threads == "torch":
            return None
        if self.torch_threads == "best":
            return best_torch_threads(cores)
        return self.torch_threads


@register
class NaiveBackend(Backend):
    name = "naive"
    label = "Transformers (naive)"
    seed_setup = SeedSetup.NAIVE
    options_model = NaiveOptions
    option_fields = (
        OptionField("naive.dtype", "Weights dtype"),
        OptionField(
            "naive.torch_threads",
            "Torch threads",
            help="best: one fewer than the cores; torch: torch's own choice; or a count",
        ),
    )
    # The naive server exports vLLM's names where the meaning is the same (no prefix cache).
    metrics = MetricNames(**{**VLLM_METRICS.__dict__, "prefix_cache_hits": None, "prefix_cache_queries": None})
    start_hint = "about 10 s"
    packages = ("torch", "transformers", "fastapi", "uvicorn")
    readiness_timeout_s = 180.0
    settings_from_launch = (("dtype", "--dtype"), ("threads", "--torch-threads"))

    def launch(self, *, model: str, options: NaiveOptions, settings: Settings) -> Launch:
        argv = [
            sys.executable,
            "-m",
            "services.naive_server",
            "--model",
            model,
            "--dtype",
            options.dtype,
            "--host",
            "{host}",
            "--port",
            "{port}",
        ]
        # The resolved count lands in the argv, which the run's environment records.
        if (threads := options.resolved_torch_threads(usable_cores())) is not None:
            argv += ["--torch-threads", str(threads)]
        return Launch(argv=argv, readiness_timeout_s=self.readiness_timeout_s)

    def fixed_output_fields(self, max_tokens: int) -> dict[str, object]:
        # The naive server honours max_tokens only; it may stop earlier at end of sequence.
        return {"max_tokens": max_tokens}
