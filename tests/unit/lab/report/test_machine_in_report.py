"""The report's environment table shows the CPU's instruction sets and what each backend's
"best" resolved to; a hardware verdict names the feature it depends on."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lab.analysis.compare import RECORD_FIELDS
from lab.analysis.interval_verdicts import Verdict
from lab.measurement.machine_record import MachineRecord, read_cpu_features
from lab.report import write_report
from lab.report.claims import evaluate_claims
from lab.report.seal import read_seal, report_files, seal_problems
from tests.support.cpuinfo import AVX2_ONLY_FLAGS, fake_cpuinfo

ENVIRONMENT = {"cpu_model": "AMD EPYC", "cpu_count": 2, "gpu_model": None, "lab_git_commit": "189eeba"}
SETTINGS = {
    "vllm": {"dtype": "float32", "block_size": "32", "threads_bind": "auto", "kv_cache_gib": "2"},
    "naive": {"dtype": "bfloat16", "threads": "1"},
}


def _records(cpuinfo: Path | None) -> list[dict[str, Any]]:
    """Experiment 1 at 1 VU, four rounds, vLLM slower than the naive server (a 2-core CPU's figures)."""
    rows = []
    rates = [
        (backend, rate)
        for naive in (11.0, 11.5, 11.2, 10.9)
        for backend, rate in (("naive", naive), ("vllm", 0.7 * naive))
    ]
    for repeat, (backend, rate) in enumerate(rates):
        row: dict[str, Any] = {name: None for name in RECORD_FIELDS}
        machine = (
            MachineRecord.capture(
                features=read_cpu_features(cpuinfo), reference_kernel_gflops=61.9, backend_settings=SETTINGS[backend]
            )
            if cpuinfo is not None
            else MachineRecord()
        )
        row.update(machine.columns())
        row.update(
            run_id=repeat + 1,
            experiment_id=1,
            preset="seed-exp1",
            backend=backend,
            status="done",
            vus=1,
            repeat_index=repeat // 2,
            cell_label=f"backend={backend} vus=1",
            output_tok_per_s=rate,
            req_per_s=rate / 128,
            latency_avg_s=128 / rate,
            requests_failed=0,
            backend_cpu_percent_avg=99.0,
        )
        rows.append(row)
    return rows


def test_the_environment_table_shows_instruction_sets_and_resolved_settings(tmp_path: Path) -> None:
    records = _records(fake_cpuinfo(tmp_path, "cpuinfo", flags=AVX2_ONLY_FLAGS))
    written = write_report(
        records_by_preset={"seed-exp1": records},
        experiments_meta={"seed-exp1": {"name": "exp1", "scale": "quick", "ids": [1]}},
        environment=ENVIRONMENT,
        output_dir=tmp_path / "report",
        generated_at=datetime(2026, 12, 3, tzinfo=UTC),
        write_png=False,
    )
    readme = written["README.md"].read_text(encoding="utf-8")
    assert "| CPU family | AuthenticAMD family 25 model 1 |" in readme
    assert "| instruction sets | AVX2 yes, AVX-512 no, AVX-512 BF16 no, AMX no |" in readme
    assert "| fixed-kernel speed (one core, float32 matrix products) | 61.9 GFLOP/s |" in readme
    assert "| vllm: resolved settings | dtype=float32, block_size=32, threads_bind=auto, kv_cache_gib=2 |" in readme
    assert "| naive: resolved settings | dtype=bfloat16, threads=1 |" in readme
    # The hardware verdict names the feature its dtype was chosen by.
    assert "vLLM ran float32: this CPU has no AVX-512 BF16" in readme
    runs_csv = written["runs.csv"].read_text(encoding="utf-8")
    assert runs_csv.splitlines()[0].startswith("run_id,") and "cpu_avx512_bf16" in runs_csv.splitlines()[0]
    # Sealed as written (lab.report.seal): the documents check names any later edit by hand.
    assert seal_problems(tmp_path / "report", report_files(tmp_path / "report")) == []
    assert sorted(read_seal(tmp_path / "report")) == ["README.md", "report.html", "runs.csv"]


def test_a_hardware_verdict_names_the_feature_and_old_runs_say_not_recorded(tmp_path: Path) -> None:
    verdicts = evaluate_claims({"seed-exp1": _records(fake_cpuinfo(tmp_path, "c", flags=AVX2_ONLY_FLAGS))}, ENVIRONMENT)
    speedup = next(v for v in verdicts if v["key"] == "exp1-speedup-1vu")
    assert speedup["verdict"] == Verdict.NOT_HELD_HARDWARE
    assert "vLLM ran float32: this CPU has no AVX-512 BF16 (nor AMX)" in str(speedup["bound"])
    old = next(v for v in evaluate_claims({"seed-exp1": _records(None)}, ENVIRONMENT) if v["key"] == "exp1-speedup-1vu")
    assert "AVX-512" not in str(old["bound"])
    written = write_report(
        records_by_preset={"seed-exp1": _records(None)},
        experiments_meta={"seed-exp1": {"name": "exp1", "scale": "quick", "ids": [1]}},
        environment=ENVIRONMENT,
        output_dir=tmp_path / "old",
        generated_at=datetime(2026, 12, 3, tzinfo=UTC),
        write_png=False,
    )
    assert "| instruction sets | not recorded |" in written["README.md"].read_text(encoding="utf-8")
