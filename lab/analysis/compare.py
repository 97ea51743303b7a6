"""Comparisons: run records, the seed's tables regenerated beside the seed's figures,
ratios, cost per token, and CSV that is safe to open in a spreadsheet."""

from __future__ import annotations

import csv
import io
import math
import statistics
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from lab.measurement.results import RESULT_FIELDS
from lab.analysis.statistics import mean_interval, welch_test
from lab.execution.worker_identity import hardware_summary

# The seed's published figures (../shared/reference/seed-experiments.md), latencies in seconds.
SEED_EXP1 = [
    {"vus": 1, "backend": "naive", "output_tok_per_s": 27.0, "req_per_s": 0.21, "latency_avg_s": 4.73, "latency_p95_s": 6.51},
    {"vus": 1, "backend": "vllm", "output_tok_per_s": 139.0, "req_per_s": 1.09, "latency_avg_s": 0.92, "latency_p95_s": 0.96},
    {"vus": 8, "backend": "naive", "output_tok_per_s": 25.6, "req_per_s": 0.20, "latency_avg_s": 31.08, "latency_p95_s": 43.39},
    {"vus": 8, "backend": "vllm", "output_tok_per_s": 1045.0, "req_per_s": 8.17, "latency_avg_s": 0.98, "latency_p95_s": 1.05},
    {"vus": 32, "backend": "naive", "output_tok_per_s": 19.9, "req_per_s": 0.16, "latency_avg_s": 46.89, "latency_p95_s": 81.0},
    {"vus": 32, "backend": "vllm", "output_tok_per_s": 3463.0, "req_per_s": 27.05, "latency_avg_s": 1.18, "latency_p95_s": 1.25},
]
SEED_EXP2 = [
    {"prompts": 50, "backend": "vllm", "req_per_s": 27.4, "latency_avg_s": 1.16, "latency_p95_s": 1.20, "latency_max_s": 1.42},
    {"prompts": 50, "backend": "vllm+cache", "req_per_s": 2811.0, "latency_avg_s": 0.0113, "latency_p95_s": 0.0144, "latency_max_s": 1.43},
    {"prompts": 1000, "backend": "vllm", "req_per_s": 27.1, "latency_avg_s": 1.17, "latency_p95_s": 1.23, "latency_max_s": 1.46},
    {"prompts": 1000, "backend": "vllm+cache", "req_per_s": 944.0, "latency_avg_s": 0.0338, "latency_p95_s": 0.0151, "latency_max_s": 1.58},
]
SEED_EXP3 = [
    {"backend": "naive", "req_per_s": 0.29, "output_tok_per_s": 27.0, "input_tok_per_s": 276.0, "latency_avg_s": 48.2,
     "latency_p95_s": 87.0, "prefix_cache_hit_rate": None, "response_cache_hit_rate": None},
    {"backend": "vllm", "req_per_s": 11.8, "output_tok_per_s": 1195.0, "input_tok_per_s": 14049.0, "latency_avg_s": 2.53,
     "latency_p95_s": 4.66, "prefix_cache_hit_rate": 0.821, "response_cache_hit_rate": None},
    {"backend": "vllm+cache", "req_per_s": 11.9, "output_tok_per_s": 1213.0, "input_tok_per_s": 14144.0, "latency_avg_s": 2.55,
     "latency_p95_s": 4.53, "prefix_cache_hit_rate": 0.821, "response_cache_hit_rate": 1 / 836},
]
SEED_SERVER_NAMES = {"naive": "Transformers", "vllm": "vLLM", "vllm+cache": "vLLM + Redis"}

# A run as a record: who and what it was, then its results (one field list: lab.measurement.results).
RECORD_FIELDS: tuple[str, ...] = (
    "run_id", "experiment_id", "experiment", "preset", "cell_label", "repeat_index", "status", "status_reason",
    "backend", "model", "workload", "load_kind", "vus", "arrival_rate_per_s", "prompts", "duration_s", "max_tokens",
    "random_seed", "tags", "created_at", "started_at", "finished_at", "worker_name", "hardware",
    *RESULT_FIELDS,
)
FORMULA_STARTS = frozenset("=+-@")
# Look-alikes NFKC leaves alone that some spreadsheets still read as a sign.
FORMULA_LOOK_ALIKES = frozenset("\u2212\u2796\u2795\u2010\u2011\u2012\u2013\u2014\u2015")


def run_record(run: Any) -> dict[str, Any]:
    """A run (ORM object) as a flat dict of RECORD_FIELDS."""
    record: dict[str, Any] = {}
    for name in RECORD_FIELDS:
        if name == "run_id":
            record[name] = run.id
        elif name == "experiment":
            record[name] = run.experiment.name if run.experiment else None
        elif name == "preset":
            record[name] = run.experiment.preset if run.experiment else None
        elif name == "hardware":
            record[name] = hardware_summary(run.worker_hardware) or None
        else:
            value = getattr(run, name)
            record[name] = value.isoformat() if hasattr(value, "isoformat") else value
    return record


def _is_blank_or_control(char: str) -> bool:
    # Whitespace, line breaks, controls and invisible formatting (zero-width, BOM): a
    # spreadsheet skips or keeps them, and the formula after them still runs.
    return char.isspace() or unicodedata.category(char) in ("Cc", "Cf", "Zs", "Zl", "Zp")


def is_formula_like(text: str) -> bool:
    """Whether a spreadsheet could read ``text`` as a formula: it starts with = + - @ after
    any leading whitespace or control characters, counting compatibility forms (fullwidth
    ＝, small ﹫, superscript ⁺: NFKC) and minus look-alikes; or it starts with tab/CR/LF."""
    if text[:1] in ("\t", "\r", "\n"):
        return True  # a leading tab or line break is itself a known injection vector
    start = 0
    while start < len(text) and _is_blank_or_control(text[start]):
        start += 1
    if start == len(text):
        return False
    first = text[start]
    return unicodedata.normalize("NFKC", first)[:1] in FORMULA_STARTS or first in FORMULA_LOOK_ALIKES


def neutralise_cell(value: Any) -> Any:
    """Prefix formula-like text (see ``is_formula_like``) with a quote so spreadsheets do not run it.

    Numbers are left alone: a negative number is data, not a formula.
    """
    if isinstance(value, str) and is_formula_like(value):
        return "'" + value
    return value


def records_to_csv(records: Sequence[dict[str, Any]], fields: Sequence[str] | None = None) -> str:
    """CSV text of ``records`` with formula-like cells neutralised."""
    columns = list(fields or (records[0].keys() if records else RECORD_FIELDS))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    for record in records:
        writer.writerow({key: neutralise_cell(record.get(key)) for key in columns})
    return buffer.getvalue()


def dataframe_to_csv(frame: pd.DataFrame) -> str:
    """CSV of a shown table, formula-like text cells neutralised."""
    return records_to_csv(frame.to_dict("records"), list(frame.columns))


def _numbers(values: Iterable[Any]) -> list[float]:
    return [float(v) for v in values if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v))]


def mean_and_spread(values: Iterable[Any]) -> tuple[float | None, float | None, int]:
    """Mean, sample standard deviation (None for fewer than 2) and count of the numbers."""
    numbers = _numbers(values)
    if not numbers:
        return None, None, 0
    spread = statistics.stdev(numbers) if len(numbers) > 1 else None
    return statistics.fmean(numbers), spread, len(numbers)


def _done_groups(records: Sequence[dict[str, Any]], keys: Sequence[str]) -> dict[tuple, list[dict[str, Any]]]:
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for record in records:
        if record.get("status") == "done":
            groups.setdefault(tuple(record.get(key) for key in keys), []).append(record)
    return groups


def aggregate(records: Sequence[dict[str, Any]], keys: Sequence[str], figures: Sequence[str]) -> list[dict[str, Any]]:
    """Group done runs by ``keys``; per figure the mean with its 95% confidence interval
    (``<figure>_ci95_low`` / ``_ci95_high``, None under two repeats) and the repeat count ``n``."""
    rows = []
    for group_key, members in _done_groups(records, keys).items():
        row: dict[str, Any] = dict(zip(keys, group_key))
        row["n"] = len(members)
        row["requests_failed"] = sum(int(m.get("requests_failed") or 0) for m in members)
        # Still in flight when the graceful stop ended the test: neither done nor failed.
        row["requests_interrupted"] = sum(int(m.get("iterations_interrupted") or 0) for m in members)
        for figure in figures:
            interval = mean_interval(m.get(figure) for m in members)
            row[figure] = interval.mean
            row[f"{figure}_ci95_low"] = interval.ci95_low
            row[f"{figure}_ci95_high"] = interval.ci95_high
        rows.append(row)
    return rows


def split_warned(records: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(runs without a measurement warning, runs with one): means leave the second out by default."""
    kept = [r for r in records if not r.get("measurement_warnings")]
    return kept, [r for r in records if r.get("measurement_warnings")]


def cell_comparisons(
    records: Sequence[dict[str, Any]], keys: Sequence[str], figure: str
) -> list[dict[str, Any]]:
    """Every pair of cells (done runs grouped by ``keys``) that differ in one key only: the
    ratio of their ``figure`` means and whether it is significant (Welch's t-test on the
    repeats, p < 0.05; "n too small" under 3 repeats a side)."""
    groups = _done_groups(records, keys)
    rows = []
    # Numbers in numeric order (8 VUs before 32), so a ratio reads "higher over lower".
    cells = sorted(groups, key=lambda k: tuple((0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v)) for v in k))
    for index, first in enumerate(cells):
        for second in cells[index + 1:]:
            differing = [i for i, (a, b) in enumerate(zip(first, second)) if a != b]
            if len(differing) != 1:
                continue
            first_values = [m.get(figure) for m in groups[first]]
            second_values = [m.get(figure) for m in groups[second]]
            first_mean, second_mean = mean_interval(first_values).mean, mean_interval(second_values).mean
            if first_mean is None or second_mean is None:
                continue
            same = ", ".join(f"{keys[i]} {first[i]}" for i in range(len(keys)) if i not in differing and first[i] is not None)
            key = keys[differing[0]]
            rows.append({
                "figure": figure, "cell": f"{key} {second[differing[0]]} over {key} {first[differing[0]]}"
                + (f" ({same})" if same else ""),
                "ratio": _ratio(second_mean, first_mean),
                "significance": welch_test(second_values, first_values).verdict,
            })
    return rows


def grid_comparisons(
    records: Sequence[dict[str, Any]], specs: Sequence[dict[str, Any]], axes: Sequence[str], figure: str
) -> list[dict[str, Any]]:
    """:func:`cell_comparisons` over an experiment's grid axes (dotted spec paths such as
    ``workload.prompts``), read from each run's stored spec (``specs``, beside ``records``)."""
    if not axes:
        return []

    def axis_value(spec: dict[str, Any], path: str) -> Any:
        node: Any = spec
        for key in path.split("."):
            node = node.get(key) if isinstance(node, dict) else None
        return node if isinstance(node, (str, int, float, bool)) or node is None else str(node)

    keyed = [{**record, **{f"axis:{path}": axis_value(spec, path) for path in axes}}
             for record, spec in zip(records, specs)]
    rows = cell_comparisons(keyed, [f"axis:{path}" for path in axes], figure)
    for row in rows:
        row["cell"] = row["cell"].replace("axis:", "")
    return rows


def _seed_lookup(seed_rows: list[dict[str, Any]], match: dict[str, Any]) -> dict[str, Any] | None:
    return next((row for row in seed_rows if all(row.get(k) == v for k, v in match.items())), None)


def format_seconds(value: float | None) -> str:
    """Seconds as the seed wrote them: '11.3 ms', '4.73 s', '1m21s'."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if value < 1:
        return f"{value * 1000:.1f} ms"
    if value < 60:
        return f"{value:.2f} s"
    minutes, seconds = divmod(value, 60)
    return f"{int(minutes)}m{seconds:02.0f}s"


def format_rate(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:,.{digits}f}"


def format_share(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value * 100:.1f}%"


def with_interval(row: dict[str, Any], figure: str, formatter) -> str:  # noqa: ANN001
    """A figure of an aggregated row, formatted, with its 95% CI "[low, high]" when there are repeats."""
    text = formatter(row.get(figure))
    low, high = row.get(f"{figure}_ci95_low"), row.get(f"{figure}_ci95_high")
    if low is not None and high is not None and row.get(figure) is not None:
        text += f" [{formatter(low)}, {formatter(high)}]"
    return text


def exp1_table(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Experiment 1 with the seed's columns, ours beside the seed's (``seed ...`` columns)."""
    figures = ("output_tok_per_s", "req_per_s", "latency_avg_s", "latency_p95_s", "steady_output_tok_per_s")
    rows = []
    for row in sorted(aggregate(records, ("vus", "backend"), figures), key=lambda r: (r["vus"] or 0, r["backend"])):
        seed = _seed_lookup(SEED_EXP1, {"vus": row["vus"], "backend": row["backend"]}) or {}
        rows.append({
            "VUs": row["vus"], "server": SEED_SERVER_NAMES.get(row["backend"], row["backend"]),
            "throughput (tok/s)": with_interval(row, "output_tok_per_s", lambda v: format_rate(v, 1)),
            "req/s": with_interval(row, "req_per_s", format_rate),
            "avg latency": with_interval(row, "latency_avg_s", format_seconds),
            "p95 latency": with_interval(row, "latency_p95_s", format_seconds),
            # The seed's throughput is k6's (whole test, drain included); this one, the load window only.
            "steady throughput (tok/s)": with_interval(row, "steady_output_tok_per_s", lambda v: format_rate(v, 1)),
            "repeats": row["n"], "failed requests": row["requests_failed"],
            "interrupted at the end": row["requests_interrupted"],
            "seed throughput (tok/s)": format_rate(seed.get("output_tok_per_s"), 1),
            "seed req/s": format_rate(seed.get("req_per_s")),
            "seed avg latency": format_seconds(seed.get("latency_avg_s")),
            "seed p95 latency": format_seconds(seed.get("latency_p95_s")),
        })
    return pd.DataFrame(rows)


def exp2_table(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    figures = ("req_per_s", "latency_avg_s", "latency_p95_s", "latency_max_s", "response_cache_hit_rate")
    set_up = {"vllm": "vLLM direct", "vllm+cache": "vLLM + Redis"}
    rows = []
    for row in sorted(aggregate(records, ("prompts", "backend"), figures), key=lambda r: (r["prompts"] or 0, r["backend"])):
        seed = _seed_lookup(SEED_EXP2, {"prompts": row["prompts"], "backend": row["backend"]}) or {}
        rows.append({
            "PROMPTS": row["prompts"], "set-up": set_up.get(row["backend"], row["backend"]),
            "req/s": with_interval(row, "req_per_s", format_rate),
            "avg latency": with_interval(row, "latency_avg_s", format_seconds),
            "p95 latency": with_interval(row, "latency_p95_s", format_seconds),
            "max latency": with_interval(row, "latency_max_s", format_seconds),
            "cache hit rate": format_share(row.get("response_cache_hit_rate")),
            "repeats": row["n"], "failed requests": row["requests_failed"],
            "interrupted at the end": row["requests_interrupted"],
            "seed req/s": format_rate(seed.get("req_per_s")),
            "seed avg latency": format_seconds(seed.get("latency_avg_s")),
            "seed p95 latency": format_seconds(seed.get("latency_p95_s")),
            "seed max latency": format_seconds(seed.get("latency_max_s")),
        })
    return pd.DataFrame(rows)


def exp3_table(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    figures = ("req_per_s", "output_tok_per_s", "input_tok_per_s", "latency_avg_s", "latency_p95_s",
               "prefix_cache_hit_rate", "response_cache_hit_rate", "response_cache_hits")
    order = {"naive": 0, "vllm": 1, "vllm+cache": 2}
    rows = []
    for row in sorted(aggregate(records, ("backend",), figures), key=lambda r: order.get(r["backend"], 9)):
        seed = _seed_lookup(SEED_EXP3, {"backend": row["backend"]}) or {}
        rows.append({
            "server": SEED_SERVER_NAMES.get(row["backend"], row["backend"]),
            "req/s": with_interval(row, "req_per_s", format_rate),
            "output tok/s": with_interval(row, "output_tok_per_s", lambda v: format_rate(v, 1)),
            "input tok/s": with_interval(row, "input_tok_per_s", lambda v: format_rate(v, 1)),
            "avg latency": with_interval(row, "latency_avg_s", format_seconds),
            "p95 latency": with_interval(row, "latency_p95_s", format_seconds),
            "vLLM prefix hit": format_share(row.get("prefix_cache_hit_rate")) if row["backend"] != "naive" else "–",
            "Redis hit": format_share(row.get("response_cache_hit_rate")) if row["backend"].endswith("+cache") else "–",
            "repeats": row["n"], "failed requests": row["requests_failed"],
            "interrupted at the end": row["requests_interrupted"],
            "seed req/s": format_rate(seed.get("req_per_s")),
            "seed output tok/s": format_rate(seed.get("output_tok_per_s"), 0),
            "seed input tok/s": format_rate(seed.get("input_tok_per_s"), 0),
            "seed avg latency": format_seconds(seed.get("latency_avg_s")),
            "seed p95 latency": format_seconds(seed.get("latency_p95_s")),
            "seed vLLM prefix hit": format_share(seed.get("prefix_cache_hit_rate")),
            "seed Redis hit": "1/836" if row["backend"] == "vllm+cache" else "–",
        })
    return pd.DataFrame(rows)


SEED_TABLES = {"seed-exp1": exp1_table, "seed-exp2": exp2_table, "seed-exp3": exp3_table}


def mean_of(records: Sequence[dict[str, Any]], figure: str, **match: Any) -> float | None:
    """Mean of ``figure`` over done runs matching every ``key=value`` in ``match``."""
    mean, _, _ = mean_and_spread(
        r.get(figure) for r in records if r.get("status") == "done" and all(r.get(k) == v for k, v in match.items())
    )
    return mean


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def exp1_ratios(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """vLLM over naive throughput per VU count; throughput and latency growth from the lowest to highest VUs."""
    vus_values = sorted({r["vus"] for r in records if r.get("vus") is not None and r.get("status") == "done"})
    result: dict[str, Any] = {"vllm_over_naive_throughput": {}}
    for vus in vus_values:
        result["vllm_over_naive_throughput"][vus] = _ratio(
            mean_of(records, "output_tok_per_s", backend="vllm", vus=vus),
            mean_of(records, "output_tok_per_s", backend="naive", vus=vus),
        )
    if len(vus_values) >= 2:
        low, high = vus_values[0], vus_values[-1]
        for backend in ("naive", "vllm"):
            result[f"{backend}_throughput_growth_{low}_to_{high}_vus"] = _ratio(
                mean_of(records, "output_tok_per_s", backend=backend, vus=high),
                mean_of(records, "output_tok_per_s", backend=backend, vus=low),
            )
            result[f"{backend}_latency_growth_{low}_to_{high}_vus"] = _ratio(
                mean_of(records, "latency_avg_s", backend=backend, vus=high),
                mean_of(records, "latency_avg_s", backend=backend, vus=low),
            )
    return result


def exp2_ratios(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Cached over direct req/s and the cache hit rate, per PROMPTS."""
    result: dict[str, Any] = {}
    for prompts in sorted({r["prompts"] for r in records if r.get("prompts") is not None}):
        result[prompts] = {
            "cached_over_direct_req_per_s": _ratio(
                mean_of(records, "req_per_s", backend="vllm+cache", prompts=prompts),
                mean_of(records, "req_per_s", backend="vllm", prompts=prompts),
            ),
            "cache_hit_rate": mean_of(records, "response_cache_hit_rate", backend="vllm+cache", prompts=prompts),
            "max_latency_cached_over_direct": _ratio(
                mean_of(records, "latency_max_s", backend="vllm+cache", prompts=prompts),
                mean_of(records, "latency_max_s", backend="vllm", prompts=prompts),
            ),
        }
    return result


def exp3_ratios(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {
        "vllm_over_naive_req_per_s": _ratio(
            mean_of(records, "req_per_s", backend="vllm"), mean_of(records, "req_per_s", backend="naive")
        ),
        "vllm_prefix_cache_hit_rate": mean_of(records, "prefix_cache_hit_rate", backend="vllm"),
        "response_cache_hit_rate": mean_of(records, "response_cache_hit_rate", backend="vllm+cache"),
        "cached_over_direct_req_per_s": _ratio(
            mean_of(records, "req_per_s", backend="vllm+cache"), mean_of(records, "req_per_s", backend="vllm")
        ),
    }


def cost_per_million_output_tokens(output_tok_per_s: float | None, price_per_hour: float) -> float | None:
    """What a million output tokens cost at ``price_per_hour`` for the machine, at this throughput."""
    if not output_tok_per_s or output_tok_per_s <= 0:
        return None
    return price_per_hour / (output_tok_per_s * 3600) * 1_000_000
