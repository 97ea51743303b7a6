"""Why each claim's figure is what it is: reasons computed from the runs' figures and the
environment, each naming, where one does, the resource of this machine that bounds the figure
(see :mod:`lab.report.claims`, whose claims pair a measurement with one of these), and the caps
on a figure: what the run could hold (the test's length, a cache that cannot fill within it). A
figure so capped is "not measurable here"; the reason names the cap."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lab.analysis.aggregation import done_runs, vus_range
from lab.analysis.measurability import CENSORED_LATENCY_SHARE
from lab.analysis.seed import SERVER_NAMES, seed_records, setup_mean
from lab.backends import SeedSetup, seed_setup_backend, seed_setup_of
from lab.measurement.machine_record import MachineRecord, has_native_bf16
from lab.measurement.results import RunResults
from lab.report.formatting import format_share

_NAIVE, _VLLM, _CACHED = SeedSetup.NAIVE, SeedSetup.VLLM, SeedSetup.VLLM_CACHE
# A machine this busy (backend, k6 and everything else, over all its cores) has no compute left to give.
SATURATED_SHARE = 0.85


@dataclass(frozen=True)
class Evidence:
    """What a claim's reason may use: its experiment's runs (records) and the environment."""

    records: Sequence[Mapping[str, Any]]
    environment: Mapping[str, object]

    def mean(self, figure: str, setup: SeedSetup, **match: Any) -> float | None:
        """Mean ``figure`` of the runs of the backend reproducing the seed's ``setup`` that match ``match``."""
        return setup_mean(self.records, figure, setup, **match)

    @property
    def cores(self) -> int | None:
        cores = self.environment.get("cpu_count")
        return cores if isinstance(cores, int) else None

    @property
    def gpu(self) -> str | None:
        gpu = self.environment.get("gpu_model")
        return gpu if isinstance(gpu, str) else None

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


def _num(value: float | None, digits: int = 1) -> str:
    return "?" if value is None else f"{value:,.{digits}f}"


def _cpu_bound(evidence: Evidence, what: str, **match: Any) -> str | None:
    """'CPU: 96% of 2 cores busy ...' when the machine was saturated while ``match`` ran."""
    busy = evidence.machine_busy_share(**match)
    if busy is None or busy < SATURATED_SHARE:
        return None
    backend_cpu = evidence.mean("backend_cpu_percent_avg", **match)
    return (
        f"CPU: {busy:.0%} of the {evidence.cores} cores were busy {what} (the backend alone "
        f"{_num(backend_cpu, 0)}% of one core)"
    )


def _no_gpu_bound(evidence: Evidence) -> str | None:
    if evidence.gpu or "gpu_model" not in evidence.environment:  # a GPU, or nothing known
        return None
    return f"no GPU: the model runs on {evidence.cpu()}"


def engine_feature(evidence: Evidence, setup: SeedSetup = SeedSetup.VLLM) -> str | None:
    """The CPU feature the engine's dtype was chosen by, as recorded on its runs: "vLLM ran
    float32: this CPU has no AVX-512 BF16"; None where the runs recorded neither."""
    backend = seed_setup_backend(setup)
    for record in done_runs(evidence.records):
        if record.get("backend") != backend:
            continue
        machine = MachineRecord.from_record(record)
        dtype, native = machine.settings().get("dtype"), has_native_bf16(machine)
        if dtype is None or native is None:
            continue
        has = "AVX-512 BF16" if machine.cpu_avx512_bf16 else "AMX"
        feature = f"this CPU has {has}" if native else "this CPU has no AVX-512 BF16 (nor AMX)"
        return f"{SERVER_NAMES.get(setup, backend)} ran {dtype}: {feature}"
    return None


def _joined(*bounds: str | None) -> str | None:
    return "; ".join(bound for bound in bounds if bound) or None


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
    return (
        f"; the server's time per output token went from {tpot_low * 1000:.0f} ms to {tpot_high * 1000:.0f} ms "
        f"({tpot_high / tpot_low:.1f}x): each step decodes more sequences on the same cores"
    )


def explain_speedup_1vu(evidence: Evidence) -> Reason:
    vllm = evidence.mean("output_tok_per_s", setup=_VLLM, vus=1)
    naive = evidence.mean("output_tok_per_s", setup=_NAIVE, vus=1)
    text = f"at 1 VU vLLM produced {_num(vllm)} output tok/s and the naive server {_num(naive)}"
    bound = _no_gpu_bound(evidence)
    if bound:
        cpu = evidence.mean("backend_cpu_percent_avg", setup=_VLLM, vus=1)
        text += (
            f"; the seed's mechanism (CUDA graphs cutting kernel-launch overhead) exists only on a GPU, "
            f"and here vLLM's engine decoded on the CPU at {_num(cpu, 0)}% of one core"
        )
        bound = _joined(bound, engine_feature(evidence))
    return Reason(text, bound)


def explain_vllm_growth(evidence: Evidence) -> Reason:
    span = vus_range(evidence.records)
    if span is None:
        return Reason("fewer than two VU counts were measured")
    low, high = span
    tok_low = evidence.mean("output_tok_per_s", setup=_VLLM, vus=low)
    tok_high = evidence.mean("output_tok_per_s", setup=_VLLM, vus=high)
    lat_low = evidence.mean("latency_avg_s", setup=_VLLM, vus=low)
    lat_high = evidence.mean("latency_avg_s", setup=_VLLM, vus=high)
    text = (
        f"from {low} to {high} VUs vLLM went from {_num(tok_low)} to {_num(tok_high)} output tok/s and its "
        f"average latency from {_num(lat_low, 2)} s to {_num(lat_high, 2)} s" + _tpot_change(evidence, _VLLM, low, high)
    )
    bound = _saturation_bound(evidence, f"at {high} VUs", setup=_VLLM, vus=high)
    if bound:
        text += "; batching cannot add throughput once the cores are saturated"
    return Reason(text, bound)


def explain_naive_growth(evidence: Evidence) -> Reason:
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
    text = (
        f"the naive server answers one request at a time: about {_num(service_s, 1)} s a generation (at {low} "
        f"VU{'s' if low != 1 else ''}), so at {high} VUs a request can queue behind {high - 1} others (about "
        f"{_num((service_s or 0) * (high - 1), 0)} s)"
    )
    if test_s is not None:
        text += (
            f"; the test lasted {_num(test_s, 0)} s, which caps the latency of the requests that completed "
            f"({_num(lat_high, 1)} s on average)"
        )
    if interrupted:
        text += (
            f", and {_num(interrupted, 0)} requests were still queued when k6's graceful stop ended it (counted apart)"
        )
    return Reason(text)


def _block_size(evidence: Evidence) -> int | None:
    sizes = {
        r.get("vllm_block_size")
        for r in done_runs(evidence.records)
        if seed_setup_of(r.get("backend")) in (_VLLM, _CACHED)
    }
    sizes.discard(None)
    return sizes.pop() if len(sizes) == 1 else None


def _prompt_tokens(evidence: Evidence, **match: Any) -> float | None:
    input_rate = evidence.mean("input_tok_per_s", **match)
    req_rate = evidence.mean("req_per_s", **match)
    return input_rate / req_rate if input_rate is not None and req_rate else None


def explain_prefix(evidence: Evidence) -> Reason:
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


def explain_cache(prompts: int) -> Callable[[Evidence], Reason]:
    def explain(evidence: Evidence) -> Reason:
        direct, fill_s, run_s = _fill(evidence, prompts)
        cached = evidence.mean("req_per_s", setup=_CACHED, prompts=prompts)
        hit = evidence.mean("response_cache_hit_rate", setup=_CACHED, prompts=prompts)
        if direct is None or fill_s is None or run_s is None:
            return Reason("the direct or the cached run is missing")
        if cache_filled_first(evidence.records, prompts):
            return Reason(
                f"the cache was filled with all {prompts:,} prompts before the measured {run_s:.0f} s "
                f"(unmeasured: at the {direct:.2f} req/s direct vLLM served, storing them takes at least "
                f"{fill_s:,.0f} s), so the window measured the hit path: {format_share(hit)} of requests "
                f"hit, {_num(cached, 0)} req/s cached"
            )
        # A hit costs milliseconds, so the misses set the pace: each distinct prompt misses once.
        text = (
            f"every distinct prompt misses once at the backend's speed: direct vLLM served {direct:.2f} req/s, so "
            f"storing {prompts:,} prompts takes at least {fill_s:,.0f} s; the run lasted {run_s:.0f} s"
        )
        bound = None
        if fill_s > run_s:
            text += (
                f", so at most {run_s / fill_s:.0%} of the prompts were stored by its end "
                f"(hit rate measured: {format_share(hit)})"
            )
            seed_direct = setup_mean(seed_records("seed-exp2"), "req_per_s", _VLLM, prompts=prompts)
            bound = (
                f"generation speed: {direct:.2f} req/s direct at {_num(evidence.mean('vus', setup=_VLLM), 0)} "
                f"VUs against the seed's GPU {seed_direct:g} req/s (which stores them in "
                f"{prompts / seed_direct:.0f} s)"
                if seed_direct
                else f"generation speed: {direct:.2f} req/s direct"
            )
        else:
            text += (
                f", so all could be stored after about {fill_s:.0f} s, leaving the rest of the run to hits: "
                f"{format_share(hit)} of requests hit, {_num(cached, 0)} req/s cached"
            )
        return Reason(text, bound)

    return explain


def explain_max_latency(prompts: int) -> Callable[[Evidence], Reason]:
    def explain(evidence: Evidence) -> Reason:
        cached = evidence.mean("latency_max_s", setup=_CACHED, prompts=prompts)
        direct = evidence.mean("latency_max_s", setup=_VLLM, prompts=prompts)
        return Reason(
            f"the slowest request took {_num(cached, 2)} s through the cache and {_num(direct, 2)} s "
            "direct: a miss is a full generation at the same concurrency either way"
        )

    return explain


def explain_exp3_speedup(evidence: Evidence) -> Reason:
    vllm = evidence.mean("req_per_s", setup=_VLLM)
    naive = evidence.mean("req_per_s", setup=_NAIVE)
    vus = evidence.mean("vus", setup=_VLLM)
    text = f"at {_num(vus, 0)} VUs vLLM served {_num(vllm, 2)} req/s and the naive server {_num(naive, 2)}"
    bound = _saturation_bound(evidence, "under vLLM", setup=_VLLM)
    return Reason(text, _joined(bound, engine_feature(evidence)) if bound else None)


def explain_exp3_prefix(evidence: Evidence) -> Reason:
    tokens = _prompt_tokens(evidence, setup=_VLLM)
    block = _block_size(evidence)
    requests = evidence.mean("requests_ok", setup=_VLLM)
    vus = evidence.mean("vus", setup=_VLLM)
    run_s = evidence.mean("duration_s", setup=_VLLM)
    text = (
        f"prompts averaged {_num(tokens, 0)} tokens with block size {block or '?'}; a turn reuses the full "
        "blocks of the system prompt and of its session's earlier turns, so the share grows with the turns each "
        "session reaches within the run"
    )
    if not requests or not vus or not run_s:
        return Reason(text)
    turns_per_vu = requests / vus
    seed_rate = setup_mean(seed_records("seed-exp3"), "req_per_s", _VLLM)
    seed_turns_per_vu = seed_rate * run_s / vus if seed_rate else None
    text += f": each of the {vus:.0f} VUs completed {turns_per_vu:.1f} turns here"
    bound = None
    if seed_turns_per_vu:
        text += f", about {seed_turns_per_vu:.0f} at the seed's {seed_rate:g} req/s"
        if turns_per_vu < seed_turns_per_vu / 2:
            bound = (
                f"generation speed: {evidence.mean('req_per_s', setup=_VLLM):.2f} req/s at {vus:.0f} VUs "
                f"against the seed's GPU {seed_rate:g} req/s, so the later turns of a session, which reuse the "
                "most, are rarely reached in a run"
            )
    return Reason(text, bound)


def explain_rare(evidence: Evidence) -> Reason:
    hits = evidence.mean("response_cache_hits", setup=_CACHED)
    requests = evidence.mean("requests_ok", setup=_CACHED)
    return Reason(
        f"{_num(hits, 0)} hits in {_num(requests, 0)} requests per run: a chat request carries its whole "
        "conversation, so it repeats only when a session is replayed from the start"
    )


def explain_cheap(evidence: Evidence) -> Reason:
    cached = evidence.mean("req_per_s", setup=_CACHED)
    direct = evidence.mean("req_per_s", setup=_VLLM)
    text = f"{_num(cached, 2)} req/s through the proxy against {_num(direct, 2)} direct"
    return Reason(text, _cpu_bound(evidence, "through the proxy", setup=_CACHED))


def cache_filled_first(records: Sequence[Mapping[str, Any]], prompts: int) -> bool:
    """Whether the cached cell with ``prompts`` filled its cache before the measured window."""
    return any(
        r.get("cache_filled_first")
        for r in done_runs(records)
        if seed_setup_of(r.get("backend")) is _CACHED and r.get("prompts") == prompts
    )


# A latency is cut off by the test when requests were still waiting at its end and the longest
# finished one took at least CENSORED_LATENCY_SHARE of the test (the adapted scale plans by it too).


def latency_cap(records: Sequence[Mapping[str, Any]], setup: SeedSetup, vus: int) -> str | None:
    """Why ``setup``'s latency at ``vus`` is capped by the test's length, or None when it is not."""
    cell = [r for r in done_runs(records) if seed_setup_of(r.get("backend")) is setup and r.get("vus") == vus]
    for record in cell:
        results = RunResults.of_record(record)
        test_s, longest_s = record.get("duration_s"), results.latency_max_s
        waiting = results.iterations_interrupted or 0
        if test_s and longest_s and waiting and longest_s >= CENSORED_LATENCY_SHARE * test_s:
            return (
                f"the test lasted {test_s:g} s and its longest finished request took {longest_s:.0f} s with "
                f"{waiting} still waiting at the end (run #{record.get('run_id')}): latencies longer than the "
                "test cannot be measured, so the mean is cut off by the test's length"
            )
    return None


def fill_cap(records: Sequence[Mapping[str, Any]], prompts: int) -> str | None:
    """Why the cache cannot hold ``prompts`` distinct answers within the run (each miss costs one
    direct generation), or None when it can."""
    direct = setup_mean(records, "req_per_s", SeedSetup.VLLM, prompts=prompts)
    test_s = next(
        (r.get("duration_s") for r in done_runs(records) if r.get("prompts") == prompts and r.get("duration_s")), None
    )
    if cache_filled_first(records, prompts) or not direct or not test_s or prompts / direct <= test_s:
        return None
    return (
        f"storing {prompts:,} distinct answers takes at least {prompts / direct:,.0f} s at the direct "
        f"{direct:.2f} req/s, and the run lasted {test_s:g} s: the cache cannot fill within the run"
    )
