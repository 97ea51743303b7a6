"""A throwaway backend kind for the plugin tests: the OpenAI stub (tests/stub_openai.py) as
``stubengine``, registered by a test and unregistered after it."""

from __future__ import annotations

import sys
from typing import Any

from lab.backends import Backend, Launch, MetricNames

KIND = "stubengine"


class StubEngine(Backend):
    name = KIND
    label = "stub engine"
    metrics = MetricNames()  # the stub exports no /metrics: its server figures stay unknown
    start_hint = "instant"
    packages = ("uvicorn",)

    def launch(self, *, model: str, options: Any, settings: Any) -> Launch:
        argv = [sys.executable, "-m", "tests.stub_openai", "--host", "{host}", "--port", "{port}", "--delay-s", "0.02"]
        return Launch(argv=argv, readiness_timeout_s=30)
