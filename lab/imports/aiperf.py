"""AIPerf's profile export (``profile_export_aiperf.json``), 0.13.

Each figure is ``{"unit": ..., "avg": ..., "p50": ..., "p99": ..., "max": ...}``; units are
read from the file (``ms``, ``sec``). Definitions (docs/imports.md):

- AIPerf's ``inter_token_latency`` is (latency - TTFT) / (output tokens - 1) per request,
  the lab's TPOT, but AIPerf counts output tokens with its own tokenizer (``--tokenizer``)
  where the lab counts what the server streams: the same definition over counts that may
  differ (its ``usage_*_diff_pct`` figures say by how much).
- ``request_throughput`` and ``output_token_throughput`` are over ``benchmark_duration``
  (first request to last answer): the whole test, as the lab's rates.
- The summary keeps no per-request records (they are in ``profile_export.jsonl``, which
  the lab does not import): an imported AIPerf run has no per-request samples.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from lab.imports import ImportedLoad, ImportedRun, PeerTool, number, register
from lab.measurement.results import ClientFigures, ForeignFigures, RunResults

SECONDS_PER_UNIT = {"ms": 0.001, "sec": 1.0, "s": 1.0, "ns": 1e-9, "us": 1e-6}
# Lab figure <- (AIPerf metric, statistic).
LATENCY_MAP: dict[str, tuple[str, str]] = {
    "latency_avg_s": ("request_latency", "avg"),
    "latency_p50_s": ("request_latency", "p50"),
    "latency_p90_s": ("request_latency", "p90"),
    "latency_p95_s": ("request_latency", "p95"),
    "latency_p99_s": ("request_latency", "p99"),
    "latency_max_s": ("request_latency", "max"),
    "ttft_avg_s": ("time_to_first_token", "avg"),
    "ttft_p50_s": ("time_to_first_token", "p50"),
    "ttft_p95_s": ("time_to_first_token", "p95"),
    "ttft_p99_s": ("time_to_first_token", "p99"),
    "tpot_avg_s": ("inter_token_latency", "avg"),
    "tpot_p95_s": ("inter_token_latency", "p95"),
}
RATE_MAP = {
    "req_per_s": "request_throughput",
    "output_tok_per_s": "output_token_throughput",
    "input_tok_per_s": "input_token_throughput",
}
FOREIGN_STATISTICS = ("avg", "p50", "p95", "p99")


def seconds(metric: Mapping[str, Any] | None, which: str) -> float | None:
    """A time statistic of an AIPerf metric in seconds (its ``unit`` says the scale)."""
    if not isinstance(metric, Mapping):
        return None
    value = number(metric.get(which))
    scale = SECONDS_PER_UNIT.get(str(metric.get("unit")))
    return None if value is None or scale is None else value * scale


def load_of(document: Mapping[str, Any], duration_s: float) -> ImportedLoad:
    """The profiling phase's load: a concurrency, or a request rate (AIPerf's arrival pattern)."""
    phases = (document.get("input_config") or {}).get("phases") or []
    phase = next((p for p in phases if p.get("kind") == "profiling"), phases[0] if phases else {})
    concurrency, rate = number(phase.get("concurrency")), number(phase.get("request_rate"))
    if rate is not None:
        pattern = str(phase.get("arrival_pattern") or "poisson")
        kind = "constant-arrival-rate" if pattern == "constant" else pattern
        return ImportedLoad(kind, vus=int(concurrency) if concurrency else None, rate_per_s=rate, duration_s=duration_s)
    return ImportedLoad("constant-vus", vus=int(concurrency or 1), duration_s=duration_s)


def foreign_figures(document: Mapping[str, Any]) -> dict[str, float]:
    """Every AIPerf statistic no lab figure took, under its own name (``metric.stat``)."""
    taken = set(LATENCY_MAP.values()) | {(metric, "avg") for metric in RATE_MAP.values()}
    taken |= {("completed_request_count", "avg"), ("error_request_count", "avg"), ("benchmark_duration", "avg")}
    found: dict[str, float] = {}
    for name, metric in document.items():
        if not isinstance(metric, Mapping) or "unit" not in metric:
            continue
        for which in FOREIGN_STATISTICS:
            value = number(metric.get(which))
            if value is not None and (name, which) not in taken:
                found[f"{name}.{which}"] = value
    return found


@register
class AIPerf(PeerTool):
    name = "aiperf"
    label = "AIPerf"
    expected = "an AIPerf profile export (profile_export_aiperf.json)"
    supported = "0.13.x"

    def claims(self, document: Mapping[str, Any]) -> bool:
        return "aiperf_version" in document or ("benchmark_id" in document and "input_config" in document)

    def version(self, document: Mapping[str, Any]) -> str:
        return str(document.get("aiperf_version") or "unknown")

    def is_supported(self, version: str) -> bool:
        return version.startswith("0.13.")

    def runs(self, document: Mapping[str, Any], *, version: str) -> list[ImportedRun]:
        duration_s = seconds(document["benchmark_duration"], "avg")
        if duration_s is None:
            raise ValueError("benchmark_duration has no avg")
        config = document.get("input_config") or {}
        endpoint = config.get("endpoint") or {}
        models = (config.get("models") or {}).get("items") or [{}]
        figures: dict[str, Any] = {
            name: seconds(document.get(metric), which) for name, (metric, which) in LATENCY_MAP.items()
        }
        figures |= {name: number((document.get(metric) or {}).get("avg")) for name, metric in RATE_MAP.items()}
        completed = number((document.get("completed_request_count") or document["request_count"]).get("avg"))
        failed = number((document.get("error_request_count") or {}).get("avg"))
        figures |= {"requests_ok": int(completed or 0), "requests_failed": int(failed or 0)}
        figures |= {"measured_duration_s": duration_s}
        load = load_of(document, duration_s)
        client = ClientFigures.from_figures({name: value for name, value in figures.items() if value is not None})
        return [
            ImportedRun(
                tool=self.name,
                version=version,
                index=0,
                label=f"{load.vus} concurrent" if load.kind == "constant-vus" else f"{load.kind} {load.rate_per_s:g}/s",
                target=(endpoint.get("urls") or [None])[0],
                model=str(models[0].get("name") or "unknown"),
                load=load,
                results=RunResults.from_parts(client, foreign=(ForeignFigures(self.name, foreign_figures(document)),)),
                stream=endpoint.get("streaming"),
                samples=None,
                samples_note="AIPerf's summary keeps no per-request records (they are in profile_export.jsonl)",
                started_at=_when(document.get("start_time")),
                finished_at=_when(document.get("end_time")),
            )
        ]


def _when(text: Any) -> datetime | None:
    """AIPerf's ISO times (no zone: the machine's clock, read as UTC as the lab stores times)."""
    try:
        found = datetime.fromisoformat(str(text))
    except ValueError:
        return None
    return found if found.tzinfo else found.replace(tzinfo=UTC)
