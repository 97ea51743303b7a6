"""Bad input: every value a user can type reaches a clear message, and nothing is stored.

Covers the CLI (``python -m lab run --set ...``, in-process and two real subprocesses),
the run spec, model names, external target URLs, dataset files at run time, and the
safe defaults (loopback binds, argv lists only, Streamlit error details hidden).
Cases already covered elsewhere are listed in docs/results/reliability.md, not repeated here.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from lab import cli
from lab.run.steps import RunSteps
from lab.settings import Settings, get_settings
from lab.specs.schema import RunSpec
from lab.workloads.input_files import DatasetError
from services.processes import PROJECT_ROOT
from tests.support.source_files import syntax_tree

FIXTURES = PROJECT_ROOT / "tests" / "fixtures" / "datasets"
EXTERNAL = ["--set", 'grid.backend=["external"]', "--set", "backend=external"]


@pytest.fixture()
def private_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The CLI reads LAB_DATA_DIR through get_settings(): point it at an empty folder."""
    data_dir = tmp_path / "data"
    monkeypatch.setenv("LAB_DATA_DIR", str(data_dir))
    get_settings.cache_clear()
    yield data_dir
    get_settings.cache_clear()  # the session's settings come back from the restored env


def stored_anything(data_dir: Path) -> bool:
    return (data_dir / "lab.db").exists() or (data_dir / "runs").exists()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--set", "load.vus=0"], "load.vus: Input should be greater than or equal to 1"),
        (["--set", "load.vus=100000"], "load.vus: Input should be less than or equal to 1024"),
        (["--set", "load.vus=many"], "load.vus: Input should be a valid integer"),
        (["--set", "load.duration_s=-5"], "load.duration_s: Input should be greater than or equal to 1"),
        (["--set", "load.duration_s=1e9"], "load.duration_s: Input should be less than or equal to 21600"),
        (["--set", "load.duration_s=NaN"], "load.duration_s"),
        (["--set", "load.duration_s=Infinity"], "load.duration_s"),
        (["--set", "load.graceful_stop_s=-1"], "load.graceful_stop_s"),
        (["--set", "max_tokens=0"], "max_tokens: Input should be greater than or equal to 1"),
        (["--set", "max_tokens=1000000"], "max_tokens: Input should be less than or equal to 32768"),
        (["--set", "max_tokens=1.5"], "max_tokens"),
        (["--set", "warmup_requests=-1"], "warmup_requests"),
        (["--set", "temperature=5"], "temperature"),
        (["--set", "top_p=0"], "top_p"),
        (["--set", "random_seed=-1"], "random_seed"),
        (["--set", "repeats=0"], "repeats"),
        (["--set", "repeats=100000"], "repeats"),
        (["--set", "load.kind=ramping-vus"], "ramping-vus needs at least one stage"),
        (["--set", "load.kind=constant-arrival-rate"], "constant-arrival-rate needs rate_per_s"),
        (["--set", "load.kind=constant-arrival-rate", "--set", "load.rate_per_s=0"], "load.rate_per_s"),
        (["--set", "grid.load.vus=[]"], "grid axis 'load.vus' has no values"),
        (["--set", "grid.load.vus=[1,0]"], "vus=0: load.vus"),
        # 1,000 VU values x 10 repeats x 2 backends: refused before a cell is built, count and limit named.
        (
            ["--set", f"grid.load.vus={list(range(1, 1001))}", "--set", "repeats=10"],
            "this experiment would queue 20,000 runs (2,000 cells x 10 repeats); one launch may queue at most 300",
        ),
        (["--set", "load.nonsense=1"], "nonsense"),
        (["--set", "novalue"], "--set needs key=value"),
        (["--set", "workload.kind=custom"], "the custom workload needs a JSONL file"),
        (["--set", 'vllm.extra_args=["--api-key","x"]'], "flag '--api-key' is not allowed"),
        (["--set", "model=-rf"], "model name must not start with '-'"),
        (["--set", "model=--help"], "model name must not start with '-'"),
        (["--set", "model=$(id)"], "must not contain the character '$'"),
        (["--set", "model=m`reboot`"], "must not contain the character '`'"),
        (["--set", "model=a|b"], "must not contain the character '|'"),
        (["--set", "model=a b"], "whitespace or control characters"),
        (["--set", "model=/no/such/model"], "model folder not found: /no/such/model"),
        ([*EXTERNAL], "external backends need target_url"),
        ([*EXTERNAL, "--set", "target_url=http://169.254.169.254/"], "169.254.169.254 is a link-local address"),
        ([*EXTERNAL, "--set", "target_url=http://metadata.google.internal/"], "is a cloud metadata service"),
        ([*EXTERNAL, "--set", "target_url=http://[::ffff:169.254.169.254]:80"], "link-local"),
        ([*EXTERNAL, "--set", "target_url=http://10.0.0.5:8000"], "host '10.0.0.5' is not loopback"),
        ([*EXTERNAL, "--set", "target_url=http://192.168.1.20:8000"], "is not loopback"),
        ([*EXTERNAL, "--set", "target_url=http://0.0.0.0:8000"], "unspecified address"),
        ([*EXTERNAL, "--set", "target_url=file:///etc/passwd"], "must start with http:// or https://"),
        ([*EXTERNAL, "--set", "target_url=http://user:pw@127.0.0.1:8000"], "user name or password"),
    ],
)
def test_bad_cli_values_exit_2_with_a_clear_message_and_store_nothing(
    private_data_dir: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], message: str
) -> None:
    assert cli.main(["run", "--preset", "seed-exp1", "--quick", *arguments]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: ") and message in error, error
    assert len(error.splitlines()) == 1  # one line, no traceback
    assert not stored_anything(private_data_dir)


def test_an_unknown_preset_exits_2(private_data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", "--preset", "../../etc/passwd"]) == 2
    assert "unknown preset '../../etc/passwd'" in capsys.readouterr().err
    assert not stored_anything(private_data_dir)


@pytest.mark.integration  # starts `python -m lab run` as a process
@pytest.mark.parametrize(("value", "message"), [("load.vus=0", "load.vus"), ("model=-rf", "must not start with '-'")])
def test_the_real_cli_process_refuses_bad_values(tmp_path: Path, value: str, message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "lab", "run", "--preset", "seed-exp1", "--set", value],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "LAB_DATA_DIR": str(tmp_path / "data")},
    )
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and message in result.stderr and "Traceback" not in result.stderr
    assert not stored_anything(tmp_path / "data")


# --------------------------------------------------------------------------- datasets at run time


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ({"kind": "sharegpt-chat", "dataset_path": str(FIXTURES / "broken.json")}, "invalid JSON at character"),
        ({"kind": "sharegpt-chat", "dataset_path": str(FIXTURES / "not_utf8.json")}, "not UTF-8"),
        ({"kind": "sharegpt-chat", "dataset_path": str(FIXTURES / "not_an_array.json")}, "expected a JSON array"),
        ({"kind": "sharegpt-chat", "dataset_path": "/no/such/dataset.json"}, "dataset file not found"),
        ({"kind": "custom", "requests_path": str(FIXTURES / "custom_broken_line.jsonl")}, "line 3: not valid JSON"),
        ({"kind": "custom", "requests_path": str(FIXTURES / "not_utf8.json")}, "not UTF-8"),
    ],
)
def test_a_bad_dataset_fails_before_any_load_and_writes_no_request_file(
    tmp_path: Path, workload: dict, message: str
) -> None:
    spec = RunSpec.model_validate(
        {"backend": "external", "target_url": "http://127.0.0.1:9", "model": "stub", "workload": workload}
    )
    steps = RunSteps(engine=None, settings=Settings(data_dir=tmp_path), services=None, run_id=7)  # type: ignore[arg-type]  # never reached
    steps.run_dir.mkdir(parents=True)
    with pytest.raises(DatasetError, match=message):
        steps.prepare_workload(spec)
    assert not (steps.run_dir / "requests.json").exists()


def test_a_non_sharegpt_dataset_yields_no_session_and_a_clear_run_failure(tmp_path: Path) -> None:
    from lab.run.decisions import RunFailed
    from lab.workloads.sharegpt_chat import conversations as _conversations

    spec = RunSpec.model_validate(
        {
            "backend": "external",
            "target_url": "http://127.0.0.1:9",
            "model": "stub",
            "workload": {"kind": "sharegpt-chat", "dataset_path": str(FIXTURES / "not_sharegpt.json")},
        }
    )
    steps = RunSteps(engine=None, settings=Settings(data_dir=tmp_path), services=None, run_id=8)  # type: ignore[arg-type]  # never reached
    steps.run_dir.mkdir(parents=True)
    _conversations.cache_clear()
    with pytest.raises((RunFailed, DatasetError), match="no conversation in the dataset can be replayed"):
        steps.prepare_workload(spec)
    assert not (steps.run_dir / "requests.json").exists()


# --------------------------------------------------------------------------- safe defaults


@pytest.mark.parametrize("kind", ["naive", "vllm", "llamacpp", "cache-proxy"])
def test_every_http_service_binds_loopback(kind: str, tmp_path: Path) -> None:
    from lab.backends import BACKENDS, default_service_config
    from services.catalog import build_service, cache_proxy_config

    model = str(PROJECT_ROOT / "models")  # any existing folder passes name validation
    if kind in BACKENDS:
        if kind == "llamacpp" and importlib.util.find_spec("llama_cpp") is None:
            pytest.skip("llama-cpp-python is not installed")
        config = default_service_config(kind, model=model, settings=Settings())
    else:
        config = cache_proxy_config(upstream_url="http://127.0.0.1:1", redis_url="redis://127.0.0.1:2/0")
    service = build_service(kind, config, log_path=tmp_path / "x.log", port=12345)
    argv = service.resolved_argv()
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv.count("--host") == 1 and service.url == "http://127.0.0.1:12345"


def test_redis_binds_loopback_in_protected_mode(tmp_path: Path) -> None:
    from services.catalog import build_service, redis_config

    argv = build_service("redis", redis_config(), log_path=tmp_path / "r.log", port=12346).resolved_argv()
    assert argv[argv.index("--bind") + 1] == "127.0.0.1"
    assert argv[argv.index("--protected-mode") + 1] == "yes"


def test_the_lab_binds_loopback_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAB_HOST", raising=False)
    assert Settings().host == "127.0.0.1"
    config_path = PROJECT_ROOT / ".streamlit" / "config.toml"
    if config_path.is_file():
        assert tomllib.loads(config_path.read_text())["server"].get("address", "127.0.0.1") == "127.0.0.1"


def test_streamlit_hides_error_details_from_users() -> None:
    config_path = PROJECT_ROOT / ".streamlit" / "config.toml"
    if not config_path.is_file():
        pytest.skip(".streamlit/config.toml is not written yet")
    value = tomllib.loads(config_path.read_text())["client"]["showErrorDetails"]
    assert value in (False, "none", "false")


def python_sources() -> list[Path]:
    return sorted(path for folder in ("lab", "services", "db") for path in (PROJECT_ROOT / folder).rglob("*.py"))


def test_processes_are_started_from_argv_lists_never_a_shell() -> None:
    offences = []
    for path in python_sources():
        for node in ast.walk(syntax_tree(path)):
            if not isinstance(node, ast.Call):
                continue
            for keyword in node.keywords:
                if keyword.arg == "shell" and not (
                    isinstance(keyword.value, ast.Constant) and keyword.value.value is False
                ):
                    offences.append(f"{path.relative_to(PROJECT_ROOT)}:{node.lineno} shell=...")
            function = node.func
            name = f"{getattr(function.value, 'id', '')}.{function.attr}" if isinstance(function, ast.Attribute) else ""
            if name in ("os.system", "os.popen", "subprocess.getoutput", "subprocess.getstatusoutput"):
                offences.append(f"{path.relative_to(PROJECT_ROOT)}:{node.lineno} {name}")
    assert len(python_sources()) > 20 and not offences, offences
