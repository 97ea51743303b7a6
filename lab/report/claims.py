"""Claims and verdicts: the seed's conclusions, claim by claim, judged by rules that are data.

The verdict rules (:mod:`lab.report.verdicts`) and the claims (``CLAIMS``) are data, so the report
prints exactly the rule each verdict used. Figures and ratios come from :mod:`lab.analysis.seed`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from lab.analysis.aggregation import done_runs, vus_range
from lab.analysis.seed import (
    LATENCY_AVG_S,
    SEED_EXPERIMENTS,
    SERVER_NAMES,
    exp1_ratios,
    exp2_ratios,
    exp3_ratios,
    seed_growth,
    setup_mean,
)
from lab.analysis.interval_verdicts import interval_verdict
from lab.analysis.reproducibility import runs_off_median
from lab.backends import SeedSetup, seed_setup_of
from lab.report.formatting import format_ratio, format_share
from lab.report.verdicts import (  # noqa: F401 (re-exported: the verdicts belong with the claims they judge)
    HELD,
    INCONCLUSIVE,
    NOT_HELD,
    NOT_HELD_HARDWARE,
    NOT_MEASURABLE,
    NOT_MEASURED,
    PARTLY,
    VERDICT_RULES,
    VERDICTS,
    judge,
)

_NAIVE, _VLLM, _CACHED = SeedSetup.NAIVE, SeedSetup.VLLM, SeedSetup.VLLM_CACHE
# The VUs behind the seed's experiments 2 and 3 (not stated by the seed; its direct rows match 32).
SEED_VUS_BY_PRESET: dict[str, int] = {"seed-exp2": 32, "seed-exp3": 32}
# A machine this busy (backend, k6 and everything else, over all its cores) has no compute left to give.
SATURATED_SHARE = 0.85


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
    return Measurement(found.value, seed, figure, ours_low=getattr(found, "ci95_low", None),
                       ours_high=getattr(found, "ci95_high", None))


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

    def mean(self, figure: str, setup: SeedSetup, **match: Any) -> float | None:
        """Mean ``figure`` of the runs of the backend reproducing the seed's ``setup`` that match ``match``."""
        return setup_mean(self.records, figure, setup, **match)

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


def _seed_records(preset: str) -> list[dict[str, Any]]:
    return SEED_EXPERIMENTS[preset].records()


def _growth(setup: SeedSetup, figure: str) -> Callable[[list[dict[str, Any]]], Measurement]:
    what = "output tok/s" if figure == "output_tok_per_s" else "avg latency"

    def measure(records: list[dict[str, Any]]) -> Measurement:
        span = vus_range(records)
        if span is None:
            return Measurement(None, None, f"{setup.value} {what}, highest over lowest VUs")
        low, high = span
        seed = seed_growth(setup, figure, low, high)
        measurement = _measured(exp1_ratios(records).growth_of(setup, figure), seed.value,
                                f"{SERVER_NAMES[setup]} {what} at {high} VUs over {low} VU "
                                f"(seed: {seed.high_vus} over {seed.low_vus})")
        if figure == LATENCY_AVG_S:
            cap = latency_cap(records, setup, high)
            if cap:
                return replace(measurement, censored=cap)
        return measurement
    return measure


# A latency is cut off by the test when requests were still waiting at its end and the longest
# finished one took at least this share of the test: longer ones could not finish inside it.
CENSORED_LATENCY_SHARE = 0.5


def latency_cap(records: Sequence[dict[str, Any]], setup: SeedSetup, vus: int) -> str | None:
    """Why ``setup``'s latency at ``vus`` is capped by the test's length, or None when it is not."""
    cell = [r for r in done_runs(records) if seed_setup_of(r.get("backend")) is setup and r.get("vus") == vus]
    for record in cell:
        test_s, longest_s = record.get("duration_s"), record.get("latency_max_s")
        waiting = record.get("iterations_interrupted") or 0
        if test_s and longest_s and waiting and longest_s >= CENSORED_LATENCY_SHARE * test_s:
            return (f"the test lasted {test_s:g} s and its longest finished request took {longest_s:.0f} s with "
                    f"{waiting} still waiting at the end (run #{record.get('run_id')}): latencies longer than the "
                    "test cannot be measured, so the mean is cut off by the test's length")
    return None


def _speedup_at_1_vu(records: list[dict[str, Any]]) -> Measurement:
    ours = next((r for r in exp1_ratios(records).speedups if r.vus == 1), None)
    return _measured(ours, exp1_ratios(_seed_records("seed-exp1")).speedup_at(1), "vLLM over naive output tok/s at 1 VU")


def _prefix_hit_exp1(records: list[dict[str, Any]]) -> Measurement:
    return _measured(exp1_ratios(records).prefix_cache_hit_rate, None,
                     "vLLM prefix-cache hit rate, number-story prompt (seed: 'very high', not stated)")


def _exp2_found(records: Sequence[dict[str, Any]], prompts: int, pick: Callable[[Any], Any]) -> Any:
    at_prompts = exp2_ratios(records).get(prompts)
    return pick(at_prompts) if at_prompts else None


def _exp2(prompts: int, pick: Callable[[Any], Any], figure: str) -> Callable[[list[dict[str, Any]]], Measurement]:
    def measure(records: list[dict[str, Any]]) -> Measurement:
        seed = _exp2_found(_seed_records("seed-exp2"), prompts, pick)
        return _measured(_exp2_found(records, prompts, pick), seed.value if seed else None, figure)
    return measure


def fill_cap(records: Sequence[dict[str, Any]], prompts: int) -> str | None:
    """Why the cache cannot hold ``prompts`` distinct answers within the run (each miss costs one
    direct generation), or None when it can."""
    direct = setup_mean(records, "req_per_s", _VLLM, prompts=prompts)
    test_s = next((r.get("duration_s") for r in done_runs(records) if r.get("prompts") == prompts
                   and r.get("duration_s")), None)
    if _cache_filled_first(records, prompts) or not direct or not test_s or prompts / direct <= test_s:
        return None
    return (f"storing {prompts:,} distinct answers takes at least {prompts / direct:,.0f} s at the direct "
            f"{direct:.2f} req/s, and the run lasted {test_s:g} s: the cache cannot fill within the run")


def _censored_by_fill(prompts: int, measure: Callable[[list[dict[str, Any]]], Measurement]
                      ) -> Callable[[list[dict[str, Any]]], Measurement]:
    def censored_measure(records: list[dict[str, Any]]) -> Measurement:
        measurement = measure(records)
        cap = fill_cap(records, prompts)
        return replace(measurement, censored=cap) if cap else measurement
    return censored_measure


def _cache_speedup(prompts: int) -> Callable[[list[dict[str, Any]]], Measurement]:
    return _censored_by_fill(prompts, _exp2(prompts, lambda ratios: ratios.cached_over_direct,
                                            f"cached over direct req/s, {prompts} prompts"))


def _cache_hit_rate(prompts: int) -> Callable[[list[dict[str, Any]]], Measurement]:
    return _censored_by_fill(prompts, _exp2(prompts, lambda ratios: ratios.hit_rate,
                                            f"response-cache hit rate, {prompts} prompts"))


def _cache_filled_first(records: Sequence[dict[str, Any]], prompts: int) -> bool:
    """Whether the cached cell with ``prompts`` filled its cache before the measured window."""
    return any(r.get("cache_filled_first") for r in done_runs(records)
               if seed_setup_of(r.get("backend")) is _CACHED and r.get("prompts") == prompts)


def _max_latency(prompts: int) -> Callable[[list[dict[str, Any]]], Measurement]:
    measure_ratio = _exp2(prompts, lambda ratios: ratios.max_latency_cached_over_direct,
                          f"max latency cached over direct, {prompts} prompts")

    def measure(records: list[dict[str, Any]]) -> Measurement:
        measurement = measure_ratio(records)
        if _cache_filled_first(records, prompts):
            return Measurement(None, measurement.seed, measurement.figure,
                               "the cache was filled before the measured window, so the window "
                               "held no miss: this claim is about the misses")
        return measurement
    return measure


def _exp3(pick: Callable[[Any], Any], label: str) -> Callable[[list[dict[str, Any]]], Measurement]:
    def measure(records: list[dict[str, Any]]) -> Measurement:
        return _measured(pick(exp3_ratios(records)), pick(exp3_ratios(_seed_records("seed-exp3"))).value, label)
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


def _tpot_change(evidence: Evidence, setup: SeedSetup, low: int, high: int) -> str:
    tpot_low = evidence.mean("server_time_per_output_token_avg_s", setup, vus=low)
    tpot_high = evidence.mean("server_time_per_output_token_avg_s", setup, vus=high)
    if not tpot_low or tpot_high is None:
        return ""
    return (f"; the server's time per output token went from {tpot_low * 1000:.0f} ms to {tpot_high * 1000:.0f} ms "
            f"({tpot_high / tpot_low:.1f}x): each step decodes more sequences on the same cores")


def _explain_speedup_1vu(evidence: Evidence) -> Reason:
    vllm = evidence.mean("output_tok_per_s", setup=_VLLM, vus=1)
    naive = evidence.mean("output_tok_per_s", setup=_NAIVE, vus=1)
    text = f"at 1 VU vLLM produced {_num(vllm)} output tok/s and the naive server {_num(naive)}"
    bound = _no_gpu_bound(evidence)
    if bound:
        cpu = evidence.mean("backend_cpu_percent_avg", setup=_VLLM, vus=1)
        text += (f"; the seed's mechanism (CUDA graphs cutting kernel-launch overhead) exists only on a GPU, "
                 f"and here vLLM's engine decoded on the CPU at {_num(cpu, 0)}% of one core")
    return Reason(text, bound)


def _explain_vllm_growth(evidence: Evidence) -> Reason:
    span = vus_range(evidence.records)
    if span is None:
        return Reason("fewer than two VU counts were measured")
    low, high = span
    tok_low = evidence.mean("output_tok_per_s", setup=_VLLM, vus=low)
    tok_high = evidence.mean("output_tok_per_s", setup=_VLLM, vus=high)
    lat_low = evidence.mean("latency_avg_s", setup=_VLLM, vus=low)
    lat_high = evidence.mean("latency_avg_s", setup=_VLLM, vus=high)
    text = (f"from {low} to {high} VUs vLLM went from {_num(tok_low)} to {_num(tok_high)} output tok/s and its "
            f"average latency from {_num(lat_low, 2)} s to {_num(lat_high, 2)} s"
            + _tpot_change(evidence, _VLLM, low, high))
    bound = _saturation_bound(evidence, f"at {high} VUs", setup=_VLLM, vus=high)
    if bound:
        text += "; batching cannot add throughput once the cores are saturated"
    return Reason(text, bound)


def _explain_naive_growth(evidence: Evidence) -> Reason:
    span = vus_range(evidence.records)
    if span is None:
        return Reason("fewer than two VU counts were measured")
    low, high = span
    lat_low = evidence.mean("latency_avg_s", setup=_NAIVE, vus=low)
    lat_high = evidence.mean("latency_avg_s", setup=_NAIVE, vus=high)
    test_s = evidence.mean("measured_duration_s", setup=_NAIVE, vus=high)
    interrupted = evidence.mean("iterations_interrupted", setup=_NAIVE, vus=high)
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
    sizes = {r.get("vllm_block_size") for r in done_runs(evidence.records)
             if seed_setup_of(r.get("backend")) in (_VLLM, _CACHED)}
    sizes.discard(None)
    return sizes.pop() if len(sizes) == 1 else None


def _prompt_tokens(evidence: Evidence, **match: Any) -> float | None:
    input_rate = evidence.mean("input_tok_per_s", **match)
    req_rate = evidence.mean("req_per_s", **match)
    return input_rate / req_rate if input_rate is not None and req_rate else None


def _explain_prefix(evidence: Evidence) -> Reason:
    tokens = _prompt_tokens(evidence, setup=_VLLM)
    block = _block_size(evidence)
    hit = evidence.mean("prefix_cache_hit_rate", setup=_VLLM)
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
    direct = evidence.mean("req_per_s", setup=_VLLM, prompts=prompts)
    run_s = evidence.mean("duration_s", setup=_CACHED, prompts=prompts)
    return direct, prompts / direct if direct else None, run_s


def _explain_cache(prompts: int) -> Callable[[Evidence], Reason]:
    def explain(evidence: Evidence) -> Reason:
        direct, fill_s, run_s = _fill(evidence, prompts)
        cached = evidence.mean("req_per_s", setup=_CACHED, prompts=prompts)
        hit = evidence.mean("response_cache_hit_rate", setup=_CACHED, prompts=prompts)
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
            seed_direct = setup_mean(_seed_records("seed-exp2"), "req_per_s", _VLLM, prompts=prompts)
            bound = (f"generation speed: {direct:.2f} req/s direct at {_num(evidence.mean('vus', setup=_VLLM), 0)} "
                     f"VUs against the seed's GPU {seed_direct:g} req/s (which stores them in "
                     f"{prompts / seed_direct:.0f} s)" if seed_direct else f"generation speed: {direct:.2f} req/s direct")
        else:
            text += (f", so all could be stored after about {fill_s:.0f} s, leaving the rest of the run to hits: "
                     f"{format_share(hit)} of requests hit, {_num(cached, 0)} req/s cached")
        return Reason(text, bound)
    return explain


def _explain_max_latency(prompts: int) -> Callable[[Evidence], Reason]:
    def explain(evidence: Evidence) -> Reason:
        cached = evidence.mean("latency_max_s", setup=_CACHED, prompts=prompts)
        direct = evidence.mean("latency_max_s", setup=_VLLM, prompts=prompts)
        return Reason(f"the slowest request took {_num(cached, 2)} s through the cache and {_num(direct, 2)} s "
                      "direct: a miss is a full generation at the same concurrency either way")
    return explain


def _explain_exp3_speedup(evidence: Evidence) -> Reason:
    vllm = evidence.mean("req_per_s", setup=_VLLM)
    naive = evidence.mean("req_per_s", setup=_NAIVE)
    vus = evidence.mean("vus", setup=_VLLM)
    text = f"at {_num(vus, 0)} VUs vLLM served {_num(vllm, 2)} req/s and the naive server {_num(naive, 2)}"
    return Reason(text, _saturation_bound(evidence, "under vLLM", setup=_VLLM))


def _explain_exp3_prefix(evidence: Evidence) -> Reason:
    tokens = _prompt_tokens(evidence, setup=_VLLM)
    block = _block_size(evidence)
    requests = evidence.mean("requests_ok", setup=_VLLM)
    vus = evidence.mean("vus", setup=_VLLM)
    run_s = evidence.mean("duration_s", setup=_VLLM)
    text = (f"prompts averaged {_num(tokens, 0)} tokens with block size {block or '?'}; a turn reuses the full "
            "blocks of the system prompt and of its session's earlier turns, so the share grows with the turns each "
            "session reaches within the run")
    if not requests or not vus or not run_s:
        return Reason(text)
    turns_per_vu = requests / vus
    seed_rate = setup_mean(_seed_records("seed-exp3"), "req_per_s", _VLLM)
    seed_turns_per_vu = seed_rate * run_s / vus if seed_rate else None
    text += f": each of the {vus:.0f} VUs completed {turns_per_vu:.1f} turns here"
    bound = None
    if seed_turns_per_vu:
        text += f", about {seed_turns_per_vu:.0f} at the seed's {seed_rate:g} req/s"
        if turns_per_vu < seed_turns_per_vu / 2:
            bound = (f"generation speed: {evidence.mean('req_per_s', setup=_VLLM):.2f} req/s at {vus:.0f} VUs "
                     f"against the seed's GPU {seed_rate:g} req/s, so the later turns of a session, which reuse the "
                     "most, are rarely reached in a run")
    return Reason(text, bound)


def _explain_rare(evidence: Evidence) -> Reason:
    hits = evidence.mean("response_cache_hits", setup=_CACHED)
    requests = evidence.mean("requests_ok", setup=_CACHED)
    return Reason(f"{_num(hits, 0)} hits in {_num(requests, 0)} requests per run: a chat request carries its whole "
                  "conversation, so it repeats only when a session is replayed from the start")


def _explain_cheap(evidence: Evidence) -> Reason:
    cached = evidence.mean("req_per_s", setup=_CACHED)
    direct = evidence.mean("req_per_s", setup=_VLLM)
    text = f"{_num(cached, 2)} req/s through the proxy against {_num(direct, 2)} direct"
    return Reason(text, _cpu_bound(evidence, "through the proxy", setup=_CACHED))


CLAIMS: tuple[Claim, ...] = (
    Claim("exp1-speedup-1vu", "seed-exp1", "At 1 VU vLLM is ~5x faster (CUDA graphs cut CPU launch overhead).",
          "gain", "x", _speedup_at_1_vu, _explain_speedup_1vu),
    Claim("exp1-vllm-throughput-growth", "seed-exp1",
          "From 1 to 32 VUs vLLM's throughput grows ~25x (continuous batching)...",
          "gain", "x", _growth(_VLLM, "output_tok_per_s"), _explain_vllm_growth),
    Claim("exp1-vllm-latency-growth", "seed-exp1", "...while its latency grows only 1.2x.",
          "steady", "x", _growth(_VLLM, "latency_avg_s"), _explain_vllm_growth),
    Claim("exp1-naive-latency-growth", "seed-exp1",
          "The naive server serialises requests, so its latency grows ~10x.",
          "factor", "x", _growth(_NAIVE, "latency_avg_s"), _explain_naive_growth),
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
          "gain", "x", _exp3(lambda ratios: ratios.vllm_over_naive, "vLLM over naive req/s, multi-turn chat"),
          _explain_exp3_speedup),
    Claim("exp3-prefix-hit", "seed-exp3", "The KV prefix cache still hits 82%.",
          "share", "share", _exp3(lambda ratios: ratios.prefix_cache_hit_rate,
                                     "vLLM prefix-cache hit rate, multi-turn chat"),
          _explain_exp3_prefix),
    Claim("exp3-response-cache-rare", "seed-exp3", "The response cache almost never hits in chat (1 of 836)...",
          "rare", "share", _exp3(lambda ratios: ratios.response_cache_hit_rate,
                                    "response-cache hit rate, multi-turn chat"),
          _explain_rare),
    Claim("exp3-response-cache-cheap", "seed-exp3", "...yet costs almost nothing.",
          "cheap", "x", _exp3(lambda ratios: ratios.cached_over_direct,
                                  "vLLM + Redis over vLLM req/s, multi-turn chat"),
          _explain_cheap),
)


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


def _interval_text(measurement: Measurement, unit: str) -> str:
    """' [low, high]', or '' without an interval or when its ends read the same as the figure."""
    if measurement.ours_low is None or measurement.ours_high is None:
        return ""
    low, high = format_ratio(measurement.ours_low, unit), format_ratio(measurement.ours_high, unit)
    return "" if low == high == format_ratio(measurement.ours, unit) else f" [{low}, {high}]"


def _judged(claim: Claim, measurement: Measurement, drift: float) -> str:
    """The verdict over the figure's interval (stretched by the machine's drift for ratios)."""
    low, high = measurement.ours_low, measurement.ours_high
    if claim.unit == "x" and low is not None and high is not None and drift > 1:
        low, high = low / drift, high * drift
    return interval_verdict(lambda value: judge(claim.rule, value, measurement.seed), measurement.ours, low, high)


def _speed_note(records: Sequence[dict[str, Any]], speed_by_run: dict[int, float | None]) -> str:
    off = runs_off_median(records, speed_by_run)
    if not off:
        return ""
    runs = ", ".join(f"#{run_id} ({index:.2f})" for run_id, index in off)
    return f". Measured on a machine more than 10% off its median speed: run{'s' if len(off) > 1 else ''} {runs}"


def evaluate_claims(
    records_by_preset: dict[str, list[dict[str, Any]]], environment: dict[str, Any] | None = None, *,
    drift: float = 1.0, speed_by_run: dict[int, float | None] | None = None,
) -> list[dict[str, Any]]:
    """Every claim in ``CLAIMS`` with our figure and its 95% interval, the seed's, the verdict,
    its rule and a reason computed from the runs' figures and the environment (``bound``: the
    limiting resource, if any).

    A verdict holds only when the whole interval lies on its side of the rule ("inconclusive"
    otherwise); ``drift`` (the A/A checks' factor, >= 1) widens ratio intervals; a figure cut
    off by what the run could hold is "not measurable here", naming the cap; runs measured on a
    machine off its median speed (``speed_by_run``) are named."""
    results = []
    for claim in CLAIMS:
        records = records_by_preset.get(claim.preset, [])
        measurement = claim.measure(records)
        verdict = NOT_MEASURABLE if measurement.censored else _judged(claim, measurement, drift)
        ours_text = format_ratio(measurement.ours, claim.unit) + _interval_text(measurement, claim.unit)
        seed_text = format_ratio(measurement.seed, claim.unit) if measurement.seed is not None else "not stated"
        bound = None
        if verdict == NOT_MEASURED:
            reason = measurement.why_not_measured or (
                "no done run measured this figure" if not done_runs(records)
                else "the runs needed for this figure are missing or did not report it")
        elif verdict == NOT_MEASURABLE:
            explanation = claim.explain(Evidence(records=list(records), environment=dict(environment or {})))
            reason = f"ours {ours_text}, but {measurement.censored}: {explanation.text}"
            bound = explanation.bound
        else:
            against = f"against the seed's {seed_text}" if measurement.seed is not None else "(the seed gives no figure)"
            explanation = claim.explain(Evidence(records=list(records), environment=dict(environment or {})))
            reason = (f"ours {ours_text} {against}{_how_far(measurement, claim.unit)}"
                      f"{_load_caveat(claim.preset, records)}: {explanation.text}")
            if verdict not in (HELD, INCONCLUSIVE) and explanation.bound:
                bound = explanation.bound
                reason += f". Bounded here by {bound}"
                if verdict == NOT_HELD:
                    verdict = NOT_HELD_HARDWARE
            if verdict == INCONCLUSIVE:
                reason += (". The interval spans the rule's threshold"
                           + (f" once widened by the machine's drift (x{drift:.2f})" if drift > 1 else ""))
        reason += _speed_note(records, speed_by_run or {})
        results.append({
            "key": claim.key, "preset": claim.preset, "claim": claim.seed_words, "figure": measurement.figure,
            "ours": measurement.ours, "ours_low": measurement.ours_low, "ours_high": measurement.ours_high,
            "seed": measurement.seed, "ours_text": ours_text, "seed_text": seed_text,
            "verdict": verdict, "rule": claim.rule, "rule_text": VERDICT_RULES[claim.rule]["text"], "reason": reason,
            "bound": bound,
        })
    return results
