"""The machine record: CPU features from a (faked) /proc/cpuinfo, what "best" resolved to, and
the differences between two sets of runs."""

from __future__ import annotations

from pathlib import Path

from db.models import MACHINE_COLUMNS, Run
from lab.backends import get_backend
from lab.measurement.machine_record import MachineRecord, feature_differences, has_native_bf16, read_cpu_features
from tests.support.cpuinfo import AVX2_ONLY_FLAGS, BF16_FLAGS, fake_cpuinfo


def test_the_record_s_fields_are_the_run_s_columns_in_order() -> None:
    assert MachineRecord.names() == MACHINE_COLUMNS
    assert all(name in Run.__table__.c for name in MACHINE_COLUMNS)


def test_cpu_features_come_from_the_cpuinfo_file_given(tmp_path: Path) -> None:
    features = read_cpu_features(fake_cpuinfo(tmp_path, "bf16", flags=BF16_FLAGS))
    record = MachineRecord.capture(features=features, reference_kernel_gflops=61.9, backend_settings={})
    assert record.cpu_model_name == "AMD EPYC"
    assert record.cpu_family == "AuthenticAMD family 25 model 1"
    assert (record.cpu_avx2, record.cpu_avx512, record.cpu_avx512_bf16, record.cpu_amx) == (True, True, True, False)
    assert record.instruction_sets_text() == "AVX2 yes, AVX-512 yes, AVX-512 BF16 yes, AMX no"
    assert has_native_bf16(record) is True


def test_an_unreadable_cpuinfo_records_nothing_rather_than_a_guess(tmp_path: Path) -> None:
    record = MachineRecord.capture(
        features=read_cpu_features(tmp_path / "absent"), reference_kernel_gflops=None, backend_settings={}
    )
    assert not record.recorded
    assert record.instruction_sets_text() == "not recorded"
    assert has_native_bf16(record) is None


def test_resolved_settings_are_read_back_from_the_recorded_launch() -> None:
    argv = ["python", "-m", "vllm", "--dtype", "float32", "--block-size", "32", "--block-size=64"]
    env = {"VLLM_CPU_OMP_THREADS_BIND": "auto", "VLLM_CPU_KVCACHE_SPACE": "2"}
    settings = get_backend("vllm").resolved_settings(argv, env)
    # The last --block-size wins, as in vLLM's own parser; reserved CPUs were left to vLLM.
    assert settings == {"dtype": "float32", "block_size": "64", "threads_bind": "auto", "kv_cache_gib": "2"}
    assert get_backend("naive+cache").resolved_settings(["--dtype", "bfloat16", "--torch-threads", "1"], {}) == {
        "dtype": "bfloat16",
        "threads": "1",
    }
    record = MachineRecord.capture(
        features=read_cpu_features(Path("/absent")), reference_kernel_gflops=None, backend_settings=settings
    )
    assert record.backend_settings == "dtype=float32, block_size=64, threads_bind=auto, kv_cache_gib=2"
    assert record.settings()["dtype"] == "float32"


def test_a_runs_csv_row_reads_back_as_the_record() -> None:
    row = {
        "cpu_model_name": "AMD EPYC",
        "cpu_avx2": "True",
        "cpu_avx512": "False",
        "cpu_avx512_bf16": "",
        "reference_kernel_gflops": "61.9",
        "backend_settings": "dtype=float32",
    }
    record = MachineRecord.from_record(row)
    assert (record.cpu_avx2, record.cpu_avx512, record.cpu_avx512_bf16) == (True, False, None)
    assert record.reference_kernel_gflops == 61.9


def test_two_machines_of_one_name_differ_in_avx512_bf16(tmp_path: Path) -> None:
    plain = MachineRecord.capture(
        features=read_cpu_features(fake_cpuinfo(tmp_path, "a", flags=AVX2_ONLY_FLAGS)),
        reference_kernel_gflops=60.0,
        backend_settings={},
    )
    bf16 = MachineRecord.capture(
        features=read_cpu_features(fake_cpuinfo(tmp_path, "b", flags=BF16_FLAGS)),
        reference_kernel_gflops=60.0,
        backend_settings={},
    )
    differences = {d.feature: (d.first, d.second) for d in feature_differences([plain], [bf16])}
    assert differences == {"AVX-512": ("no", "yes"), "AVX-512 BF16": ("no", "yes")}
    assert feature_differences([plain], [plain]) == []
    # A set of runs without a record is never "the same machine".
    assert "AVX-512 BF16" in {d.feature for d in feature_differences([plain], [MachineRecord()])}
