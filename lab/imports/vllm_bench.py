"""``vllm bench serve --save-result`` JSON, of the vLLM the lab's set-up installs (0.32).

The file names no version: a file is recognised by the fields ``vllm bench serve`` writes,
and 0.32's by the ones it added (``max_concurrent_requests``, ``rtfx``); a ``vllm_version``
given with ``--metadata vllm_version=...`` is read when present. Definitions (docs/imports.md):

- Latencies are a mean, a median and the percentiles chosen with ``--metric-percentiles``
  (``p99_e2el_ms``...): each maps to the lab's figure of that statistic when it was
  written; nothing is interpolated from the others.
- vLLM's TPOT is (latency - TTFT) / (output tokens - 1) per request, the lab's TPOT; its
  ITL pools every gap between tokens of every request (weighted by tokens, not requests),
  so it stays under its own name.
- Rates are over ``duration``, from the first request sent to the last one answered: the
  whole test, as the lab's ``req_per_s``.
- End-to-end latency statistics are written only when ``e2el`` is among
  ``--percentile-metrics`` (not by default for chat): otherwise the mean, median, p90, p95,
  p99 and max are computed from the file's per-request ``latencies`` of successful requests
  (the lab's definitions, percentiles interpolated linearly as k6 does).
- Per-request samples: ``latencies`` always (with ``errors`` only in a ``--save-detailed``
  file, so failed requests are known only there); ``ttfts`` and ``output_lens`` with
  ``--save-detailed``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from lab.imports import ImportedLoad, ImportedRun, PeerTool, milliseconds, number, register, samples_of
from lab.measurement.results import ClientFigures, ForeignFigures, RunResults

SUPPORTED_MINOR = "0.32"
# What every ``vllm bench serve`` result holds (the files of vLLM's older serving benchmark script too).
CORE_FIELDS = ("duration", "completed", "request_throughput", "output_throughput", "num_prompts", "model_id")
# Fields 0.32 writes that older versions do not.
NEWER_FIELDS = ("max_concurrent_requests", "rtfx", "endpoint_type")
STATISTIC_FIELD = re.compile(r"(mean|median|std|p[0-9.]+)_(ttft|tpot|itl|e2el)_ms")
# Lab figure <- (vLLM's metric, its statistic).
LATENCY_MAP: dict[str, tuple[str, str]] = {
    "latency_avg_s": ("e2el", "mean"),
    "latency_p50_s": ("e2el", "median"),
    "latency_p90_s": ("e2el", "p90"),
    "latency_p95_s": ("e2el", "p95"),
    "latency_p99_s": ("e2el", "p99"),
    "ttft_avg_s": ("ttft", "mean"),
    "ttft_p50_s": ("ttft", "median"),
    "ttft_p95_s": ("ttft", "p95"),
    "ttft_p99_s": ("ttft", "p99"),
    "tpot_avg_s": ("tpot", "mean"),
    "tpot_p95_s": ("tpot", "p95"),
}
# Whole-test rates: lab figure <- vLLM field.
RATE_MAP = {"req_per_s": "request_throughput", "output_tok_per_s": "output_throughput"}
# Long per-request lists and texts: never figures.
PER_REQUEST_FIELDS = frozenset(
    {
        "input_lens",
        "output_lens",
        "ttfts",
        "itls",
        "latencies",
        "start_times",
        "queue_times",
        "generated_texts",
        "errors",
    }
)


def load_of(document: Mapping[str, Any]) -> ImportedLoad:
    """A fixed concurrency with every request sent at once (rate "inf") is the lab's constant
    VUs; a finite rate is Poisson arrivals (burstiness 1) or gamma ones, named so."""
    rate = number(document.get("request_rate"))
    concurrency = number(document.get("max_concurrency"))
    duration_s = float(document["duration"])
    if rate is None and concurrency is not None:
        return ImportedLoad("constant-vus", vus=int(concurrency), duration_s=duration_s)
    if rate is None:
        return ImportedLoad("all-at-once", duration_s=duration_s)
    burstiness = number(document.get("burstiness"))
    kind = "poisson" if burstiness in (None, 1.0) else f"gamma (burstiness {burstiness:g})"
    return ImportedLoad(kind, vus=int(concurrency) if concurrency else None, rate_per_s=rate, duration_s=duration_s)


def mapped_figures(document: Mapping[str, Any]) -> dict[str, Any]:
    figures: dict[str, Any] = {
        name: milliseconds(document.get(f"{which}_{metric}_ms")) for name, (metric, which) in LATENCY_MAP.items()
    }
    figures |= {name: number(document.get(field)) for name, field in RATE_MAP.items()}
    duration_s = number(document.get("duration"))
    input_tokens = number(document.get("total_input_tokens"))
    if ClientFigures.from_figures(figures).latency_avg_s is None:
        figures |= latency_from_samples(document)
    return figures | {
        "input_tok_per_s": input_tokens / duration_s if input_tokens is not None and duration_s else None,
        "requests_ok": int(document["completed"]),
        "requests_failed": int(document.get("failed") or 0),
        "measured_duration_s": duration_s,
    }


def latency_from_samples(document: Mapping[str, Any]) -> dict[str, float]:
    """Latency statistics of the successful requests' per-request latencies (when the file has them)."""
    samples, _ = request_samples(document)
    if samples is None:
        return {}
    values = sorted(latency for latency, ok in zip(samples.latency_s, samples.ok, strict=True) if ok)
    if not values:
        return {}
    found = {"latency_avg_s": sum(values) / len(values), "latency_max_s": values[-1]}
    for share, name in ((50, "latency_p50_s"), (90, "latency_p90_s"), (95, "latency_p95_s"), (99, "latency_p99_s")):
        position = (len(values) - 1) * share / 100
        low = int(position)
        high = min(low + 1, len(values) - 1)
        found[name] = values[low] + (values[high] - values[low]) * (position - low)
    return found


def foreign_figures(document: Mapping[str, Any]) -> dict[str, float]:
    """Every number vLLM wrote that no lab figure took, under its own name."""
    taken = {f"{which}_{metric}_ms" for metric, which in LATENCY_MAP.values()} | set(RATE_MAP.values())
    taken |= {"duration", "completed", "failed"}
    return {
        name: float(value)
        for name, raw in document.items()
        if name not in taken and name not in PER_REQUEST_FIELDS and (value := number(raw)) is not None
    }


def request_samples(document: Mapping[str, Any]) -> tuple[Any, str | None]:
    """Per-request latencies (and TTFT/TPOT from a detailed file), with a note on what is missing."""
    latencies = document.get("latencies")
    if not isinstance(latencies, list) or not latencies:
        return None, "the file keeps no per-request latencies"
    errors = document.get("errors")
    failed = int(document.get("failed") or 0)
    if isinstance(errors, list) and len(errors) == len(latencies):
        ok = [not error for error in errors]
    elif failed == 0:
        ok = [True] * len(latencies)
    else:
        return None, f"{failed} requests failed and the file does not say which (save it with --save-detailed)"
    ttfts, output_lens = document.get("ttfts"), document.get("output_lens")
    ttft: list[float] = []
    tpot: list[float] = []
    note = None
    if isinstance(ttfts, list) and isinstance(output_lens, list) and len(ttfts) == len(output_lens) == len(latencies):
        for latency, first, tokens, success in zip(latencies, ttfts, output_lens, ok, strict=True):
            if success:
                ttft.append(float(first))
                tpot.append((float(latency) - float(first)) / (tokens - 1) if tokens > 1 else float("nan"))
    else:
        note = "per-request TTFT and TPOT are only in a --save-detailed file"
    return samples_of([float(value) for value in latencies], ok, ttft, tpot), note


@register
class VllmBench(PeerTool):
    name = "vllm-bench"
    label = "vllm bench serve"
    expected = "a vllm bench serve --save-result JSON"
    supported = f"{SUPPORTED_MINOR}.x"

    def claims(self, document: Mapping[str, Any]) -> bool:
        return all(field in document for field in CORE_FIELDS)

    def version(self, document: Mapping[str, Any]) -> str:
        if document.get("vllm_version"):
            return str(document["vllm_version"])
        missing = [field for field in NEWER_FIELDS if field not in document]
        if missing:
            return f"older than {SUPPORTED_MINOR} (no {', '.join(missing)})"
        return f"{SUPPORTED_MINOR} (by its fields; the file names no version)"

    def is_supported(self, version: str) -> bool:
        return version.startswith(f"{SUPPORTED_MINOR}.") or version.startswith(f"{SUPPORTED_MINOR} ")

    def runs(self, document: Mapping[str, Any], *, version: str) -> list[ImportedRun]:
        load = load_of(document)
        samples, note = request_samples(document)
        client = ClientFigures.from_figures({k: v for k, v in mapped_figures(document).items() if v is not None})
        started = _date(document.get("date"))
        return [
            ImportedRun(
                tool=self.name,
                version=version.split(" ")[0],
                index=0,
                label=_label(load),
                target=document.get("base_url") or None,
                model=str(document["model_id"]),
                load=load,
                results=RunResults.from_parts(client, foreign=(ForeignFigures(self.name, foreign_figures(document)),)),
                # Streamed whenever TTFT was measured (a chat or completions backend).
                stream="mean_ttft_ms" in document,
                samples=samples,
                samples_note=note,
                started_at=started,
            )
        ]


def _label(load: ImportedLoad) -> str:
    if load.kind == "constant-vus":
        return f"{load.vus} concurrent"
    if load.rate_per_s is not None:
        return f"{load.kind} {load.rate_per_s:g} req/s" + (f", at most {load.vus} concurrent" if load.vus else "")
    return load.kind


def _date(text: Any) -> datetime | None:
    """vLLM's ``date`` (``20261203-134512``, the clock of the machine that ran it, read as UTC)."""
    try:
        return datetime.strptime(str(text), "%Y%m%d-%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        return None
