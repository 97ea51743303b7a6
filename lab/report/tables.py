"""The report's tables: the seed's, ours with the seed's columns, ratios, the open questions
(server-side figures, resources, cost) and the runs that failed or warned."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd

from db.documents import section_of
from db.figures import RunFigures, Unit, figure_by
from lab.analysis.aggregation import aggregate, vus_range
from lab.analysis.cost import cost_per_million_output_tokens
from lab.analysis.seed import SEED_EXPERIMENTS, SERVER_NAMES, exp1_ratios, exp2_ratios, exp3_ratios, seed_growth
from lab.backends import CACHE_SUFFIX, SeedSetup, seed_setup_of
from lab.measurement.machine_record import NOT_RECORDED, MachineRecord, settings_by_backend
from lab.measurement.results import RunResults
from lab.report.experiment_meta import ExperimentMeta
from lab.report.formatting import format_rate, format_ratio, format_seconds, ratio_with_bounds, with_interval
from lab.report.seed_tables import our_table, seed_table, setup_name

__all__ = [
    "cell_scaling_table",
    "environment_table",
    "open_questions_table",
    "our_table",
    "problem_rows",
    "ratio_rows",
    "scale_name",
    "scaling_table",
    "seed_table",
]


def ours_text(found: Any, unit: str) -> str:
    """A typed ratio or hit rate with its 95% interval (no interval under two repeats a side)."""
    if found is None:
        return format_ratio(None, unit)
    interval = getattr(found, "interval", None)
    low, high = (
        (interval.ci95_low, interval.ci95_high)
        if interval is not None
        else (getattr(found, "ci95_low", None), getattr(found, "ci95_high", None))
    )
    return ratio_with_bounds(found.value, low, high, unit)


def _exp1_ratio_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    ours, seed = exp1_ratios(records), exp1_ratios(SEED_EXPERIMENTS["seed-exp1"].records())
    rows = []
    for vus in sorted({r.vus for r in (*ours.speedups, *seed.speedups) if r.vus is not None}):
        mine = next((r for r in ours.speedups if r.vus == vus), None)
        rows.append(
            {
                "figure": f"vLLM over naive output tok/s at {vus} VU{'s' if vus != 1 else ''}",
                "ours": ours_text(mine, "x"),
                "seed": format_ratio(seed.speedup_at(vus), "x"),
            }
        )
    low, high = vus_range(records) or (1, 32)
    for setup in (SeedSetup.VLLM, SeedSetup.NAIVE):
        for figure, what in (("output_tok_per_s", "output tok/s"), ("latency_avg_s", "avg latency")):
            growth, theirs = ours.growth_of(setup, figure), seed_growth(setup, figure, low, high)
            span = (theirs.low_vus, theirs.high_vus)
            rows.append(
                {
                    "figure": f"{SERVER_NAMES[setup]} {what} growth, {low} to {high} VUs"
                    + (f" (seed: {span[0]} to {span[1]})" if span != (low, high) else ""),
                    "ours": ours_text(growth, "x"),
                    "seed": format_ratio(theirs.value, "x"),
                }
            )
    rows.append(
        {
            "figure": "vLLM prefix-cache hit rate",
            "ours": ours_text(ours.prefix_cache_hit_rate, "share"),
            "seed": "not stated ('very high')",
        }
    )
    return rows


def _exp2_ratio_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    ours, seed = exp2_ratios(records), exp2_ratios(SEED_EXPERIMENTS["seed-exp2"].records())
    rows = []
    for prompts in sorted(set(ours) | set(seed)):
        mine, theirs = ours.get(prompts), seed.get(prompts)
        pairs: tuple[tuple[str, str, Callable[[Any], Any]], ...] = (
            ("cached over direct req/s", "x", lambda r: r.cached_over_direct),
            ("response-cache hit rate", "share", lambda r: r.hit_rate),
            ("max latency cached over direct", "x", lambda r: r.max_latency_cached_over_direct),
        )
        for label, unit, found in pairs:
            seed_value = found(theirs).value if theirs else None
            # The seed states its hit rate for 1,000 prompts only; a missing ratio is "–" as everywhere.
            seed_text = "not stated" if unit == "share" and seed_value is None else format_ratio(seed_value, unit)
            rows.append(
                {
                    "figure": f"{label}, {prompts} prompts",
                    "ours": ours_text(found(mine) if mine else None, unit),
                    "seed": seed_text,
                }
            )
    return rows


def _exp3_ratio_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    ours, seed = exp3_ratios(records), exp3_ratios(SEED_EXPERIMENTS["seed-exp3"].records())
    found_by: tuple[tuple[str, str, Callable[[Any], Any]], ...] = (
        ("vLLM over naive req/s", "x", lambda r: r.vllm_over_naive),
        ("vLLM prefix-cache hit rate", "share", lambda r: r.prefix_cache_hit_rate),
        ("response-cache (Redis) hit rate", "share", lambda r: r.response_cache_hit_rate),
        ("vLLM + Redis over vLLM req/s", "x", lambda r: r.cached_over_direct),
    )
    return [
        {"figure": label, "ours": ours_text(found(ours), unit), "seed": format_ratio(found(seed).value, unit)}
        for label, unit, found in found_by
    ]


_RATIO_ROWS = {"seed-exp1": _exp1_ratio_rows, "seed-exp2": _exp2_ratio_rows, "seed-exp3": _exp3_ratio_rows}


def ratio_rows(preset: str, records: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """The ratios the seed drew its conclusions from, ours beside the seed's."""
    return _RATIO_ROWS[preset](records) if preset in _RATIO_ROWS else []


def _header(select: Callable[[RunFigures], object]) -> str:
    """A figure's header in the report: its label, and its unit where the value is written without one."""
    declared = figure_by(select)
    return declared.label if declared.unit is Unit.SECONDS else declared.header


def _whole(value: float | None) -> str:
    return format_rate(value, 0)


# (figure, how its value is written): the header is the figure's own (db.figures).
OPEN_FIGURES: tuple[tuple[Callable[[RunFigures], object], Callable[[float | None], str]], ...] = (
    (lambda f: f.server_ttft_avg_s, format_seconds),
    (lambda f: f.server_time_per_output_token_avg_s, format_seconds),
    (lambda f: f.backend_cpu_percent_avg, _whole),
    (lambda f: f.backend_rss_max_mb, _whole),
    (lambda f: f.k6_cpu_percent_avg, _whole),
    (lambda f: f.gpu_utilization_avg_percent, _whole),
    (lambda f: f.other_cpu_percent_avg, _whole),
    (lambda f: f.steady_output_tok_per_s, lambda v: format_rate(v, 1)),
)
# Client-side streaming latency: shown only where some run streamed (the seed's requests do not).
STREAMED_FIGURES: tuple[tuple[Callable[[RunFigures], object], Callable[[float | None], str]], ...] = (
    (lambda f: f.ttft_p95_s, format_seconds),
    (lambda f: f.tpot_avg_s, format_seconds),
)


def open_questions_table(
    records_by_preset: Mapping[str, Sequence[Mapping[str, Any]]], *, price_per_hour: float | None = None
) -> pd.DataFrame:
    """Per cell: server-side TTFT and time per output token, resource use, failures, mean [95% CI]."""
    rows = []
    named = [
        (figure_by(select).name, _header(select), formatter, select in dict(STREAMED_FIGURES))
        for select, formatter in (*OPEN_FIGURES, *STREAMED_FIGURES)
    ]
    shown = [
        (name, label, formatter)
        for name, label, formatter, streamed in named
        if not streamed or any(r.get(name) is not None for records in records_by_preset.values() for r in records)
    ]
    figures = [name for name, _, _ in shown] + ["output_tok_per_s"]
    for preset, records in records_by_preset.items():
        for row in sorted(
            aggregate(records, ("backend", "vus", "prompts", "workload"), figures),
            key=lambda r: (str(r["backend"]), r["vus"] or 0, r["prompts"] or 0),
        ):
            cell = {
                "experiment": preset,
                "server": setup_name(SERVER_NAMES, seed_setup_of(row["backend"]), row["backend"]),
                "VUs": row["vus"],
                "PROMPTS": row["prompts"] if row["prompts"] is not None else "–",
            }
            for name, label, formatter in shown:
                cell[label] = with_interval(row, name, formatter)
            if price_per_hour is not None:
                cost = cost_per_million_output_tokens(RunResults.of_record(row).output_tok_per_s, price_per_hour)
                cell[f"cost per 1M output tokens (at {price_per_hour:g}/h)"] = format_rate(cost)
            cell["repeats"] = row["n"]
            cell["failed requests"] = RunResults.of_record(row).requests_failed
            rows.append(cell)
    return pd.DataFrame(rows)


def problem_rows(records_by_preset: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Runs that did not finish ``done`` and done runs with a load-generator warning."""
    rows = []
    for preset, records in records_by_preset.items():
        for r in records:
            problem = None
            if r.get("status") != "done":
                problem = (r.get("status_reason") or "no reason recorded").strip().splitlines()[0][:300]
            elif warnings := RunResults.of_record(r).measurement_warnings:
                problem = "warning: " + str(warnings)[:300]
            if problem:
                rows.append(
                    {
                        "run": r.get("run_id"),
                        "experiment": preset,
                        "server": r.get("backend"),
                        "cell": r.get("cell_label"),
                        "repeat": r.get("repeat_index"),
                        "status": r.get("status"),
                        "reason": problem,
                    }
                )
    return rows


def machine_rows(records: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """The hardware the backends chose their settings by, over the runs: CPU family, instruction
    sets, the fixed-kernel speed and each backend's resolved settings ("not recorded" for runs
    from before the lab recorded them, never a guess)."""
    machines = [(str(r.get("backend")), MachineRecord.from_record(r)) for r in records]
    recorded = [machine for _, machine in machines if machine.recorded]

    def distinct(values: list[str]) -> str:
        return " / ".join(dict.fromkeys(values)) or NOT_RECORDED

    speeds = [m.reference_kernel_gflops for m in recorded if m.reference_kernel_gflops is not None]
    speed = (
        (f"{min(speeds):.1f}-{max(speeds):.1f} GFLOP/s" if min(speeds) != max(speeds) else f"{speeds[0]:.1f} GFLOP/s")
        if speeds
        else NOT_RECORDED
    )
    rows = [
        ("CPU family", distinct([m.cpu_family for m in recorded if m.cpu_family])),
        ("instruction sets", distinct([m.instruction_sets_text() for m in recorded])),
        ("fixed-kernel speed (one core, float32 matrix products)", speed),
    ]
    settings = settings_by_backend([(backend.removesuffix(CACHE_SUFFIX), m) for backend, m in machines])
    for backend in dict.fromkeys(backend.removesuffix(CACHE_SUFFIX) for backend, _ in machines):
        rows.append((f"{backend}: resolved settings", settings.get(backend, NOT_RECORDED)))
    return rows


def environment_table(environment: Mapping[str, object], records: Sequence[Mapping[str, Any]] = ()) -> pd.DataFrame:
    """What the runs measured on: hardware (with what the backends chose by), software, model, lab commit."""
    packages = section_of(environment, "packages")
    rows = [
        ("CPU", f"{environment.get('cpu_model') or 'unknown'}, {environment.get('cpu_count') or '?'} cores"),
        *machine_rows(records),
        ("memory", f"{environment.get('memory_gib') or '?'} GiB"),
        ("GPU", environment.get("gpu_model") or "none"),
        ("platform", environment.get("platform") or "unknown"),
        ("Python", environment.get("python") or "unknown"),
        ("packages", ", ".join(f"{name} {version}" for name, version in sorted(packages.items())) or "unknown"),
        ("k6", environment.get("k6_version") or "unknown"),
        ("model", environment.get("model") or "unknown"),
        ("model config sha256", environment.get("config_sha256") or "–"),
        ("lab git commit", environment.get("lab_git_commit") or "unknown"),
    ]
    return pd.DataFrame(rows, columns=["", "here"])


def scale_name(stored: Any) -> str:
    """The scale's name as the CLI spells it (seed, adapted, quick); "full" was the seed's."""
    return "seed" if stored in (None, "full") else str(stored)


def cell_scaling_table(experiments_meta: dict[str, ExperimentMeta]) -> pd.DataFrame:
    """Per cell the adapted scale changed or could not help: "240 s instead of 60 s, because ..."."""
    rows = [
        {"experiment": preset, "cell": label, "seconds": cell.get("why") or f"{cell.get('duration_s'):g} s"}
        for preset, meta in experiments_meta.items()
        for label, cell in (meta.get("cell_scales") or {}).items()
    ]
    return pd.DataFrame(rows)


def scaling_table(experiments_meta: dict[str, ExperimentMeta]) -> pd.DataFrame:
    """Per experiment: its scale, seconds per cell, VUs, repeats and how it differs from the seed."""
    rows = []
    for preset, meta in experiments_meta.items():
        rows.append(
            {
                "experiment": preset,
                "scale": scale_name(meta.get("scale")),
                "seconds per cell": meta.get("duration_s", "–"),
                "VUs": ", ".join(str(v) for v in meta.get("vus", [])) or "–",
                "repeats per cell": meta.get("repeats", "–"),
                "lab experiment ids": ", ".join(f"#{i}" for i in meta.get("ids", [])) or "–",
                "wall time / measured": f"{meta['wall_s'] / meta['measured_s']:.2f}"
                if meta.get("wall_s") and meta.get("measured_s")
                else "–",
                "how it differs from the seed": meta.get("scale_note") or "the seed's set-up",
            }
        )
    return pd.DataFrame(rows)
