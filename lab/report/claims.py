"""Claims and verdicts: the seed's conclusions, claim by claim, judged by rules that are data.

The verdict rules (``VERDICT_RULES``) and the claims (``CLAIMS``) are data, so the report
prints exactly the rule each verdict used. Figures and ratios come from :mod:`lab.compare`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lab import compare
from lab.compare import (
    SEED_EXP1,
    SEED_EXP2,
    SEED_EXP3,
    SEED_SERVER_NAMES,
    exp1_ratios,
    exp2_ratios,
    exp3_ratios,
    format_share,
)

# The seed states experiment 2's hit rate only for 1,000 prompts ("hit rate 98%").
SEED_EXP2_HIT_RATE: dict[int, float] = {1000: 0.98}
# The VUs behind the seed's experiments 2 and 3 (not stated by the seed; its direct rows match 32).
SEED_VUS_BY_PRESET: dict[str, int] = {"seed-exp2": 32, "seed-exp3": 32}


HELD, NOT_HELD, PARTLY, NOT_MEASURED = "held", "did not hold", "partly", "not measured"
VERDICTS: tuple[str, ...] = (HELD, PARTLY, NOT_HELD, NOT_MEASURED)

# The rules, as data. Each verdict names its rule; the report prints these parameters.
VERDICT_RULES: dict[str, dict[str, Any]] = {
    # A claimed factor ("~5x faster", "grows ~25x").
    "factor": {
        "held_within_factor": 2.0,  # ours between seed/2 and seed*2
        "direction_margin": 0.10,  # "same direction": ours above 1.1 where the seed's is above 1 (below 0.9 if below)
        "text": "held if ours is within a factor of 2 of the seed's figure; partly if it points the same way "
                "(above 1.1 where the seed's is above 1) but is further off; did not hold otherwise",
    },
    # A claimed near-constant ("latency grows only 1.2x", "max latency unchanged").
    "steady": {
        "held_within_factor": 1.5,
        "partly_within_factor": 3.0,
        "text": "held if ours is within a factor of 1.5 of the seed's figure; partly within a factor of 3; "
                "did not hold otherwise",
    },
    # A claimed share ("hit rate 98%", "prefix cache hits 82%").
    "share": {
        "held_within_points": 0.10,
        "partly_at_least_fraction": 0.5,
        "text": "held if ours is within 10 percentage points of the seed's; partly if at least half of it; "
                "did not hold otherwise",
    },
    # "Prefix caching reuses the shared prompt prefix" (hit rates "very high").
    "high_share": {
        "held_at_least": 0.5,
        "partly_at_least": 0.1,
        "text": "held if ours is at least 50%; partly if at least 10%; did not hold otherwise",
    },
    # "Almost never hits".
    "rare": {
        "held_at_most": 0.05,
        "partly_at_most": 0.20,
        "text": "held if ours is at most 5%; partly if at most 20%; did not hold otherwise",
    },
    # "Costs almost nothing": cached over direct throughput.
    "cheap": {
        "held_at_least": 0.90,
        "partly_at_least": 0.75,
        "text": "held if the cached set-up keeps at least 90% of the direct req/s; partly at least 75%; "
                "did not hold otherwise",
    },
}


def judge(rule: str, ours: float | None, seed: float | None) -> str:
    """The verdict of one figure under ``VERDICT_RULES[rule]``; ``not measured`` when a figure is missing."""
    params = VERDICT_RULES[rule]
    if ours is None or (isinstance(ours, float) and math.isnan(ours)):
        return NOT_MEASURED
    if rule == "factor":
        if seed is None or seed <= 0 or ours <= 0:
            return NOT_MEASURED if seed is None else NOT_HELD
        factor = params["held_within_factor"]
        if seed / factor <= ours <= seed * factor:
            return HELD
        margin = params["direction_margin"]
        same_way = ours > 1 + margin if seed > 1 else ours < 1 - margin
        return PARTLY if same_way else NOT_HELD
    if rule == "steady":
        if seed is None or seed <= 0 or ours <= 0:
            return NOT_MEASURED if seed is None else NOT_HELD
        off_by = max(ours / seed, seed / ours)
        if off_by <= params["held_within_factor"]:
            return HELD
        return PARTLY if off_by <= params["partly_within_factor"] else NOT_HELD
    if rule == "share":
        if seed is None:
            return NOT_MEASURED
        if abs(ours - seed) <= params["held_within_points"]:
            return HELD
        return PARTLY if ours >= seed * params["partly_at_least_fraction"] else NOT_HELD
    if rule in ("high_share", "cheap"):
        if ours >= params["held_at_least"]:
            return HELD
        return PARTLY if ours >= params["partly_at_least"] else NOT_HELD
    if rule == "rare":
        if ours <= params["held_at_most"]:
            return HELD
        return PARTLY if ours <= params["partly_at_most"] else NOT_HELD
    raise ValueError(f"unknown verdict rule {rule!r}")


@dataclass(frozen=True)
class Measurement:
    """Our figure and the seed's comparable one, and what exactly was compared."""

    ours: float | None
    seed: float | None
    figure: str


@dataclass(frozen=True)
class Claim:
    """One conclusion from the seed's "Reading" paragraphs and how to check it."""

    key: str
    preset: str
    seed_words: str
    rule: str
    unit: str  # "x" (a ratio) or "share"
    measure: Callable[[list[dict[str, Any]]], Measurement]
    why_not: str  # the known reason on a small CPU machine, shown when it did not hold


def as_records(seed_rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**row, "status": "done"} for row in seed_rows]


def done_runs(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r.get("status") == "done"]


def vus_range(records: Sequence[dict[str, Any]]) -> tuple[int, int] | None:
    vus = sorted({r["vus"] for r in done_runs(records) if r.get("vus") is not None})
    return (vus[0], vus[-1]) if len(vus) >= 2 else None


def seed_exp1_over(low: int, high: int) -> list[dict[str, Any]]:
    """The seed's experiment 1 rows at ``low`` and ``high`` VUs, or 1 and 32 if it has no such rows."""
    seed_vus = {row["vus"] for row in SEED_EXP1}
    if low not in seed_vus or high not in seed_vus:
        low, high = 1, 32
    return [row for row in as_records(SEED_EXP1) if row["vus"] in (low, high)]


def _growth(backend: str, figure: str) -> Callable[[list[dict[str, Any]]], Measurement]:
    def measure(records: list[dict[str, Any]]) -> Measurement:
        span = vus_range(records)
        what = "output tok/s" if figure == "throughput" else "avg latency"
        if span is None:
            return Measurement(None, None, f"{backend} {what}, highest over lowest VUs")
        low, high = span
        ours = exp1_ratios(records).get(f"{backend}_{figure}_growth_{low}_to_{high}_vus")
        seed_rows = seed_exp1_over(low, high)
        seed_low, seed_high = min(r["vus"] for r in seed_rows), max(r["vus"] for r in seed_rows)
        seed = exp1_ratios(seed_rows).get(f"{backend}_{figure}_growth_{seed_low}_to_{seed_high}_vus")
        return Measurement(ours, seed, f"{SEED_SERVER_NAMES[backend]} {what} at {high} VUs over {low} VU "
                                       f"(seed: {seed_high} over {seed_low})")
    return measure


def _speedup_at_1_vu(records: list[dict[str, Any]]) -> Measurement:
    return Measurement(
        exp1_ratios(records)["vllm_over_naive_throughput"].get(1),
        exp1_ratios(as_records(SEED_EXP1))["vllm_over_naive_throughput"][1],
        "vLLM over naive output tok/s at 1 VU",
    )


def _prefix_hit_exp1(records: list[dict[str, Any]]) -> Measurement:
    ours = compare.mean_of(records, "prefix_cache_hit_rate", backend="vllm")
    return Measurement(ours, None, "vLLM prefix-cache hit rate, number-story prompt (seed: 'very high', not stated)")


def _cache_speedup(prompts: int) -> Callable[[list[dict[str, Any]]], Measurement]:
    def measure(records: list[dict[str, Any]]) -> Measurement:
        ours = exp2_ratios(records).get(prompts, {}).get("cached_over_direct_req_per_s")
        seed = exp2_ratios(as_records(SEED_EXP2))[prompts]["cached_over_direct_req_per_s"]
        return Measurement(ours, seed, f"cached over direct req/s, {prompts} prompts")
    return measure


def _cache_hit_rate(prompts: int) -> Callable[[list[dict[str, Any]]], Measurement]:
    def measure(records: list[dict[str, Any]]) -> Measurement:
        ours = exp2_ratios(records).get(prompts, {}).get("cache_hit_rate")
        return Measurement(ours, SEED_EXP2_HIT_RATE.get(prompts), f"response-cache hit rate, {prompts} prompts")
    return measure


def _max_latency(prompts: int) -> Callable[[list[dict[str, Any]]], Measurement]:
    def measure(records: list[dict[str, Any]]) -> Measurement:
        ours = exp2_ratios(records).get(prompts, {}).get("max_latency_cached_over_direct")
        seed = exp2_ratios(as_records(SEED_EXP2))[prompts]["max_latency_cached_over_direct"]
        return Measurement(ours, seed, f"max latency cached over direct, {prompts} prompts")
    return measure


def _exp3(figure: str, label: str) -> Callable[[list[dict[str, Any]]], Measurement]:
    def measure(records: list[dict[str, Any]]) -> Measurement:
        return Measurement(exp3_ratios(records)[figure], exp3_ratios(as_records(SEED_EXP3))[figure], label)
    return measure


CPU_NOTE = ("On a 2-core CPU vLLM has no CUDA graphs and its engine shares the two cores with its API server, "
            "k6 and (here) the other services, so one request at a time is no faster than the naive server.")
BATCHING_NOTE = ("Continuous batching pays where the hardware has idle parallel compute; a 2-core CPU is "
                 "compute-bound already at a few sequences, so batching adds less throughput and more latency.")
PREFIX_NOTE = ("vLLM's prefix cache only keeps full 128-token blocks; the seed's number-story prompt is about "
               "40 tokens after the chat template, so it never fills a block and never hits. ShareGPT chat "
               "prompts (system prompt plus history) are long enough to hit.")
SERIAL_NOTE = ("The naive server serialises requests: with N VUs each request waits for the N-1 before it, "
               "so latency grows roughly in proportion to the VUs; how close it comes to the seed's factor "
               "depends on the VU range measured.")
CACHE_NOTE = ("Every distinct prompt must miss once, and each miss is a full generation. Direct vLLM-CPU here "
              "completes about 1 request per second, so a 20 s run stores only about 20 of the 50 prompts (hits "
              "come only from those) and none of 1,000 prompts repeats; the seed's GPU (27 req/s) filled all 50 "
              "within about 2 s, after which nearly every request was a millisecond hit. The proxy's hit path "
              "itself serves thousands of req/s on this machine (BENCHMARKS.md), so a longer run or a warm "
              "cache is what this ratio needs here.")
MISS_NOTE = ("Every distinct prompt misses once and a miss costs a full generation, so the slowest request is "
             "the same with or without the cache; on a short run a larger share of requests are misses.")
CHAT_CACHE_NOTE = ("Chat requests carry whole conversations, so they almost never repeat; what the proxy costs "
                   "shows as the difference between cached and direct throughput.")

CLAIMS: tuple[Claim, ...] = (
    Claim("exp1-speedup-1vu", "seed-exp1", "At 1 VU vLLM is ~5x faster (CUDA graphs cut CPU launch overhead).",
          "factor", "x", _speedup_at_1_vu, CPU_NOTE),
    Claim("exp1-vllm-throughput-growth", "seed-exp1",
          "From 1 to 32 VUs vLLM's throughput grows ~25x (continuous batching)...",
          "factor", "x", _growth("vllm", "throughput"), BATCHING_NOTE),
    Claim("exp1-vllm-latency-growth", "seed-exp1", "...while its latency grows only 1.2x.",
          "steady", "x", _growth("vllm", "latency"), BATCHING_NOTE),
    Claim("exp1-naive-latency-growth", "seed-exp1",
          "The naive server serialises requests, so its latency grows ~10x.",
          "factor", "x", _growth("naive", "latency"), SERIAL_NOTE),
    Claim("exp1-prefix-cache", "seed-exp1",
          "Prefix caching (PagedAttention KV cache) reuses the shared prompt prefix.",
          "high_share", "share", _prefix_hit_exp1, PREFIX_NOTE),
    Claim("exp2-cache-speedup-50", "seed-exp2", "~100x more req/s with 50 distinct prompts.",
          "factor", "x", _cache_speedup(50), CACHE_NOTE),
    Claim("exp2-cache-speedup-1000", "seed-exp2", "~35x with 1000 prompts...",
          "factor", "x", _cache_speedup(1000), CACHE_NOTE),
    Claim("exp2-hit-rate-1000", "seed-exp2", "...(hit rate 98%).",
          "share", "share", _cache_hit_rate(1000),
          "Each of the 1,000 prompts misses once and a miss holds a VU for a full generation; a short run "
          "on a slow backend spends a larger share of its requests on misses."),
    Claim("exp2-max-latency-50", "seed-exp2", "Max latency is unchanged: misses still cost a full generation (50 prompts).",
          "steady", "x", _max_latency(50), MISS_NOTE),
    Claim("exp2-max-latency-1000", "seed-exp2", "Max latency is unchanged: misses still cost a full generation (1000 prompts).",
          "steady", "x", _max_latency(1000), MISS_NOTE),
    Claim("exp3-vllm-over-naive", "seed-exp3", "In multi-turn chat vLLM is ~40x the naive server.",
          "factor", "x", _exp3("vllm_over_naive_req_per_s", "vLLM over naive req/s, multi-turn chat"),
          BATCHING_NOTE),
    Claim("exp3-prefix-hit", "seed-exp3", "The KV prefix cache still hits 82%.",
          "share", "share", _exp3("vllm_prefix_cache_hit_rate", "vLLM prefix-cache hit rate, multi-turn chat"),
          "Hits need shared full 128-token blocks: a shorter system prompt, fewer turns per session or fewer "
          "sessions replayed within the run (quick scale) leave fewer full blocks to reuse."),
    Claim("exp3-response-cache-rare", "seed-exp3", "The response cache almost never hits in chat (1 of 836)...",
          "rare", "share", _exp3("response_cache_hit_rate", "response-cache hit rate, multi-turn chat"),
          CHAT_CACHE_NOTE),
    Claim("exp3-response-cache-cheap", "seed-exp3", "...yet costs almost nothing.",
          "cheap", "x", _exp3("cached_over_direct_req_per_s", "vLLM + Redis over vLLM req/s, multi-turn chat"),
          CHAT_CACHE_NOTE),
)


def format_value(value: float | None, unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if unit == "share":
        return format_share(value)
    return f"{value:,.1f}x" if value >= 10 else f"{value:.2f}x"


def _how_far(measurement: Measurement, unit: str) -> str:
    """' (3.9 times the seed's)' or ' (a third of the seed's)' for ratios; '' otherwise."""
    if unit != "x" or not measurement.ours or not measurement.seed:
        return ""
    times = measurement.ours / measurement.seed
    return f" ({times:.1f} times the seed's)" if times >= 1 else f" (1/{1 / times:.1f} of the seed's)"


def _load_caveat(preset: str, records: Sequence[dict[str, Any]]) -> str:
    """Where experiments 2 and 3 ran at other VUs than the seed's 32, say so."""
    if preset not in SEED_VUS_BY_PRESET:
        return ""
    vus = sorted({r["vus"] for r in done_runs(records) if r.get("vus") is not None})
    seed_vus = SEED_VUS_BY_PRESET[preset]
    if not vus or vus == [seed_vus]:
        return ""
    return f" (measured at {', '.join(map(str, vus))} VUs, the seed at {seed_vus})"


def evaluate_claims(records_by_preset: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Every claim in ``CLAIMS`` with our figure, the seed's, the verdict, its rule and a reason."""
    results = []
    for claim in CLAIMS:
        records = records_by_preset.get(claim.preset, [])
        measurement = claim.measure(records)
        verdict = judge(claim.rule, measurement.ours, measurement.seed)
        ours_text = format_value(measurement.ours, claim.unit)
        seed_text = format_value(measurement.seed, claim.unit) if measurement.seed is not None else "not stated"
        if verdict == NOT_MEASURED:
            reason = ("no done run measured this figure" if not done_runs(records)
                      else "the runs needed for this figure are missing or did not report it")
        else:
            against = f"against the seed's {seed_text}" if measurement.seed is not None else "(the seed gives no figure)"
            reason = f"ours {ours_text} {against}"
            if verdict != HELD:
                reason += f"{_how_far(measurement, claim.unit)}. {claim.why_not}"
            reason += _load_caveat(claim.preset, records)
        results.append({
            "key": claim.key, "preset": claim.preset, "claim": claim.seed_words, "figure": measurement.figure,
            "ours": measurement.ours, "seed": measurement.seed, "ours_text": ours_text, "seed_text": seed_text,
            "verdict": verdict, "rule": claim.rule, "rule_text": VERDICT_RULES[claim.rule]["text"], "reason": reason,
        })
    return results
