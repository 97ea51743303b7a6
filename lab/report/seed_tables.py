"""The seed's tables as text, from :mod:`lab.analysis.seed`'s typed rows: the seed's published
table, ours with the seed's columns (mean [95% CI] over repeats, then repeats and failures),
and the cells the Compare page sets side by side. The report and the page write a figure
the same way because both call these."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd

from lab.analysis.seed import (
    EXP2_SETUP_NAMES,
    SEED_EXPERIMENTS,
    SERVER_NAMES,
    SeedFigures,
    SeedTableRow,
    seed_table_rows,
)
from lab.backends import SeedSetup, behind_cache, seed_setup_backend
from lab.measurement.results import RunResults
from lab.report.formatting import MISSING, format_rate, format_seconds, format_share, with_interval

Cells = dict[str, Any]


def _tenths(value: float | None) -> str:
    return format_rate(value, 1)


def _whole(value: float | None) -> str:
    return format_rate(value, 0)


def setup_name(names: Mapping[SeedSetup, str], setup: SeedSetup | None, backend: str) -> str:
    """The seed's name for ``setup`` in ``names``, or the backend's own name where it has none."""
    return names.get(setup, backend) if setup is not None else backend


def key_cells(preset: str, setup: SeedSetup | None, backend: str, load_value: Any) -> Cells:
    """The columns that name a row: its load and its server, as the seed's table names them."""
    if preset == "seed-exp1":
        return {"VUs": load_value, "server": setup_name(SERVER_NAMES, setup, backend)}
    if preset == "seed-exp2":
        return {"PROMPTS": load_value, "set-up": setup_name(EXP2_SETUP_NAMES, setup, backend)}
    return {"server": setup_name(SERVER_NAMES, setup, backend)}


def _exp1_ours(row: SeedTableRow) -> Cells:
    ours = row.ours
    return {
        "throughput (tok/s)": with_interval(ours, "output_tok_per_s", _tenths),
        "req/s": with_interval(ours, "req_per_s", format_rate),
        "avg latency": with_interval(ours, "latency_avg_s", format_seconds),
        "p95 latency": with_interval(ours, "latency_p95_s", format_seconds),
        # The seed's throughput is k6's (whole test, drain included); this one, the load window only.
        "steady throughput (tok/s)": with_interval(ours, "steady_output_tok_per_s", _tenths),
    }


def _exp2_ours(row: SeedTableRow) -> Cells:
    ours = row.ours
    return {
        "req/s": with_interval(ours, "req_per_s", format_rate),
        "avg latency": with_interval(ours, "latency_avg_s", format_seconds),
        "p95 latency": with_interval(ours, "latency_p95_s", format_seconds),
        "max latency": with_interval(ours, "latency_max_s", format_seconds),
        "cache hit rate": format_share(RunResults.of_record(ours).response_cache_hit_rate),
    }


def _exp3_ours(row: SeedTableRow) -> Cells:
    ours = row.ours
    return {
        "req/s": with_interval(ours, "req_per_s", format_rate),
        "output tok/s": with_interval(ours, "output_tok_per_s", _tenths),
        "input tok/s": with_interval(ours, "input_tok_per_s", _tenths),
        "avg latency": with_interval(ours, "latency_avg_s", format_seconds),
        "p95 latency": with_interval(ours, "latency_p95_s", format_seconds),
        # The naive server has no prefix cache; only a backend behind the response cache has Redis hits.
        "vLLM prefix hit": format_share(RunResults.of_record(ours).prefix_cache_hit_rate)
        if row.setup is not SeedSetup.NAIVE
        else MISSING,
        "Redis hit": format_share(RunResults.of_record(ours).response_cache_hit_rate)
        if behind_cache(row.backend)
        else MISSING,
    }


def _exp1_seed(seed: SeedFigures) -> Cells:
    return {
        "throughput (tok/s)": _tenths(seed.output_tok_per_s),
        "req/s": format_rate(seed.req_per_s),
        "avg latency": format_seconds(seed.latency_avg_s),
        "p95 latency": format_seconds(seed.latency_p95_s),
    }


def _exp2_seed(seed: SeedFigures) -> Cells:
    return {
        "req/s": format_rate(seed.req_per_s),
        "avg latency": format_seconds(seed.latency_avg_s),
        "p95 latency": format_seconds(seed.latency_p95_s),
        "max latency": format_seconds(seed.latency_max_s),
    }


def _exp3_seed(seed: SeedFigures) -> Cells:
    return {
        "req/s": format_rate(seed.req_per_s),
        "output tok/s": _whole(seed.output_tok_per_s),
        "input tok/s": _whole(seed.input_tok_per_s),
        "avg latency": format_seconds(seed.latency_avg_s),
        "p95 latency": format_seconds(seed.latency_p95_s),
        "vLLM prefix hit": format_share(seed.prefix_cache_hit_rate),
        "Redis hit": seed.response_cache_hits_as_written or MISSING,
    }


_OURS: dict[str, Callable[[SeedTableRow], Cells]] = {
    "seed-exp1": _exp1_ours,
    "seed-exp2": _exp2_ours,
    "seed-exp3": _exp3_ours,
}
_SEED: dict[str, Callable[[SeedFigures], Cells]] = {
    "seed-exp1": _exp1_seed,
    "seed-exp2": _exp2_seed,
    "seed-exp3": _exp3_seed,
}


def our_cells(preset: str, row: SeedTableRow) -> Cells:
    """A row of ours: the seed's columns (mean [95% CI]), then repeats, failed and interrupted requests."""
    load = SEED_EXPERIMENTS[preset].load
    return {
        **key_cells(preset, row.setup, row.backend, row.ours.get(load) if load else None),
        **_OURS[preset](row),
        "repeats": row.ours["n"],
        "failed requests": RunResults.of_record(row.ours).requests_failed,
        "interrupted at the end": row.ours["requests_interrupted"],
    }


def seed_cells(preset: str, seed: SeedFigures | None) -> Cells:
    """The seed's figures of a row under the seed's column names; "–" throughout where it has no row."""
    if seed is None:
        return {column: MISSING for column in _SEED[preset](SeedFigures(SeedSetup.NAIVE))}
    return _SEED[preset](seed)


def seed_table(preset: str) -> pd.DataFrame:
    """The seed's published table, with the seed's columns."""
    if preset not in SEED_EXPERIMENTS:
        raise ValueError(f"no seed table for {preset!r}")
    experiment = SEED_EXPERIMENTS[preset]
    return pd.DataFrame(
        [
            {
                **key_cells(
                    preset,
                    seed.setup,
                    seed_setup_backend(seed.setup),
                    getattr(seed, experiment.load) if experiment.load else None,
                ),
                **seed_cells(preset, seed),
            }
            for seed in experiment.published
        ]
    )


def our_table(preset: str, records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Our table for ``preset``: the seed's columns (mean [95% CI] over repeats), repeats and failed requests."""
    return pd.DataFrame([our_cells(preset, row) for row in seed_table_rows(preset, records)])
