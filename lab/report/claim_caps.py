"""Caps on a claim's figure: what the run could hold (the test's length, a cache that cannot fill
within it). A figure so capped is "not measurable here"; the reason names the cap."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lab.analysis.aggregation import done_runs
from lab.analysis.measurability import CENSORED_LATENCY_SHARE
from lab.analysis.seed import setup_mean
from lab.backends import SeedSetup, seed_setup_of
from lab.measurement.results import RunResults
from lab.report.claim_reasons import cache_filled_first

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
