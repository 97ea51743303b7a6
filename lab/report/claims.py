"""Claims and verdicts: the seed's conclusions, claim by claim, judged by rules that are data.

The verdict rules (``VERDICT_RULES``) and the claims (``CLAIMS``) are data, so the report
prints exactly the rule each verdict used. Figures and ratios come from :mod:`lab.analysis.compare`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lab.analysis import compare
from lab.analysis.compare import (
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
# Did not hold, and a measured resource of this machine bounds the figure (a GPU would change it).
NOT_HELD_HARDWARE = "did not hold here (hardware)"
VERDICTS: tuple[str, ...] = (HELD, PARTLY, NOT_HELD_HARDWARE, NOT_HELD, NOT_MEASURED)
# A machine this busy (backend, k6 and everything else, over all its cores) has no compute left to give.
SATURATED_SHARE = 0.85

# The rules, as data. Each verdict names its rule; the report prints these parameters.
VERDICT_RULES: dict[str, dict[str, Any]] = {
    # A claimed factor ("~5x faster", "grows ~25x").
    "factor": {
        "held_within_factor": 2.0,  # ours between seed/2 and seed*2
        "direction_margin": 0.10,  # "same direction": ours above 1.1 where the seed's is above 1 (below 0.9 if below)
        "text": "held if ours is within a factor of 2 of the seed's figure; partly if it points the same way "
                "(above 1.1 where the seed's is above 1) but is further off; did not hold otherwise",
    },
    # A claimed gain ("~5x faster", "~100x more req/s"): a stronger gain holds the claim too.
    "gain": {
        "held_at_least_fraction": 0.5,  # ours at least half the seed's
        "direction_margin": 0.10,
        "text": "held if ours is at least half the seed's figure (a larger gain holds the claim too); partly if "
                "it is still a gain (above 1.1); did not hold otherwise",
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
    if rule == "gain":
        if seed is None or seed <= 0 or ours <= 0:
            return NOT_MEASURED if seed is None else NOT_HELD
        if ours >= seed * params["held_at_least_fraction"]:
            return HELD
        return PARTLY if ours > 1 + params["direction_margin"] else NOT_HELD
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
    why_not_measured: str | None = None  # when the runs could not measure it by design


@dataclass(frozen=True)
class Claim:
    """One conclusion from the seed's "Reading" paragraphs and how to check it."""

    key: str
    preset: str
    seed_words: str
    rule: str
    unit: str  # "x" (a ratio) or "share"
    measure: Callable[[list[dict[str, Any]]], Measurement]
    explain: Callable[[Evidence], Reason]  # why our figure is what it is, from the measurements


@dataclass(frozen=True)
class Evidence:
    """What a claim's reason may use: its experiment's runs (records) and the environment."""

    records: list[dict[str, Any]]
    environment: dict[str, Any]

    def mean(self, figure: str, **match: Any) -> float | None:
        return compare.mean_of(self.records, figure, **match)

    @property
    def cores(self) -> int | None:
        return self.environment.get("cpu_count")

    @property
    def gpu(self) -> str | None:
        return self.environment.get("gpu_model")

    def machine_busy_share(self, **match: Any) -> float | None:
        """The share of the machine's CPU in use while the load ran (backend, k6, other processes)."""
        used = [self.mean(name, **match) for name in ("backend_cpu_percent_avg", "k6_cpu_percent_avg")]
        if not self.cores or used[0] is None:
            return None
        other = self.mean("other_cpu_percent_avg", **match) or 0.0
        return (sum(u or 0.0 for u in used) + other) / (self.cores * 100)

    def cpu(self) -> str:
        cores = f"{self.cores} cores" if self.cores else "an unknown number of cores"
        return f"{cores} of {self.environment.get('cpu_model') or 'an unknown CPU'}"


@dataclass(frozen=True)
class Reason:
    """Why our figure is what it is; ``bound`` names the resource of this machine that limits it
    (with its figure), so "did not hold" can say whether other hardware would change it."""

    text: str
    bound: str | None = None


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


def _cache_filled_first(records: Sequence[dict[str, Any]], prompts: int) -> bool:
    """Whether the cached cell with ``prompts`` filled its cache before the measured window."""
    return any(r.get("cache_filled_first") for r in done_runs(records)
               if r.get("backend") == "vllm+cache" and r.get("prompts") == prompts)


def _max_latency(prompts: int) -> Callable[[list[dict[str, Any]]], Measurement]:
    def measure(records: list[dict[str, Any]]) -> Measurement:
        ours = exp2_ratios(records).get(prompts, {}).get("max_latency_cached_over_direct")
        seed = exp2_ratios(as_records(SEED_EXP2))[prompts]["max_latency_cached_over_direct"]
        figure = f"max latency cached over direct, {prompts} prompts"
        if _cache_filled_first(records, prompts):
            return Measurement(None, seed, figure, "the cache was filled before the measured window, so the window "
                                                   "held no miss: this claim is about the misses")
        return Measurement(ours, seed, figure)
    return measure


def _exp3(figure: str, label: str) -> Callable[[list[dict[str, Any]]], Measurement]:
    def measure(records: list[dict[str, Any]]) -> Measurement:
        return Measurement(exp3_ratios(records)[figure], exp3_ratios(as_records(SEED_EXP3))[figure], label)
    return measure


def _num(value: float | None, digits: int = 1) -> str:
    return "?" if value is None else f"{value:,.{digits}f}"


def _cpu_bound(evidence: Evidence, what: str, **match: Any) -> str | None:
    """'CPU: 96% of 2 cores busy ...' when the machine was saturated while ``match`` ran."""
    busy = evidence.machine_busy_share(**match)
    if busy is None or busy < SATURATED_SHARE:
        return None
    backend_cpu = evidence.mean("backend_cpu_percent_avg", **match)
    return (f"CPU: {busy:.0%} of the {evidence.cores} cores were busy {what} (the backend alone "
            f"{_num(backend_cpu, 0)}% of one core)")


def _no_gpu_bound(evidence: Evidence) -> str | None:
    if evidence.gpu or "gpu_model" not in evidence.environment:  # a GPU, or nothing known
        return None
    return f"no GPU: the model runs on {evidence.cpu()}"


def _saturation_bound(evidence: Evidence, what: str, **match: Any) -> str | None:
    """The CPU bound while ``match`` ran, with the missing GPU beside it when there is none."""
    cpu = _cpu_bound(evidence, what, **match)
    no_gpu = _no_gpu_bound(evidence)
    return f"{cpu}; {no_gpu}" if cpu and no_gpu else cpu


def _tpot_change(evidence: Evidence, backend: str, low: int, high: int) -> str:
    tpot_low = evidence.mean("server_time_per_output_token_avg_s", backend=backend, vus=low)
    tpot_high = evidence.mean("server_time_per_output_token_avg_s", backend=backend, vus=high)
    if not tpot_low or tpot_high is None:
        return ""
    return (f"; the server's time per output token went from {tpot_low * 1000:.0f} ms to {tpot_high * 1000:.0f} ms "
            f"({tpot_high / tpot_low:.1f}x): each step decodes more sequences on the same cores")


def _explain_speedup_1vu(evidence: Evidence) -> Reason:
    vllm = evidence.mean("output_tok_per_s", backend="vllm", vus=1)
    naive = evidence.mean("output_tok_per_s", backend="naive", vus=1)
    text = f"at 1 VU vLLM produced {_num(vllm)} output tok/s and the naive server {_num(naive)}"
    bound = _no_gpu_bound(evidence)
    if bound:
        cpu = evidence.mean("backend_cpu_percent_avg", backend="vllm", vus=1)
        text += (f"; the seed's mechanism (CUDA graphs cutting kernel-launch overhead) exists only on a GPU, "
                 f"and here vLLM's engine decoded on the CPU at {_num(cpu, 0)}% of one core")
    return Reason(text, bound)


def _explain_vllm_growth(evidence: Evidence) -> Reason:
    span = vus_range(evidence.records)
    if span is None:
        return Reason("fewer than two VU counts were measured")
    low, high = span
    tok_low = evidence.mean("output_tok_per_s", backend="vllm", vus=low)
    tok_high = evidence.mean("output_tok_per_s", backend="vllm", vus=high)
    lat_low = evidence.mean("latency_avg_s", backend="vllm", vus=low)
    lat_high = evidence.mean("latency_avg_s", backend="vllm", vus=high)
    text = (f"from {low} to {high} VUs vLLM went from {_num(tok_low)} to {_num(tok_high)} output tok/s and its "
            f"average latency from {_num(lat_low, 2)} s to {_num(lat_high, 2)} s"
            + _tpot_change(evidence, "vllm", low, high))
    bound = _saturation_bound(evidence, f"at {high} VUs", backend="vllm", vus=high)
    if bound:
        text += "; batching cannot add throughput once the cores are saturated"
    return Reason(text, bound)


def _explain_naive_growth(evidence: Evidence) -> Reason:
    span = vus_range(evidence.records)
    if span is None:
        return Reason("fewer than two VU counts were measured")
    low, high = span
    lat_low = evidence.mean("latency_avg_s", backend="naive", vus=low)
    lat_high = evidence.mean("latency_avg_s", backend="naive", vus=high)
    test_s = evidence.mean("measured_duration_s", backend="naive", vus=high)
    interrupted = evidence.mean("iterations_interrupted", backend="naive", vus=high)
    # Serial: at N VUs a request waits for the N-1 before it, so latency / N is one generation.
    service_s = lat_low / low if lat_low is not None else None
    text = (f"the naive server answers one request at a time: about {_num(service_s, 1)} s a generation (at {low} "
            f"VU{'s' if low != 1 else ''}), so at {high} VUs a request can queue behind {high - 1} others (about "
            f"{_num((service_s or 0) * (high - 1), 0)} s)")
    if test_s is not None:
        text += (f"; the test lasted {_num(test_s, 0)} s, which caps the latency of the requests that completed "
                 f"({_num(lat_high, 1)} s on average)")
    if interrupted:
        text += f", and {_num(interrupted, 0)} requests were still queued when k6's graceful stop ended it (counted apart)"
    return Reason(text)


def _block_size(evidence: Evidence) -> int | None:
    sizes = {r.get("vllm_block_size") for r in done_runs(evidence.records) if str(r.get("backend")).startswith("vllm")}
    sizes.discard(None)
    return sizes.pop() if len(sizes) == 1 else None


def _prompt_tokens(evidence: Evidence, **match: Any) -> float | None:
    input_rate = evidence.mean("input_tok_per_s", **match)
    req_rate = evidence.mean("req_per_s", **match)
    return input_rate / req_rate if input_rate is not None and req_rate else None


def _explain_prefix(evidence: Evidence) -> Reason:
    tokens = _prompt_tokens(evidence, backend="vllm")
    block = _block_size(evidence)
    hit = evidence.mean("prefix_cache_hit_rate", backend="vllm")
    if tokens is None:
        return Reason("the prompt length was not measured")
    text = f"prompts averaged {tokens:,.0f} tokens (after the chat template)"
    if block is None:
        return Reason(text + "; the block size in force was not recorded")
    text += f" and vLLM's block size was {block}, so a prompt fills {int(tokens // block)} whole block(s)"
    if tokens < block:
        text += ": no block is full, and only full blocks are reused"
    elif hit is not None:
        text += f"; {format_share(hit)} of prompt tokens were served from the prefix cache"
    return Reason(text)


def _fill(evidence: Evidence, prompts: int) -> tuple[float | None, float | None, float | None]:
    """Direct req/s, seconds to store every distinct prompt at that rate, and the run's seconds."""
    direct = evidence.mean("req_per_s", backend="vllm", prompts=prompts)
    run_s = evidence.mean("duration_s", backend="vllm+cache", prompts=prompts)
    return direct, prompts / direct if direct else None, run_s


def _explain_cache(prompts: int) -> Callable[[Evidence], Reason]:
    def explain(evidence: Evidence) -> Reason:
        direct, fill_s, run_s = _fill(evidence, prompts)
        cached = evidence.mean("req_per_s", backend="vllm+cache", prompts=prompts)
        hit = evidence.mean("response_cache_hit_rate", backend="vllm+cache", prompts=prompts)
        if direct is None or fill_s is None or run_s is None:
            return Reason("the direct or the cached run is missing")
        if _cache_filled_first(evidence.records, prompts):
            return Reason(f"the cache was filled with all {prompts:,} prompts before the measured {run_s:.0f} s "
                          f"(unmeasured: at the {direct:.2f} req/s direct vLLM served, storing them takes at least "
                          f"{fill_s:,.0f} s), so the window measured the hit path: {format_share(hit)} of requests "
                          f"hit, {_num(cached, 0)} req/s cached")
        # A hit costs milliseconds, so the misses set the pace: each distinct prompt misses once.
        text = (f"every distinct prompt misses once at the backend's speed: direct vLLM served {direct:.2f} req/s, so "
                f"storing {prompts:,} prompts takes at least {fill_s:,.0f} s; the run lasted {run_s:.0f} s")
        bound = None
        if fill_s > run_s:
            text += (f", so at most {run_s / fill_s:.0%} of the prompts were stored by its end "
                     f"(hit rate measured: {format_share(hit)})")
            seed_direct = compare.mean_of(as_records(SEED_EXP2), "req_per_s", backend="vllm", prompts=prompts)
            bound = (f"generation speed: {direct:.2f} req/s direct at {_num(evidence.mean('vus', backend='vllm'), 0)} "
                     f"VUs against the seed's GPU {seed_direct:g} req/s (which stores them in "
                     f"{prompts / seed_direct:.0f} s)" if seed_direct else f"generation speed: {direct:.2f} req/s direct")
        else:
            text += (f", so all could be stored after about {fill_s:.0f} s, leaving the rest of the run to hits: "
                     f"{format_share(hit)} of requests hit, {_num(cached, 0)} req/s cached")
        return Reason(text, bound)
    return explain


def _explain_max_latency(prompts: int) -> Callable[[Evidence], Reason]:
    def explain(evidence: Evidence) -> Reason:
        cached = evidence.mean("latency_max_s", backend="vllm+cache", prompts=prompts)
        direct = evidence.mean("latency_max_s", backend="vllm", prompts=prompts)
        return Reason(f"the slowest request took {_num(cached, 2)} s through the cache and {_num(direct, 2)} s "
                      "direct: a miss is a full generation at the same concurrency either way")
    return explain


def _explain_exp3_speedup(evidence: Evidence) -> Reason:
    vllm = evidence.mean("req_per_s", backend="vllm")
    naive = evidence.mean("req_per_s", backend="naive")
    vus = evidence.mean("vus", backend="vllm")
    text = f"at {_num(vus, 0)} VUs vLLM served {_num(vllm, 2)} req/s and the naive server {_num(naive, 2)}"
    return Reason(text, _saturation_bound(evidence, "under vLLM", backend="vllm"))


def _explain_exp3_prefix(evidence: Evidence) -> Reason:
    tokens = _prompt_tokens(evidence, backend="vllm")
    block = _block_size(evidence)
    requests = evidence.mean("requests_ok", backend="vllm")
    vus = evidence.mean("vus", backend="vllm")
    run_s = evidence.mean("duration_s", backend="vllm")
    text = (f"prompts averaged {_num(tokens, 0)} tokens with block size {block or '?'}; a turn reuses the full "
            "blocks of the system prompt and of its session's earlier turns, so the share grows with the turns each "
            "session reaches within the run")
    if not requests or not vus or not run_s:
        return Reason(text)
    turns_per_vu = requests / vus
    seed_rate = compare.mean_of(as_records(SEED_EXP3), "req_per_s", backend="vllm")
    seed_turns_per_vu = seed_rate * run_s / vus if seed_rate else None
    text += f": each of the {vus:.0f} VUs completed {turns_per_vu:.1f} turns here"
    bound = None
    if seed_turns_per_vu:
        text += f", about {seed_turns_per_vu:.0f} at the seed's {seed_rate:g} req/s"
        if turns_per_vu < seed_turns_per_vu / 2:
            bound = (f"generation speed: {evidence.mean('req_per_s', backend='vllm'):.2f} req/s at {vus:.0f} VUs "
                     f"against the seed's GPU {seed_rate:g} req/s, so the later turns of a session, which reuse the "
                     "most, are rarely reached in a run")
    return Reason(text, bound)


def _explain_rare(evidence: Evidence) -> Reason:
    hits = evidence.mean("response_cache_hits", backend="vllm+cache")
    requests = evidence.mean("requests_ok", backend="vllm+cache")
    return Reason(f"{_num(hits, 0)} hits in {_num(requests, 0)} requests per run: a chat request carries its whole "
                  "conversation, so it repeats only when a session is replayed from the start")


def _explain_cheap(evidence: Evidence) -> Reason:
    cached = evidence.mean("req_per_s", backend="vllm+cache")
    direct = evidence.mean("req_per_s", backend="vllm")
    text = f"{_num(cached, 2)} req/s through the proxy against {_num(direct, 2)} direct"
    return Reason(text, _cpu_bound(evidence, "through the proxy", backend="vllm+cache"))


CLAIMS: tuple[Claim, ...] = (
    Claim("exp1-speedup-1vu", "seed-exp1", "At 1 VU vLLM is ~5x faster (CUDA graphs cut CPU launch overhead).",
          "gain", "x", _speedup_at_1_vu, _explain_speedup_1vu),
    Claim("exp1-vllm-throughput-growth", "seed-exp1",
          "From 1 to 32 VUs vLLM's throughput grows ~25x (continuous batching)...",
          "gain", "x", _growth("vllm", "throughput"), _explain_vllm_growth),
    Claim("exp1-vllm-latency-growth", "seed-exp1", "...while its latency grows only 1.2x.",
          "steady", "x", _growth("vllm", "latency"), _explain_vllm_growth),
    Claim("exp1-naive-latency-growth", "seed-exp1",
          "The naive server serialises requests, so its latency grows ~10x.",
          "factor", "x", _growth("naive", "latency"), _explain_naive_growth),
    Claim("exp1-prefix-cache", "seed-exp1",
          "Prefix caching (PagedAttention KV cache) reuses the shared prompt prefix.",
          "high_share", "share", _prefix_hit_exp1, _explain_prefix),
    Claim("exp2-cache-speedup-50", "seed-exp2", "~100x more req/s with 50 distinct prompts.",
          "gain", "x", _cache_speedup(50), _explain_cache(50)),
    Claim("exp2-cache-speedup-1000", "seed-exp2", "~35x with 1000 prompts...",
          "gain", "x", _cache_speedup(1000), _explain_cache(1000)),
    Claim("exp2-hit-rate-1000", "seed-exp2", "...(hit rate 98%).",
          "share", "share", _cache_hit_rate(1000), _explain_cache(1000)),
    Claim("exp2-max-latency-50", "seed-exp2", "Max latency is unchanged: misses still cost a full generation (50 prompts).",
          "steady", "x", _max_latency(50), _explain_max_latency(50)),
    Claim("exp2-max-latency-1000", "seed-exp2", "Max latency is unchanged: misses still cost a full generation (1000 prompts).",
          "steady", "x", _max_latency(1000), _explain_max_latency(1000)),
    Claim("exp3-vllm-over-naive", "seed-exp3", "In multi-turn chat vLLM is ~40x the naive server.",
          "gain", "x", _exp3("vllm_over_naive_req_per_s", "vLLM over naive req/s, multi-turn chat"),
          _explain_exp3_speedup),
    Claim("exp3-prefix-hit", "seed-exp3", "The KV prefix cache still hits 82%.",
          "share", "share", _exp3("vllm_prefix_cache_hit_rate", "vLLM prefix-cache hit rate, multi-turn chat"),
          _explain_exp3_prefix),
    Claim("exp3-response-cache-rare", "seed-exp3", "The response cache almost never hits in chat (1 of 836)...",
          "rare", "share", _exp3("response_cache_hit_rate", "response-cache hit rate, multi-turn chat"),
          _explain_rare),
    Claim("exp3-response-cache-cheap", "seed-exp3", "...yet costs almost nothing.",
          "cheap", "x", _exp3("cached_over_direct_req_per_s", "vLLM + Redis over vLLM req/s, multi-turn chat"),
          _explain_cheap),
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
    if 0.5 <= times < 2:
        return f" ({times:.2f} times the seed's)"
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


def evaluate_claims(
    records_by_preset: dict[str, list[dict[str, Any]]], environment: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Every claim in ``CLAIMS`` with our figure, the seed's, the verdict, its rule and a reason
    computed from the runs' figures and the environment (``bound``: the limiting resource, if any)."""
    results = []
    for claim in CLAIMS:
        records = records_by_preset.get(claim.preset, [])
        measurement = claim.measure(records)
        verdict = judge(claim.rule, measurement.ours, measurement.seed)
        ours_text = format_value(measurement.ours, claim.unit)
        seed_text = format_value(measurement.seed, claim.unit) if measurement.seed is not None else "not stated"
        bound = None
        if verdict == NOT_MEASURED:
            reason = measurement.why_not_measured or (
                "no done run measured this figure" if not done_runs(records)
                else "the runs needed for this figure are missing or did not report it")
        else:
            against = f"against the seed's {seed_text}" if measurement.seed is not None else "(the seed gives no figure)"
            explanation = claim.explain(Evidence(records=list(records), environment=dict(environment or {})))
            reason = (f"ours {ours_text} {against}{_how_far(measurement, claim.unit)}"
                      f"{_load_caveat(claim.preset, records)}: {explanation.text}")
            if verdict != HELD and explanation.bound:
                bound = explanation.bound
                reason += f". Bounded here by {bound}"
                if verdict == NOT_HELD:
                    verdict = NOT_HELD_HARDWARE
        results.append({
            "key": claim.key, "preset": claim.preset, "claim": claim.seed_words, "figure": measurement.figure,
            "ours": measurement.ours, "seed": measurement.seed, "ours_text": ours_text, "seed_text": seed_text,
            "verdict": verdict, "rule": claim.rule, "rule_text": VERDICT_RULES[claim.rule]["text"], "reason": reason,
            "bound": bound,
        })
    return results
