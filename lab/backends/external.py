"""An external backend: any OpenAI-compatible server the run names by URL (``target_url``).

The lab neither starts nor resets it; its figures are read with vLLM's metric names,
which most servers of that family export (missing ones stay unknown)."""

from __future__ import annotations

from lab.backends import VLLM_METRICS, Backend, register


@register
class ExternalBackend(Backend):
    name = "external"
    label = "external server"
    metrics = VLLM_METRICS
    managed = False
    start_hint = "not started by the lab: runs give its URL"
