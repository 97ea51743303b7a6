"""The naive server's Prometheus metrics, named, labelled and bucketed like vLLM's, so
one scraper reads both servers."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# vLLM's own bucket boundaries, so histograms from both servers line up.
TIME_TO_FIRST_TOKEN_BUCKETS_S = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
TIME_PER_OUTPUT_TOKEN_BUCKETS_S = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
REQUEST_LATENCY_BUCKETS_S = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)


class NaiveServerMetrics:
    """Prometheus metrics in a registry of their own, named and labelled like vLLM's."""

    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry()
        self.model_name = model_name
        labels = ["model_name"]

        def counter(name: str, doc: str) -> Any:
            # prometheus_client appends "_total" to counter names on exposition.
            return Counter(name, doc, labels, registry=self.registry).labels(model_name=model_name)

        def gauge(name: str, doc: str) -> Any:
            return Gauge(name, doc, labels, registry=self.registry).labels(model_name=model_name)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Any:
            return Histogram(name, doc, labels, registry=self.registry, buckets=buckets).labels(model_name=model_name)

        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        self._request_success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            ["model_name", "finished_reason"],
            registry=self.registry,
        )
        self.num_requests_running = gauge("vllm:num_requests_running", "Number of requests generating now.")
        self.num_requests_waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to generate.")
        self.time_to_first_token_s = histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds (from arrival, queueing included).",
            TIME_TO_FIRST_TOKEN_BUCKETS_S,
        )
        self.time_per_output_token_s = histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of a request's mean time per output token after the first, in seconds.",
            TIME_PER_OUTPUT_TOKEN_BUCKETS_S,
        )
        self.inter_token_latency_s = histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of the time between consecutive output tokens in seconds.",
            TIME_PER_OUTPUT_TOKEN_BUCKETS_S,
        )
        self.e2e_request_latency_s = histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of end-to-end request latency in seconds.",
            REQUEST_LATENCY_BUCKETS_S,
        )
        self.request_queue_time_s = histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent waiting for the generation lock in seconds.",
            REQUEST_LATENCY_BUCKETS_S,
        )

    def record_success(self, finished_reason: str) -> None:
        """Count one request that finished with ``finished_reason``."""
        self._request_success.labels(model_name=self.model_name, finished_reason=finished_reason).inc()

    def render(self) -> bytes:
        """The registry in Prometheus text format."""
        return generate_latest(self.registry)
