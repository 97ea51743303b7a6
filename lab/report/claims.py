"""Claims and verdicts: the seed's conclusions, claim by claim, judged by rules that are data.

The verdict rules (:mod:`lab.report.verdicts`) and the claims (``CLAIMS``) are data, so the report
prints exactly the rule each verdict used. Figures and ratios come from :mod:`lab.analysis.seed`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NotRequired, TypedDict

from lab.analysis.aggregation import done_runs, vus_range
from lab.analysis.interval_verdicts import Verdict, interval_verdict
from lab.analysis.seed import (
    LATENCY_AVG_S,
    SERVER_NAMES,
    exp1_ratios,
    exp2_ratios,
    exp3_ratios,
    seed_growth,
    seed_records,
)
from lab.analysis.sequential import widen_interval
from lab.backends import SeedSetup
from lab.report.claim_reasons import (
    Evidence,
    Reason,
    cache_filled_first,
    explain_cache,
    explain_cheap,
    explain_exp3_prefix,
    explain_exp3_speedup,
    explain_max_latency,
    explain_naive_growth,
    explain_prefix,
    explain_rare,
    explain_speedup_1vu,
    explain_vllm_growth,
    fill_cap,
    latency_cap,
)
from lab.report.formatting import format_ratio, ratio_with_bounds
from lab.report.verdicts import VERDICT_RULES, judge

_NAIVE, _VLLM, _CACHED = SeedSetup.NAIVE, SeedSetup.VLLM, SeedSetup.VLLM_CACHE
# The VUs behind the seed's experiments 2 and 3 (not stated by the seed; its direct rows match 32).
SEED_VUS_BY_PRESET: dict[str, int] = {"seed-exp2": 32, "seed-exp3": 32}


@dataclass(frozen=True)
class Measurement:
    """Our figure (with its 95% interval over the repeats) and the seed's comparable one, and
    what exactly was compared."""

    ours: float | None
    seed: float | None
    figure: str
    why_not_measured: str | None = None  # when the runs could not measure it by design
    ours_low: float | None = None
    ours_high: float | None = None
    # Why our figure is cut off by what the run could hold (the test's length, a cache that
    # cannot fill in it), naming the cap: such a figure is not judged.
    censored: str | None = None


def _measured(found: Any, seed: float | None, figure: str) -> Measurement:
    """A Measurement of a typed ratio (with its interval) or hit rate (with its bounds)."""
    if found is None:
        return Measurement(None, seed, figure)
    interval = getattr(found, "interval", None)
    if interval is not None:
        return Measurement(found.value, seed, figure, ours_low=interval.ci95_low, ours_high=interval.ci95_high)
    return Measurement(
        found.value,
        seed,
        figure,
        ours_low=getattr(found, "ci95_low", None),
        ours_high=getattr(found, "ci95_high", None),
    )


@dataclass(frozen=True)
class Claim:
    """One conclusion from the seed's "Reading" paragraphs and how to check it."""

    key: str
    preset: str
    seed_words: str
    rule: str
    unit: str  # "x" (a ratio) or "share"
    measure: Callable[[Sequence[Mapping[str, Any]]], Measurement]
    explain: Callable[[Evidence], Reason]  # why our figure is what it is, from the measurements


def _growth(setup: SeedSetup, figure: str) -> Callable[[Sequence[Mapping[str, Any]]], Measurement]:
    what = "output tok/s" if figure == "output_tok_per_s" else "avg latency"

    def measure(records: Sequence[Mapping[str, Any]]) -> Measurement:
        span = vus_range(records)
        if span is None:
            return Measurement(None, None, f"{setup.value} {what}, highest over lowest VUs")
        low, high = span
        seed = seed_growth(setup, figure, low, high)
        measurement = _measured(
            exp1_ratios(records).growth_of(setup, figure),
            seed.value,
            f"{SERVER_NAMES[setup]} {what} at {high} VUs over {low} VU (seed: {seed.high_vus} over {seed.low_vus})",
        )
        if figure == LATENCY_AVG_S:
            cap = latency_cap(records, setup, high)
            if cap:
                return replace(measurement, censored=cap)
        return measurement

    return measure


def _speedup_at_1_vu(records: Sequence[Mapping[str, Any]]) -> Measurement:
    ours = next((r for r in exp1_ratios(records).speedups if r.vus == 1), None)
    return _measured(ours, exp1_ratios(seed_records("seed-exp1")).speedup_at(1), "vLLM over naive output tok/s at 1 VU")


def _prefix_hit_exp1(records: Sequence[Mapping[str, Any]]) -> Measurement:
    return _measured(
        exp1_ratios(records).prefix_cache_hit_rate,
        None,
        "vLLM prefix-cache hit rate, number-story prompt (seed: 'very high', not stated)",
    )


def _exp2_found(records: Sequence[Mapping[str, Any]], prompts: int, pick: Callable[[Any], Any]) -> Any:
    at_prompts = exp2_ratios(records).get(prompts)
    return pick(at_prompts) if at_prompts else None


def _exp2(
    prompts: int, pick: Callable[[Any], Any], figure: str
) -> Callable[[Sequence[Mapping[str, Any]]], Measurement]:
    def measure(records: Sequence[Mapping[str, Any]]) -> Measurement:
        seed = _exp2_found(seed_records("seed-exp2"), prompts, pick)
        return _measured(_exp2_found(records, prompts, pick), seed.value if seed else None, figure)

    return measure


def _censored_by_fill(
    prompts: int, measure: Callable[[Sequence[Mapping[str, Any]]], Measurement]
) -> Callable[[Sequence[Mapping[str, Any]]], Measurement]:
    def censored_measure(records: Sequence[Mapping[str, Any]]) -> Measurement:
        measurement = measure(records)
        cap = fill_cap(records, prompts)
        return replace(measurement, censored=cap) if cap else measurement

    return censored_measure


def _cache_speedup(prompts: int) -> Callable[[Sequence[Mapping[str, Any]]], Measurement]:
    return _censored_by_fill(
        prompts,
        _exp2(prompts, lambda ratios: ratios.cached_over_direct, f"cached over direct req/s, {prompts} prompts"),
    )


def _cache_hit_rate(prompts: int) -> Callable[[Sequence[Mapping[str, Any]]], Measurement]:
    return _censored_by_fill(
        prompts, _exp2(prompts, lambda ratios: ratios.hit_rate, f"response-cache hit rate, {prompts} prompts")
    )


def _max_latency(prompts: int) -> Callable[[Sequence[Mapping[str, Any]]], Measurement]:
    measure_ratio = _exp2(
        prompts,
        lambda ratios: ratios.max_latency_cached_over_direct,
        f"max latency cached over direct, {prompts} prompts",
    )

    def measure(records: Sequence[Mapping[str, Any]]) -> Measurement:
        measurement = measure_ratio(records)
        if cache_filled_first(records, prompts):
            return Measurement(
                None,
                measurement.seed,
                measurement.figure,
                "the cache was filled before the measured window, so the window "
                "held no miss: this claim is about the misses",
            )
        return measurement

    return measure


def _exp3(pick: Callable[[Any], Any], label: str) -> Callable[[Sequence[Mapping[str, Any]]], Measurement]:
    def measure(records: Sequence[Mapping[str, Any]]) -> Measurement:
        return _measured(pick(exp3_ratios(records)), pick(exp3_ratios(seed_records("seed-exp3"))).value, label)

    return measure


CLAIMS: tuple[Claim, ...] = (
    Claim(
        "exp1-speedup-1vu",
        "seed-exp1",
        "At 1 VU vLLM is ~5x faster (CUDA graphs cut CPU launch overhead).",
        "gain",
        "x",
        _speedup_at_1_vu,
        explain_speedup_1vu,
    ),
    Claim(
        "exp1-vllm-throughput-growth",
        "seed-exp1",
        "From 1 to 32 VUs vLLM's throughput grows ~25x (continuous batching)...",
        "gain",
        "x",
        _growth(_VLLM, "output_tok_per_s"),
        explain_vllm_growth,
    ),
    Claim(
        "exp1-vllm-latency-growth",
        "seed-exp1",
        "...while its latency grows only 1.2x.",
        "steady",
        "x",
        _growth(_VLLM, "latency_avg_s"),
        explain_vllm_growth,
    ),
    Claim(
        "exp1-naive-latency-growth",
        "seed-exp1",
        "The naive server serialises requests, so its latency grows ~10x.",
        "factor",
        "x",
        _growth(_NAIVE, "latency_avg_s"),
        explain_naive_growth,
    ),
    Claim(
        "exp1-prefix-cache",
        "seed-exp1",
        "Prefix caching (PagedAttention KV cache) reuses the shared prompt prefix.",
        "high_share",
        "share",
        _prefix_hit_exp1,
        explain_prefix,
    ),
    Claim(
        "exp2-cache-speedup-50",
        "seed-exp2",
        "~100x more req/s with 50 distinct prompts.",
        "gain",
        "x",
        _cache_speedup(50),
        explain_cache(50),
    ),
    Claim(
        "exp2-cache-speedup-1000",
        "seed-exp2",
        "~35x with 1000 prompts...",
        "gain",
        "x",
        _cache_speedup(1000),
        explain_cache(1000),
    ),
    Claim(
        "exp2-hit-rate-1000",
        "seed-exp2",
        "...(hit rate 98%).",
        "share",
        "share",
        _cache_hit_rate(1000),
        explain_cache(1000),
    ),
    Claim(
        "exp2-max-latency-50",
        "seed-exp2",
        "Max latency is unchanged: misses still cost a full generation (50 prompts).",
        "steady",
        "x",
        _max_latency(50),
        explain_max_latency(50),
    ),
    Claim(
        "exp2-max-latency-1000",
        "seed-exp2",
        "Max latency is unchanged: misses still cost a full generation (1000 prompts).",
        "steady",
        "x",
        _max_latency(1000),
        explain_max_latency(1000),
    ),
    Claim(
        "exp3-vllm-over-naive",
        "seed-exp3",
        "In multi-turn chat vLLM is ~40x the naive server.",
        "gain",
        "x",
        _exp3(lambda ratios: ratios.vllm_over_naive, "vLLM over naive req/s, multi-turn chat"),
        explain_exp3_speedup,
    ),
    Claim(
        "exp3-prefix-hit",
        "seed-exp3",
        "The KV prefix cache still hits 82%.",
        "share",
        "share",
        _exp3(lambda ratios: ratios.prefix_cache_hit_rate, "vLLM prefix-cache hit rate, multi-turn chat"),
        explain_exp3_prefix,
    ),
    Claim(
        "exp3-response-cache-rare",
        "seed-exp3",
        "The response cache almost never hits in chat (1 of 836)...",
        "rare",
        "share",
        _exp3(lambda ratios: ratios.response_cache_hit_rate, "response-cache hit rate, multi-turn chat"),
        explain_rare,
    ),
    Claim(
        "exp3-response-cache-cheap",
        "seed-exp3",
        "...yet costs almost nothing.",
        "cheap",
        "x",
        _exp3(lambda ratios: ratios.cached_over_direct, "vLLM + Redis over vLLM req/s, multi-turn chat"),
        explain_cheap,
    ),
)


def _how_far(measurement: Measurement, unit: str) -> str:
    """' (3.9 times the seed's)' or ' (a third of the seed's)' for ratios; '' otherwise."""
    if unit != "x" or not measurement.ours or not measurement.seed:
        return ""
    times = measurement.ours / measurement.seed
    if 0.5 <= times < 2:
        return f" ({times:.2f} times the seed's)"
    return f" ({times:.1f} times the seed's)" if times >= 1 else f" (1/{1 / times:.1f} of the seed's)"


def _load_caveat(preset: str, records: Sequence[Mapping[str, Any]]) -> str:
    """Where experiments 2 and 3 ran at other VUs than the seed's 32, say so."""
    if preset not in SEED_VUS_BY_PRESET:
        return ""
    vus = sorted({r["vus"] for r in done_runs(records) if r.get("vus") is not None})
    seed_vus = SEED_VUS_BY_PRESET[preset]
    if not vus or vus == [seed_vus]:
        return ""
    return f" (measured at {', '.join(map(str, vus))} VUs, the seed at {seed_vus})"


def _judged(claim: Claim, measurement: Measurement, drift: float) -> Verdict:
    """The verdict over the figure's interval (stretched by the machine's drift for ratios)."""
    low, high = measurement.ours_low, measurement.ours_high
    if claim.unit == "x" and low is not None and high is not None and drift > 1:
        low, high = low / drift, high * drift
    return interval_verdict(lambda value: judge(claim.rule, value, measurement.seed), measurement.ours, low, high)


def _verdict(
    claim: Claim, measurement: Measurement, evidence: Evidence, texts: tuple[str, str], *, drift: float
) -> tuple[Verdict, str, str | None]:
    """The claim's verdict, its reason and the resource that bounded our figure (None: none did);
    ``texts``: our figure and the seed's as the report writes them."""
    ours_text, seed_text = texts
    verdict = Verdict.NOT_MEASURABLE if measurement.censored else _judged(claim, measurement, drift)
    if verdict == Verdict.NOT_MEASURED:
        missing = "the runs needed for this figure are missing or did not report it"
        return (
            verdict,
            measurement.why_not_measured
            or ("no done run measured this figure" if not done_runs(evidence.records) else missing),
            None,
        )
    explanation = claim.explain(evidence)
    if verdict == Verdict.NOT_MEASURABLE:
        return verdict, f"ours {ours_text}, but {measurement.censored}: {explanation.text}", explanation.bound
    against = f"against the seed's {seed_text}" if measurement.seed is not None else "(the seed gives no figure)"
    reason = (
        f"ours {ours_text} {against}{_how_far(measurement, claim.unit)}"
        f"{_load_caveat(claim.preset, evidence.records)}: {explanation.text}"
    )
    bound = None
    if verdict not in (Verdict.HELD, Verdict.INCONCLUSIVE) and explanation.bound:
        bound = explanation.bound
        reason += f". Bounded here by {bound}"
        if verdict == Verdict.NOT_HELD:
            verdict = Verdict.NOT_HELD_HARDWARE
    if verdict == Verdict.INCONCLUSIVE:
        reason += ". The interval spans the rule's threshold" + (
            f" once widened by the machine's drift (x{drift:.2f})" if drift > 1 else ""
        )
    return verdict, reason, bound


def _widened(measurement: Measurement, unit: str, factor: float) -> Measurement:
    """The measurement with its interval widened for repeated looks (a share stays at most 100%)."""
    ours, low, high = measurement.ours, measurement.ours_low, measurement.ours_high
    if factor == 1 or ours is None or low is None or high is None:
        return measurement
    low, high = widen_interval(ours, low, high, factor)
    return replace(measurement, ours_low=low, ours_high=min(high, 1.0) if unit == "share" else high)


class ClaimVerdict(TypedDict):
    """One claim judged (a row of the report's claims table): our figure and its 95% interval, the
    seed's, the verdict, its rule and the reason (``bound``: the limiting resource, if any)."""

    key: str
    preset: str
    claim: str
    figure: str
    ours: float | None
    ours_low: float | None
    ours_high: float | None
    seed: float | None
    ours_text: str
    seed_text: str
    verdict: Verdict
    rule: str
    rule_text: str
    reason: str
    bound: str | None
    # The rounds the verdict rests on (set when a reproduction is judged until decided).
    rounds: NotRequired[int]


def evaluate_claims(
    records_by_preset: Mapping[str, Sequence[Mapping[str, Any]]],
    environment: Mapping[str, object] | None = None,
    *,
    drift: float = 1.0,
    keys: Collection[str] | None = None,
    widen_by: float = 1.0,
) -> list[ClaimVerdict]:
    """Every claim in ``CLAIMS`` with our figure and its 95% interval, the seed's, the verdict,
    its rule and a reason computed from the runs' figures and the environment (``bound``: the
    limiting resource, if any).

    A verdict holds only when the whole interval lies on its side of the rule ("inconclusive"
    otherwise); ``drift`` (the A/A checks' factor, >= 1) widens ratio intervals; a figure cut
    off by what the run could hold is "not measurable here", naming the cap. ``keys``: only
    these claims; ``widen_by``: the sequential widening of the look (lab/analysis/sequential.py)."""
    results: list[ClaimVerdict] = []
    for claim in CLAIMS:
        if keys is not None and claim.key not in keys:
            continue
        records = records_by_preset.get(claim.preset, [])
        measurement = _widened(claim.measure(records), claim.unit, widen_by)
        ours_text = ratio_with_bounds(measurement.ours, measurement.ours_low, measurement.ours_high, claim.unit)
        seed_text = format_ratio(measurement.seed, claim.unit) if measurement.seed is not None else "not stated"
        verdict, reason, bound = _verdict(
            claim,
            measurement,
            Evidence(records=list(records), environment=dict(environment or {})),
            (ours_text, seed_text),
            drift=drift,
        )
        results.append(
            {
                "key": claim.key,
                "preset": claim.preset,
                "claim": claim.seed_words,
                "figure": measurement.figure,
                "ours": measurement.ours,
                "ours_low": measurement.ours_low,
                "ours_high": measurement.ours_high,
                "seed": measurement.seed,
                "ours_text": ours_text,
                "seed_text": seed_text,
                "verdict": verdict,
                "rule": claim.rule,
                "rule_text": VERDICT_RULES[claim.rule]["text"],
                "reason": reason,
                "bound": bound,
            }
        )
    return results
