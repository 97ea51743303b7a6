"""The report's tables: the seed's, ours with the seed's columns, ratios, the open questions
(server-side figures, resources, cost) and the runs that failed or warned."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from lab.analysis import compare
from lab.analysis.compare import (
    SEED_EXP1,
    SEED_EXP2,
    SEED_EXP3,
    SEED_SERVER_NAMES,
    aggregate,
    exp1_ratios,
    exp2_ratios,
    exp3_ratios,
    format_rate,
    format_seconds,
    format_share,
)
from lab.report.claims import SEED_EXP2_HIT_RATE, as_records, format_value, seed_exp1_over, vus_range

def seed_table(preset: str) -> pd.DataFrame:
    """The seed's published table, with the seed's columns."""
    if preset == "seed-exp1":
        return pd.DataFrame([{
            "VUs": r["vus"], "server": SEED_SERVER_NAMES[r["backend"]],
            "throughput (tok/s)": format_rate(r["output_tok_per_s"], 1), "req/s": format_rate(r["req_per_s"]),
            "avg latency": format_seconds(r["latency_avg_s"]), "p95 latency": format_seconds(r["latency_p95_s"]),
        } for r in SEED_EXP1])
    if preset == "seed-exp2":
        set_up = {"vllm": "vLLM direct", "vllm+cache": "vLLM + Redis"}
        return pd.DataFrame([{
            "PROMPTS": r["prompts"], "set-up": set_up[r["backend"]], "req/s": format_rate(r["req_per_s"]),
            "avg latency": format_seconds(r["latency_avg_s"]), "p95 latency": format_seconds(r["latency_p95_s"]),
            "max latency": format_seconds(r["latency_max_s"]),
        } for r in SEED_EXP2])
    if preset == "seed-exp3":
        return pd.DataFrame([{
            "server": SEED_SERVER_NAMES[r["backend"]], "req/s": format_rate(r["req_per_s"]),
            "output tok/s": format_rate(r["output_tok_per_s"], 0), "input tok/s": format_rate(r["input_tok_per_s"], 0),
            "avg latency": format_seconds(r["latency_avg_s"]), "p95 latency": format_seconds(r["latency_p95_s"]),
            "vLLM prefix hit": format_share(r["prefix_cache_hit_rate"]),
            "Redis hit": "1/836" if r["backend"] == "vllm+cache" else "–",
        } for r in SEED_EXP3])
    raise ValueError(f"no seed table for {preset!r}")


def our_table(preset: str, records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Our table for ``preset``: the seed's columns (mean [95% CI] over repeats), repeats and failed requests."""
    frame = compare.SEED_TABLES[preset](records)
    return frame[[column for column in frame.columns if not column.startswith("seed ")]]


def ratio_rows(preset: str, records: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    """The ratios the seed drew its conclusions from, ours beside the seed's."""
    rows: list[dict[str, str]] = []
    if preset == "seed-exp1":
        ours, seed = exp1_ratios(records), exp1_ratios(as_records(SEED_EXP1))
        vus_values = sorted(set(ours["vllm_over_naive_throughput"]) | set(seed["vllm_over_naive_throughput"]))
        for vus in vus_values:
            rows.append({"figure": f"vLLM over naive output tok/s at {vus} VU{'s' if vus != 1 else ''}",
                         "ours": format_value(ours["vllm_over_naive_throughput"].get(vus), "x"),
                         "seed": format_value(seed["vllm_over_naive_throughput"].get(vus), "x")})
        span = vus_range(records)
        low, high = span if span else (1, 32)
        seed_rows = seed_exp1_over(low, high)
        seed_span = exp1_ratios(seed_rows)
        seed_low, seed_high = min(r["vus"] for r in seed_rows), max(r["vus"] for r in seed_rows)
        for backend in ("vllm", "naive"):
            for figure, what in (("throughput", "output tok/s"), ("latency", "avg latency")):
                rows.append({
                    "figure": f"{SEED_SERVER_NAMES[backend]} {what} growth, {low} to {high} VUs"
                              + (f" (seed: {seed_low} to {seed_high})" if (seed_low, seed_high) != (low, high) else ""),
                    "ours": format_value(ours.get(f"{backend}_{figure}_growth_{low}_to_{high}_vus"), "x"),
                    "seed": format_value(seed_span.get(f"{backend}_{figure}_growth_{seed_low}_to_{seed_high}_vus"), "x"),
                })
        rows.append({"figure": "vLLM prefix-cache hit rate",
                     "ours": format_share(compare.mean_of(records, "prefix_cache_hit_rate", backend="vllm")),
                     "seed": "not stated ('very high')"})
    elif preset == "seed-exp2":
        ours, seed = exp2_ratios(records), exp2_ratios(as_records(SEED_EXP2))
        for prompts in sorted(set(ours) | set(seed)):
            mine, theirs = ours.get(prompts, {}), seed.get(prompts, {})
            rows.append({"figure": f"cached over direct req/s, {prompts} prompts",
                         "ours": format_value(mine.get("cached_over_direct_req_per_s"), "x"),
                         "seed": format_value(theirs.get("cached_over_direct_req_per_s"), "x")})
            rows.append({"figure": f"response-cache hit rate, {prompts} prompts",
                         "ours": format_share(mine.get("cache_hit_rate")),
                         "seed": format_share(SEED_EXP2_HIT_RATE.get(prompts)) if prompts in SEED_EXP2_HIT_RATE
                         else "not stated"})
            rows.append({"figure": f"max latency cached over direct, {prompts} prompts",
                         "ours": format_value(mine.get("max_latency_cached_over_direct"), "x"),
                         "seed": format_value(theirs.get("max_latency_cached_over_direct"), "x")})
    elif preset == "seed-exp3":
        ours, seed = exp3_ratios(records), exp3_ratios(as_records(SEED_EXP3))
        for key, label, unit in (
            ("vllm_over_naive_req_per_s", "vLLM over naive req/s", "x"),
            ("vllm_prefix_cache_hit_rate", "vLLM prefix-cache hit rate", "share"),
            ("response_cache_hit_rate", "response-cache (Redis) hit rate", "share"),
            ("cached_over_direct_req_per_s", "vLLM + Redis over vLLM req/s", "x"),
        ):
            rows.append({"figure": label, "ours": format_value(ours.get(key), unit),
                         "seed": format_value(seed.get(key), unit)})
    return rows


OPEN_FIGURES: tuple[tuple[str, str, Callable[[float | None], str]], ...] = (
    ("server_ttft_avg_s", "server TTFT (avg)", format_seconds),
    ("server_time_per_output_token_avg_s", "time per output token (avg)", format_seconds),
    ("backend_cpu_percent_avg", "backend CPU % of a core (avg)", lambda v: format_rate(v, 0)),
    ("backend_rss_max_mb", "backend RSS (max MiB)", lambda v: format_rate(v, 0)),
    ("k6_cpu_percent_avg", "k6 CPU % of a core (avg)", lambda v: format_rate(v, 0)),
    ("gpu_utilization_avg_percent", "GPU utilisation % (avg)", lambda v: format_rate(v, 0)),
    ("other_cpu_percent_avg", "other processes' CPU % of a core (avg)", lambda v: format_rate(v, 0)),
    ("steady_output_tok_per_s", "steady output tok/s (load window)", lambda v: format_rate(v, 1)),
)
# Client-side streaming latency: shown only where some run streamed (the seed's requests do not).
STREAMED_FIGURES: tuple[tuple[str, str, Callable[[float | None], str]], ...] = (
    ("ttft_p95_s", "client TTFT p95 (streamed)", format_seconds),
    ("tpot_avg_s", "client time per output token (streamed, avg)", format_seconds),
)


def open_questions_table(
    records_by_preset: dict[str, list[dict[str, Any]]], *, price_per_hour: float | None = None
) -> pd.DataFrame:
    """Per cell: server-side TTFT and time per output token, resource use, failures, mean [95% CI]."""
    rows = []
    streamed = [figure for figure in STREAMED_FIGURES
                if any(r.get(figure[0]) is not None for records in records_by_preset.values() for r in records)]
    shown = (*OPEN_FIGURES, *streamed)
    figures = [name for name, _, _ in shown] + ["output_tok_per_s"]
    for preset, records in records_by_preset.items():
        for row in sorted(aggregate(records, ("backend", "vus", "prompts", "workload"), figures),
                          key=lambda r: (str(r["backend"]), r["vus"] or 0, r["prompts"] or 0)):
            cell = {"experiment": preset, "server": SEED_SERVER_NAMES.get(row["backend"], row["backend"]),
                    "VUs": row["vus"], "PROMPTS": row["prompts"] if row["prompts"] is not None else "–"}
            for name, label, formatter in shown:
                cell[label] = compare.with_interval(row, name, formatter)
            if price_per_hour is not None:
                cost = compare.cost_per_million_output_tokens(row.get("output_tok_per_s"), price_per_hour)
                cell[f"cost per 1M output tokens (at {price_per_hour:g}/h)"] = format_rate(cost)
            cell["repeats"] = row["n"]
            cell["failed requests"] = row["requests_failed"]
            rows.append(cell)
    return pd.DataFrame(rows)


def problem_rows(records_by_preset: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Runs that did not finish ``done`` and done runs with a load-generator warning."""
    rows = []
    for preset, records in records_by_preset.items():
        for r in records:
            problem = None
            if r.get("status") != "done":
                problem = (r.get("status_reason") or "no reason recorded").strip().splitlines()[0][:300]
            elif r.get("measurement_warnings"):
                problem = "warning: " + str(r["measurement_warnings"])[:300]
            if problem:
                rows.append({"run": r.get("run_id"), "experiment": preset, "server": r.get("backend"),
                             "cell": r.get("cell_label"), "repeat": r.get("repeat_index"),
                             "status": r.get("status"), "reason": problem})
    return rows


def environment_table(environment: dict[str, Any]) -> pd.DataFrame:
    """What the runs measured on: hardware, software, model, lab commit."""
    packages = environment.get("packages") or {}
    rows = [
        ("CPU", f"{environment.get('cpu_model') or 'unknown'}, {environment.get('cpu_count') or '?'} cores"),
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


def scaling_table(experiments_meta: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """Per experiment: its scale, seconds per cell, VUs, repeats and how it differs from the seed."""
    rows = []
    for preset, meta in experiments_meta.items():
        rows.append({
            "experiment": preset, "scale": meta.get("scale", "full"),
            "seconds per cell": meta.get("duration_s", "–"),
            "VUs": ", ".join(str(v) for v in meta.get("vus", [])) or "–",
            "repeats per cell": meta.get("repeats", "–"),
            "lab experiment ids": ", ".join(f"#{i}" for i in meta.get("ids", [])) or "–",
            "wall time / measured": f"{meta['wall_s'] / meta['measured_s']:.2f}"
            if meta.get("wall_s") and meta.get("measured_s") else "–",
            "how it differs from the seed": meta.get("scale_note") or "the seed's set-up",
        })
    return pd.DataFrame(rows)
