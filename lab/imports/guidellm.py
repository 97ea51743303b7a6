"""GuideLLM's benchmark report (``guidellm run --output kind=json`` or ``kind=yaml``), 0.8.x.

One run per benchmark in the report (a sweep or a list of concurrencies writes several).
Each figure is a distribution per request state: ``metrics.<figure>.successful.{mean,
median, percentiles.pNN, max}``; the lab's figures are over successful requests, so the
``successful`` side is the one mapped. Definitions that differ (docs/imports.md):

- GuideLLM's ``time_per_output_token_ms`` is a request's whole latency over all its output
  tokens; its ``inter_token_latency_ms`` is (latency - TTFT) / (tokens - 1), which is the
  lab's TPOT. So ITL maps to ``tpot_*`` and GuideLLM's TPOT stays under its own name.
- Rates (``requests_per_second.successful.mean``...) are counts over the benchmark's
  measured window: with no warm-up and no cool-down that window is the whole test (the
  lab's ``req_per_s``); with either, it is the lab's steady window (``steady_*``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lab.imports import ImportedLoad, ImportedRun, PeerTool, milliseconds, moment, number, register, samples_of
from lab.measurement.results import ClientFigures, ForeignFigures, RunResults, SteadyFigures

# Lab figure <- (GuideLLM metric, statistic, scale): seconds stay seconds, *_ms are divided by 1000.
LATENCY_MAP: dict[str, tuple[str, str]] = {
    "latency_avg_s": ("request_latency", "mean"),
    "latency_p50_s": ("request_latency", "p50"),
    "latency_p90_s": ("request_latency", "p90"),
    "latency_p95_s": ("request_latency", "p95"),
    "latency_p99_s": ("request_latency", "p99"),
    "latency_max_s": ("request_latency", "max"),
    "ttft_avg_s": ("time_to_first_token_ms", "mean"),
    "ttft_p50_s": ("time_to_first_token_ms", "p50"),
    "ttft_p95_s": ("time_to_first_token_ms", "p95"),
    "ttft_p99_s": ("time_to_first_token_ms", "p99"),
    # GuideLLM's ITL is the lab's TPOT (see the module's docstring).
    "tpot_avg_s": ("inter_token_latency_ms", "mean"),
    "tpot_p95_s": ("inter_token_latency_ms", "p95"),
}
# Whole-window rates: lab figure <- GuideLLM metric (its successful mean is count over the window).
RATE_MAP: dict[str, str] = {
    "req_per_s": "requests_per_second",
    "output_tok_per_s": "output_tokens_per_second",
    "input_tok_per_s": "prompt_tokens_per_second",
}
STEADY_RATE_MAP: dict[str, str] = {
    "steady_req_per_s": "requests_per_second",
    "steady_output_tok_per_s": "output_tokens_per_second",
}
# The statistics of the other figures kept under GuideLLM's own names.
FOREIGN_STATISTICS = ("mean", "p50", "p95", "p99")


def statistic(metrics: Mapping[str, Any], metric: str, which: str) -> float | None:
    """``metrics[metric].successful`` at ``which`` (mean, max or pNN); None when not written."""
    distribution = (metrics.get(metric) or {}).get("successful") or {}
    if which.startswith("p") and which != "pdf":
        return number((distribution.get("percentiles") or {}).get(which))
    return number(distribution.get(which))


def mapped_figures(metrics: Mapping[str, Any], *, whole_window: bool) -> dict[str, float | None]:
    """The lab's figures from a benchmark's metrics (rates whole-test or steady by the window)."""
    figures: dict[str, float | None] = {}
    for name, (metric, which) in LATENCY_MAP.items():
        value = statistic(metrics, metric, which)
        figures[name] = milliseconds(value) if metric.endswith("_ms") else value
    for name, metric in (RATE_MAP if whole_window else STEADY_RATE_MAP).items():
        figures[name] = statistic(metrics, metric, "mean")
    return figures


def foreign_figures(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Every figure GuideLLM wrote that no lab figure took, under its own name (``metric.stat``)."""
    taken = {(metric, which) for metric, which in LATENCY_MAP.values()}
    taken |= {(metric, "mean") for metric in (*RATE_MAP.values(), *STEADY_RATE_MAP.values())}
    found: dict[str, float] = {}
    for metric, value in metrics.items():
        if not isinstance(value, Mapping) or not isinstance(value.get("successful"), Mapping):
            continue
        for which in FOREIGN_STATISTICS:
            figure = statistic(metrics, metric, which)
            if figure is not None and (metric, which) not in taken:
                found[f"{metric}.{which}"] = figure
    totals = metrics.get("request_totals") or {}
    if number(totals.get("incomplete")) is not None:
        found["request_totals.incomplete"] = float(totals["incomplete"])
    return found


def load_of(benchmark: Mapping[str, Any]) -> ImportedLoad:
    """The benchmark's strategy as a load: concurrent and synchronous are fixed concurrencies;
    constant is evenly spaced arrivals; poisson and throughput keep their own names."""
    strategy = benchmark["config"]["strategy"]
    kind, duration_s = str(strategy["type_"]), float(benchmark["duration"])
    if kind == "synchronous":
        return ImportedLoad("constant-vus", vus=1, duration_s=duration_s)
    if kind == "concurrent":
        return ImportedLoad("constant-vus", vus=int(strategy["streams"]), duration_s=duration_s)
    rate = number(strategy.get("rate"))
    if kind == "constant":
        return ImportedLoad("constant-arrival-rate", rate_per_s=rate, duration_s=duration_s)
    return ImportedLoad(kind, rate_per_s=rate, duration_s=duration_s)


def load_label(load: ImportedLoad) -> str:
    if load.vus is not None:
        return f"{load.vus} concurrent"
    if load.rate_per_s is not None:
        return f"{load.kind} {load.rate_per_s:g} req/s"
    return load.kind


def request_samples(benchmark: Mapping[str, Any]) -> tuple[Any, str | None]:
    """The per-request samples the report keeps (successful and errored; incomplete ones are
    cut at the end, as the lab's interrupted iterations are), and a note when there are none."""
    requests = benchmark.get("requests") or {}
    latency: list[float] = []
    ok: list[bool] = []
    ttft: list[float] = []
    tpot: list[float] = []
    for state, success in (("successful", True), ("errored", False)):
        for request in requests.get(state) or []:
            value = number(request.get("request_latency"))
            if value is None:
                continue
            latency.append(value)
            ok.append(success)
            first = milliseconds(request.get("time_to_first_token_ms"))
            gap = milliseconds(request.get("inter_token_latency_ms"))
            if success and first is not None:
                ttft.append(first)
                tpot.append(gap if gap is not None else float("nan"))
    if not latency:
        return None, "the report keeps no per-request records"
    streamed = len(ttft) == sum(ok)
    note = None
    sample_size = benchmark["config"].get("sample_size")
    if sample_size is not None:
        note = f"the report keeps a sample of {sample_size} requests per state, not every request"
    return samples_of(latency, ok, ttft if streamed else [], tpot if streamed else []), note


@register
class GuideLLM(PeerTool):
    name = "guidellm"
    label = "GuideLLM"
    expected = "a GuideLLM benchmark report (JSON or YAML)"
    supported = "0.8.x"

    def claims(self, document: Mapping[str, Any]) -> bool:
        metadata = document.get("metadata")
        return (isinstance(metadata, Mapping) and "guidellm_version" in metadata) or (
            "benchmarks" in document and isinstance(document.get("config"), Mapping) and "metadata" in document
        )

    def version(self, document: Mapping[str, Any]) -> str:
        metadata = document.get("metadata") or {}
        return str(metadata.get("guidellm_version") or "unknown")

    def is_supported(self, version: str) -> bool:
        return version.startswith("0.8.")

    def runs(self, document: Mapping[str, Any], *, version: str) -> list[ImportedRun]:
        benchmarks = document["benchmarks"]
        if not isinstance(benchmarks, list):
            raise TypeError("benchmarks is not a list")
        return [self._run(benchmark, index, version, len(benchmarks)) for index, benchmark in enumerate(benchmarks)]

    def _run(self, benchmark: Mapping[str, Any], index: int, version: str, count: int) -> ImportedRun:
        metrics, config = benchmark["metrics"], benchmark["config"]
        backend = config.get("backend") or {}
        load = load_of(benchmark)
        whole_window = not (number(benchmark.get("warmup_duration")) or number(benchmark.get("cooldown_duration")))
        figures = mapped_figures(metrics, whole_window=whole_window)
        totals = metrics["request_totals"]
        client = ClientFigures.from_figures(
            {name: value for name, value in figures.items() if name in ClientFigures.names()}
            | {
                "requests_ok": int(totals["successful"]),
                "requests_failed": int(totals.get("errored") or 0),
                "measured_duration_s": float(benchmark["duration"]),
            }
        )
        parts: list[Any] = [client]
        if not whole_window:
            parts.append(
                SteadyFigures(
                    steady_req_per_s=RunResults.of_record(figures).steady_req_per_s,
                    steady_output_tok_per_s=RunResults.of_record(figures).steady_output_tok_per_s,
                    steady_source="guidellm measured window",
                )
            )
        samples, note = request_samples(benchmark)
        return ImportedRun(
            tool=self.name,
            version=version,
            index=index,
            label=f"{load_label(load)} (benchmark {index + 1} of {count})",
            target=backend.get("target"),
            model=str(backend.get("model") or "unknown"),
            load=load,
            results=RunResults.from_parts(*parts, foreign=(ForeignFigures(self.name, foreign_figures(metrics)),)),
            stream=backend.get("stream"),
            max_tokens=_output_tokens(benchmark),
            samples=samples,
            samples_note=note,
            started_at=moment(benchmark.get("start_time")),
            finished_at=moment(benchmark.get("end_time")),
        )


def _output_tokens(benchmark: Mapping[str, Any]) -> int | None:
    """The output tokens each request asked for, when every request asked the same."""
    median = statistic(benchmark["metrics"], "output_token_count", "p50")
    return int(median) if median else None
