"""Comparison tables against the seed, ratios, cost and spreadsheet-safe CSV."""

from __future__ import annotations

import csv
import io
import sys
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.analysis.aggregation import mean_and_spread
from lab.analysis.cost import cost_per_million_output_tokens
from lab.analysis.safe_csv import neutralise_cell, records_to_csv
from lab.analysis.seed import exp1_ratios, exp2_ratios
from lab.backends import SeedSetup
from lab.report.formatting import format_seconds
from pages.view.tables import seed_comparison_table


def record(**values):
    base = {"status": "done", "requests_failed": 0}
    return {**base, **values}


EXP1 = [
    record(backend="naive", vus=1, output_tok_per_s=20.0, req_per_s=0.16, latency_avg_s=6.0, latency_p95_s=6.5),
    record(backend="naive", vus=1, output_tok_per_s=22.0, req_per_s=0.17, latency_avg_s=5.8, latency_p95_s=6.2),
    record(backend="vllm", vus=1, output_tok_per_s=15.0, req_per_s=0.12, latency_avg_s=8.0, latency_p95_s=8.5),
    record(backend="naive", vus=8, output_tok_per_s=21.0, req_per_s=0.16, latency_avg_s=45.0, latency_p95_s=50.0),
    record(backend="vllm", vus=8, output_tok_per_s=60.0, req_per_s=0.47, latency_avg_s=16.0, latency_p95_s=17.0),
    record(backend="vllm", vus=8, status="failed", output_tok_per_s=None),
]


def test_exp1_table_has_the_seeds_columns_and_figures_beside() -> None:
    table = seed_comparison_table("seed-exp1", EXP1)
    for column in ("VUs", "server", "throughput (tok/s)", "req/s", "avg latency", "p95 latency"):
        assert column in table.columns
    naive_1 = table[(table["VUs"] == 1) & (table["server"] == "Transformers")].iloc[0]
    assert naive_1["repeats"] == 2
    # 95% CI, t with 1 df on the log scale (a rate has no negative bound): 21.0 * exp(+-12.7 * 1.0 / 21.0).
    assert naive_1["throughput (tok/s)"].startswith("21.0 [11.5, 38.5]")
    assert naive_1["seed throughput (tok/s)"] == "27.0"
    assert naive_1["seed p95 latency"] == "6.51 s"
    assert len(table) == 4  # the failed run is not averaged in


def test_exp1_ratios() -> None:
    ratios = exp1_ratios(EXP1)
    speedup = ratios.speedup_at(1)
    assert speedup is not None and round(speedup, 3) == round(15 / 21, 3)
    vllm_growth = ratios.growth_of(SeedSetup.VLLM, "output_tok_per_s")
    assert vllm_growth is not None and vllm_growth.value is not None
    assert (vllm_growth.low_vus, vllm_growth.high_vus) == (1, 8) and round(vllm_growth.value, 2) == 4.0
    naive_growth = ratios.growth_of(SeedSetup.NAIVE, "latency_avg_s")
    assert naive_growth is not None and naive_growth.value is not None
    assert (naive_growth.low_vus, naive_growth.high_vus) == (1, 8) and round(naive_growth.value, 2) == round(
        45 / 5.9, 2
    )


def test_exp2_and_exp3_tables() -> None:
    records = [
        record(backend="vllm", prompts=50, req_per_s=2.0, latency_avg_s=4.0, latency_p95_s=4.5, latency_max_s=5.0),
        record(
            backend="vllm+cache",
            prompts=50,
            req_per_s=500.0,
            latency_avg_s=0.01,
            latency_p95_s=0.02,
            latency_max_s=5.1,
            response_cache_hit_rate=0.99,
        ),
    ]
    table = seed_comparison_table("seed-exp2", records)
    assert list(table["set-up"]) == ["vLLM direct", "vLLM + Redis"]
    assert table.iloc[1]["seed req/s"] == "2,811.00"
    assert table.iloc[1]["cache hit rate"] == "99.0%"
    assert exp2_ratios(records)[50].cached_over_direct.value == 250.0
    chat = seed_comparison_table("seed-exp3", [record(backend="vllm", req_per_s=1.0, prefix_cache_hit_rate=0.7)])
    assert chat.iloc[0]["vLLM prefix hit"] == "70.0%" and chat.iloc[0]["seed vLLM prefix hit"] == "82.1%"


def test_csv_neutralises_formula_cells_but_not_numbers() -> None:
    rows = [{"run_id": 1, "notes": '=HYPERLINK("x")', "tags": "+1", "who": "@me", "delta": -3.5, "ok": "-"}]
    parsed = list(csv.DictReader(io.StringIO(records_to_csv(rows))))
    assert parsed[0]["notes"] == '\'=HYPERLINK("x")'
    assert parsed[0]["tags"] == "'+1" and parsed[0]["who"] == "'@me" and parsed[0]["ok"] == "'-"
    assert parsed[0]["delta"] == "-3.5"


def test_formatting_and_cost() -> None:
    assert format_seconds(0.0113) == "11.3 ms"
    assert format_seconds(4.734) == "4.73 s"
    assert format_seconds(81.0) == "1m21s"
    assert format_seconds(None) == "–"
    assert mean_and_spread([1.0, 3.0, None]) == (2.0, 1.4142135623730951, 2)
    # 3,600 tok/s for an hour is 12.96 M tokens; at 1.296 per hour that is 0.1 per million.
    cost = cost_per_million_output_tokens(3600.0, 1.296)
    assert cost is not None and round(cost, 6) == 0.1
    assert cost_per_million_output_tokens(0.0, 1.0) is None


# -- CSV neutralisation as a property: any blank/control run, then any form of = + - @ -----
_FORMULA_FORMS = sorted(
    c
    for c in map(chr, range(sys.maxunicode + 1))
    if unicodedata.normalize("NFKC", c)[:1] in "=+-@" and unicodedata.normalize("NFKC", c)
)
_BLANKS = [c for c in map(chr, range(0x3100)) if c.isspace() or unicodedata.category(c) in ("Cc", "Cf", "Zs")]
_BLANKS += ["\u200b", "\ufeff", "\u2028", "\u3000"]


@given(
    blanks=st.lists(st.sampled_from(_BLANKS), max_size=6).map("".join),
    sign=st.sampled_from([*_FORMULA_FORMS, "−"]),
    rest=st.text(max_size=30),
)
def test_formula_after_any_blank_or_control_prefix_is_neutralised(blanks: str, sign: str, rest: str) -> None:
    value = blanks + sign + rest
    assert neutralise_cell(value) == "'" + value
    parsed = list(csv.DictReader(io.StringIO(records_to_csv([{"cell": value}]))))
    assert parsed[0]["cell"].startswith("'")


_SIGN_LOOK_ALIKES = "\u2212\u2796\u2795\u2010\u2011\u2012\u2013\u2014\u2015"


@given(
    first=st.characters(
        blacklist_categories=("Cc", "Cf", "Cs", "Zs", "Zl", "Zp"),
        blacklist_characters="".join(_FORMULA_FORMS) + _SIGN_LOOK_ALIKES,
    ).filter(lambda c: not c.isspace()),
    rest=st.text(max_size=30),
)
def test_text_without_a_formula_start_is_kept_as_is(first: str, rest: str) -> None:
    # Ordinary text (letters, digits, quotes, CJK, emoji) is never changed, whatever follows.
    assert neutralise_cell(first + rest) == first + rest


@settings(max_examples=50)
@given(st.floats(allow_nan=False) | st.integers())
def test_numbers_are_never_quoted(number: float) -> None:
    assert neutralise_cell(number) == number


def test_named_formula_look_alikes() -> None:
    for value in (
        " =1+1",
        "\n=cmd|' /C calc'!A0",
        "\t@SUM(A1)",
        "\r+1",
        '＝HYPERLINK("x")',
        "＋1",
        "－1",
        "＠me",
        "\u200b=1",
        "\ufeff-1",
        "\u3000=1",
        "﹦1",
        "⁼1",
        "\u2212 1",
    ):
        assert neutralise_cell(value) == "'" + value, repr(value)
    for value in ("hello", "1.5", "a=b", "", "   ", "'=already quoted"):
        assert neutralise_cell(value) == value, repr(value)


def test_grid_comparisons_read_the_axes_from_each_runs_spec(capsys: pytest.CaptureFixture[str]) -> None:
    from lab.analysis.compare import grid_comparisons
    from lab.cli import print_grid_ratios

    records = [{"status": "done", "req_per_s": rate, "output_tok_per_s": None} for rate in (2.4, 3300.0, 2.3, 5.0)]
    specs = [
        {"backend": backend, "workload": {"prompts": prompts}}
        for backend, prompts in (("vllm", 50), ("vllm+cache", 50), ("vllm", 1000), ("vllm+cache", 1000))
    ]
    rows = {
        row["cell"]: row["ratio"]
        for row in grid_comparisons(records, specs, ["backend", "workload.prompts"], "req_per_s")
    }
    assert rows["backend vllm+cache over backend vllm (workload.prompts 50)"] == pytest.approx(1375.0)
    assert rows["backend vllm+cache over backend vllm (workload.prompts 1000)"] == pytest.approx(5.0 / 2.3)
    assert grid_comparisons(records, specs, [], "req_per_s") == []
    print_grid_ratios(records, specs, ["backend", "workload.prompts"])
    printed = capsys.readouterr().out
    assert "req/s: backend vllm+cache over backend vllm (workload.prompts 50): 1,375.00x" in printed


def test_lab_run_ratio_lines_carry_their_interval(capsys: pytest.CaptureFixture[str]) -> None:
    from lab.cli import print_grid_ratios

    records = [
        {"status": "done", "experiment_id": 1, "repeat_index": r, "req_per_s": rate, "output_tok_per_s": None}
        for r, rate in ((0, 2.4), (0, 3300.0), (1, 2.2), (1, 3100.0), (2, 2.5), (2, 3500.0))
    ]
    specs = [{"backend": backend} for backend in ("vllm", "vllm+cache") * 3]
    print_grid_ratios(records, specs, ["backend"])
    printed = capsys.readouterr().out
    line = next(line for line in printed.splitlines() if "backend vllm+cache over backend vllm" in line)
    low, high = [float(x.rstrip("x]").replace(",", "")) for x in line.split("[95% CI ")[1].split(" (")[0].split(", ")]
    assert 0 < low < 3300 / 2.4 < high


def test_the_cost_table_shows_the_backend_and_only_the_settings_that_differ() -> None:
    from lab.analysis.cost import cost_table

    same = {"workload": "number-story", "model": "m", "max_tokens": 128}
    table = cost_table([{**rec, **same} for rec in EXP1], price_per_hour=1.0)
    assert list(table.columns) == ["backend", "vus", "n", "output_tok_per_s", "cost_per_million_output_tokens"]
    assert len(table) == 4  # two backends at two loads; the failed run left out
